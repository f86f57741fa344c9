import { DefaultChatTransport, type HttpChatTransportInitOptions, type UIMessage, type UIMessageChunk, type ChatTransport } from 'ai';
import { type BackoffOptions } from './wake.js';
type SendOptions<M extends UIMessage> = Parameters<ChatTransport<M>['sendMessages']>[0];
type ReconnectOptions<M extends UIMessage> = Parameters<ChatTransport<M>['reconnectToStream']>[0];
export interface ChatdChatTransportOptions<M extends UIMessage> extends HttpChatTransportInitOptions<M> {
    /**
     * When the SDK aborts a stream (useChat's stop()), stop the run on the server too
     * (POST {api}/{id}/stop), for every client. Default true.
     */
    stopOnAbort?: boolean;
    /** Backoff between reconnects of a broken stream. */
    reconnect?: BackoffOptions;
    /** Called on every reconnect of a broken stream (for logs and tests). */
    onReconnect?: (info: {
        chatId: string;
        attempt: number;
        error: unknown;
        delayMs: number;
    }) => void;
    /**
     * A stream's connection that brings no byte for this long is taken for dead (a network
     * that changed under it, a NAT that forgot it: TCP may not notice for minutes) and is
     * replaced. chatd sends a comment line every 15 s while a run is quiet. Default 45000;
     * 0 turns it off.
     */
    idleTimeoutMs?: number;
}
/**
 * A ChatTransport for chatd, in place of DefaultChatTransport (the same options and the
 * same requests). On top of it:
 * - useChat's stop() stops the run for everyone (POST {api}/{id}/stop);
 * - a stream that breaks or ends before the run's end is resumed, with jittered backoff,
 *   at once on `online`, focus and visibility, and passes on only what the SDK did not
 *   have; only the run's finish, abort or error ends it;
 * - chatd's errors are ChatdErrors: the message starts with the code, `.code` has it.
 */
export declare class ChatdChatTransport<M extends UIMessage = UIMessage> extends DefaultChatTransport<M> {
    private readonly userFetch;
    private readonly stopOnAbort;
    private readonly backoff;
    private readonly onReconnect;
    private readonly captured;
    private readonly open;
    private readonly stops;
    private readonly resumes;
    private readonly pending;
    private readonly detached;
    private readonly idleTimeoutMs;
    /** When each connection (by its request's signal) last brought a byte, or started. */
    private readonly lastByte;
    private readonly waker;
    private unloading;
    constructor(options?: ChatdChatTransportOptions<M>);
    /** The chat API's base URL, as configured. */
    get apiURL(): string;
    /** Whether a send or a resume of chatId is open (the SDK is reading it). */
    isStreaming(chatId: string): boolean;
    /** Counts a request the SDK made that has no stream yet (its POST or GET in flight). */
    private busy;
    /** The transport's headers, resolved (for requests of its own: stop, the transcript). */
    resolvedHeaders(extra?: Record<string, string> | Headers): Promise<Record<string, string>>;
    /** fetch, as the app configured it. */
    doFetch(input: string, init?: RequestInit): Promise<Response>;
    /** The URL of {api}/{id}/{path}. */
    chatURL(chatId: string, path?: string): string;
    /** Stops chatId's active run for every client (POST {api}/{id}/stop). */
    stopRun(chatId: string, headers?: Record<string, string> | Headers): Promise<boolean>;
    /**
     * The view of chatId goes away (a component unmounts, the app shows another chat): an
     * abort of chatId's streams in this tick is the view leaving, not a stop, so the run
     * goes on for everyone else. `@chatd/ai-sdk/react`'s useChat calls it before
     * `@ai-sdk/react`'s useChat stops its Chat on unmount.
     */
    detach(chatId: string): void;
    /** res, its body watched: each chunk that arrives marks signal's connection alive. */
    private observed;
    /** Ends this transport's streams and listeners (AbstractChat.dispose() calls it). */
    close(): void;
    sendMessages(options: SendOptions<M>): Promise<ReadableStream<UIMessageChunk>>;
    reconnectToStream(options: ReconnectOptions<M>): Promise<ReadableStream<UIMessageChunk> | null>;
    /** The first request, retried on the network's errors and refusals that pass. */
    private openStream;
    private withRetries;
    private firstControllers;
    private remember;
    /** The stream the SDK reads: the connections one after another, deduplicated. */
    private wrap;
    /** Headers for a request sent again: the configured ones resolved anew (a new token). */
    private refreshHeaders;
    private completionFromTranscript;
    /**
     * POST stop after an abort, unless it was the SDK replacing a resume by another, the
     * page unloading or the view detaching.
     */
    private scheduleStop;
}
/** The SDK's errors (APICallError) as ChatdErrors; the network's stay as they are. */
export declare function toChatdError(err: unknown): unknown;
export {};
