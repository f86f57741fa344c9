import type { UIMessage } from 'ai';
type Resolvable<T> = T | Promise<T> | (() => T | Promise<T>);
export interface LoadChatdChatOptions {
    /** Headers for the request, as the transport's (a function for a token refreshed). */
    headers?: Resolvable<Record<string, string> | Headers>;
    /** fetch to use (default globalThis.fetch). */
    fetch?: typeof globalThis.fetch;
    /** Another branch: the id of a message on it (GET …?through=). */
    through?: string;
    /** Also every branch of the chat, as one tree (GET …?tree=1): the result's `tree`. */
    tree?: boolean;
    signal?: AbortSignal;
}
export type LoadChatdChatResult<M extends UIMessage = UIMessage> = {
    ok: true;
    messages: M[];
    /** The run still going, whose answer is left out of messages (resume streams it). */
    activeRunId?: string | null;
    /** With `tree: true`: every branch (the active run's answer left out here too). */
    tree?: ChatdTree<M>;
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
 * A chat's branches as one tree, in the shape of assistant-ui's MessageFormatRepository
 * (its `messageRepository` option): each message with the one before it on its branch,
 * parents first, alternatives in the order they were written; headId ends the branch
 * shown.
 */
export interface ChatdTree<M extends UIMessage = UIMessage> {
    headId: string | null;
    messages: {
        parentId: string | null;
        message: M;
    }[];
}
/**
 * GET {api}/{id}: the stored transcript as UIMessages, for useChat's `messages`. A chat
 * that does not exist yet is `{ok: true, messages: []}`; a network error or a refusal is
 * `{ok: false, error, retry}`. The answer of a run still going is left out: useChat's
 * resume (`resume: true`) streams it from its start, and shown before that its partial
 * text would look finished.
 */
export declare function loadChatdChat<M extends UIMessage = UIMessage>(api: string, id: string, options?: LoadChatdChatOptions): Promise<LoadChatdChatResult<M>>;
export {};
