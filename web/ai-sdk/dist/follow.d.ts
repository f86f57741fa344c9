import type { UIMessage } from 'ai';
import type { ChatdChatTransport } from './transport.js';
export interface FollowHandlers<M extends UIMessage> {
    /** useChat's resumeStream: called when a run is active and this chat is not streaming. */
    resumeStream: () => unknown;
    /** useChat's setMessages: called with the stored transcript when it changed. */
    setMessages: (messages: M[]) => unknown;
    /** Errors of the feed (it goes on retrying). */
    onError?: (err: unknown) => void;
}
/** One event of GET {api}/{id}/events. */
export type ChatdChatEvent = {
    type: 'state';
    activeRunId: string | null;
} | {
    type: 'run-started';
    runId: string;
} | {
    type: 'run-ended';
    runId: string;
    status: 'done' | 'error' | 'cancelled' | 'interrupted';
} | {
    type: 'branch-changed';
};
/**
 * Follows chat id while the page is visible: listens to chatd's per-chat feed
 * (GET {api}/{id}/events) and, when a run starts that this transport is not streaming,
 * calls resumeStream(); when a run ends or the branch changes (and nothing streams here),
 * loads the transcript and calls setMessages. Returns the function that stops following
 * (for useEffect's cleanup).
 */
export declare function followChatdChat<M extends UIMessage>(transport: ChatdChatTransport<M>, id: string, h: FollowHandlers<M>): () => void;
