import type { UIMessage } from 'ai';
type Resolvable<T> = T | Promise<T> | (() => T | Promise<T>);
export interface LoadChatdChatOptions {
    /** Headers for the request, as the transport's (a function for a token refreshed). */
    headers?: Resolvable<Record<string, string> | Headers>;
    /** fetch to use (default globalThis.fetch). */
    fetch?: typeof globalThis.fetch;
    /** Another branch: the id of a message on it (GET …?through=). */
    through?: string;
    signal?: AbortSignal;
}
export type LoadChatdChatResult<M extends UIMessage = UIMessage> = {
    ok: true;
    messages: M[];
    /** The run still going, whose answer is left out of messages (resume streams it). */
    activeRunId?: string | null;
} | {
    ok: false;
    /** chatd's error, or `network` when chatd could not be reached. */
    error: {
        code: string;
        message: string;
        status: number;
    };
    /** Tries the same load again. */
    retry: () => Promise<LoadChatdChatResult<M>>;
};
/**
 * GET {api}/{id}: the stored transcript as UIMessages, for useChat's `messages`. A chat
 * that does not exist yet is `{ok: true, messages: []}`; a network error or a refusal is
 * `{ok: false, error, retry}`. The answer of a run still going is left out: useChat's
 * resume (`resume: true`) streams it from its start, and shown before that its partial
 * text would look finished.
 */
export declare function loadChatdChat<M extends UIMessage = UIMessage>(api: string, id: string, options?: LoadChatdChatOptions): Promise<LoadChatdChatResult<M>>;
export {};
