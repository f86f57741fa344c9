import type { UIMessage, UIMessageChunk } from 'ai';
export declare class Ledger {
    /** The run's id (the start chunk's messageId), once seen. */
    runId: string | undefined;
    started: boolean;
    /** A terminal chunk (finish, abort, error) went out: the stream is over. */
    ended: boolean;
    private steps;
    private stepsEnded;
    private texts;
    private once;
    private preliminary;
    private parts;
    private pass;
    /** A new connection begins: its replay is counted from the run's start. */
    newPass(): void;
    /** What of chunk to pass on (null: the SDK has it already). */
    accept(c: UIMessageChunk): UIMessageChunk | null;
    private first;
    /**
     * The chunks that bring what the SDK holds up to the stored message (the run ended
     * while no connection followed it): the rest of each text, parts not seen, tool
     * results, then the step's end and finish. Parts are matched in order.
     */
    completion(stored: UIMessage | undefined, end: UIMessageChunk): UIMessageChunk[];
}
