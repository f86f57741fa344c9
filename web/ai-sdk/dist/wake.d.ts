export interface BackoffOptions {
    /** The first wait, in ms (default 250). */
    initialMs?: number;
    /** The longest wait, in ms (default 10000). */
    maxMs?: number;
}
/** The wait before reconnect attempt n (0-based): doubling, capped, ±50% jitter. */
export declare function backoffDelay(n: number, { initialMs, maxMs }?: BackoffOptions): number;
/** The page's events that mean "try now". */
export declare class Waker {
    private waiters;
    private off;
    constructor(hooks?: {
        onOnline?: () => void;
        onUnload?: () => void;
    });
    /** Ends every wait now. */
    wake(): void;
    wait(f: () => void): () => void;
    close(): void;
}
/** Waits ms, or until waker wakes; rejects when signal aborts. */
export declare function sleep(ms: number, waker: Waker | undefined, signal?: AbortSignal): Promise<void>;
