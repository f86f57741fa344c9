// Waiting between reconnects: jittered exponential backoff, cut short when the page comes
// back (online, visible, focused). In Node (no window, no document) only the timer runs.

export interface BackoffOptions {
  /** The first wait, in ms (default 250). */
  initialMs?: number;
  /** The longest wait, in ms (default 10000). */
  maxMs?: number;
}

/** The wait before reconnect attempt n (0-based): doubling, capped, ±50% jitter. */
export function backoffDelay(n: number, { initialMs = 250, maxMs = 10000 }: BackoffOptions = {}): number {
  const base = Math.min(maxMs, initialMs * 2 ** Math.min(n, 20));
  return Math.round(base * (0.5 + Math.random()));
}

/** The page's events that mean "try now". */
export class Waker {
  private waiters = new Set<() => void>();
  private off: Array<() => void> = [];

  constructor(hooks: { onOnline?: () => void; onUnload?: () => void } = {}) {
    const g = globalThis as unknown as {
      addEventListener?: (t: string, f: () => void) => void;
      removeEventListener?: (t: string, f: () => void) => void;
      document?: { visibilityState?: string; addEventListener?: (t: string, f: () => void) => void; removeEventListener?: (t: string, f: () => void) => void };
    };
    const on = (target: typeof g | NonNullable<typeof g.document>, type: string, f: () => void) => {
      if (typeof target.addEventListener !== 'function') return;
      target.addEventListener(type, f);
      this.off.push(() => target.removeEventListener?.(type, f));
    };
    // Only a page has these: in Node globalThis has no 'online' to send.
    if (typeof (g as { window?: unknown }).window !== 'undefined') {
      on(g, 'online', () => {
        hooks.onOnline?.();
        this.wake();
      });
      on(g, 'focus', () => this.wake());
      on(g, 'pagehide', () => hooks.onUnload?.());
      on(g, 'beforeunload', () => hooks.onUnload?.());
      on(g, 'pageshow', () => this.wake());
    }
    if (g.document) {
      on(g.document, 'visibilitychange', () => {
        if (g.document?.visibilityState === 'visible') this.wake();
      });
    }
  }

  /** Ends every wait now. */
  wake(): void {
    const ws = [...this.waiters];
    this.waiters.clear();
    for (const w of ws) w();
  }

  wait(f: () => void): () => void {
    this.waiters.add(f);
    return () => this.waiters.delete(f);
  }

  close(): void {
    for (const f of this.off) f();
    this.off = [];
    this.wake();
  }
}

/** Waits ms, or until waker wakes; rejects when signal aborts. */
export function sleep(ms: number, waker: Waker | undefined, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    let cancelWake = () => {};
    const finish = () => {
      clearTimeout(t);
      cancelWake();
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = () => {
      finish();
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      finish();
      resolve();
    }, ms);
    cancelWake = waker?.wait(() => {
      finish();
      resolve();
    }) ?? (() => {});
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
