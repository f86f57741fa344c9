/** An error chatd answered: `{"error": {"code", "message"}}` with an HTTP status. */
export declare class ChatdError extends Error {
    /** chatd's error code: `run_active`, `queue_full`, `not_found`, `unauthorized`, … */
    readonly code: string;
    /** The HTTP status (0 when none came back: the network). */
    readonly status: number;
    /** The body as chatd sent it. */
    readonly responseBody: string | undefined;
    /** Same as status, under the name the SDK's APICallError uses. */
    get statusCode(): number;
    constructor(code: string, message: string, status: number, responseBody?: string);
}
/** A ChatdError from a status and body text (chatd's JSON, or anything a proxy sent). */
export declare function errorFromBody(status: number, text: string): ChatdError;
/** A ChatdError from a non-2xx Response. */
export declare function errorFromResponse(res: Response): Promise<ChatdError>;
/** Whether err is the network's (fetch's TypeError), not an answer. */
export declare function isNetworkError(err: unknown): boolean;
export declare function isAbortError(err: unknown): boolean;
/** Whether a refusal may go away by itself: worth retrying with backoff. */
export declare function isRetryableStatus(status: number): boolean;
/**
 * chatd's code of an error useChat reports: a ChatdError's `.code`, or the code that
 * starts the text of a stream's `error` part (a failed run: "<code>: <message>"), which
 * the SDK turns into a plain Error. undefined when there is none.
 */
export declare function chatdErrorCode(err: unknown): string | undefined;
