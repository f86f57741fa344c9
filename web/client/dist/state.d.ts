import type { ApprovalRule, QueuedMessage, HistoryFrame, Message, Progress, Run, ServerFrame, Usage } from './protocol.js';
export type ConnectionStatus = 'connecting' | 'catching-up' | 'live' | 'offline';
export interface ChatState {
    /** The session followed; for a new session null until the server's snapshot names it. */
    sessionId: string | null;
    /** The epoch of the event sequence the state follows; null before the first snapshot. */
    epoch: string | null;
    /** The seq of the last event applied (or of the snapshot); 0 before any. */
    lastSeq: number;
    /** Ascending position, unique ids. */
    messages: Message[];
    /** Older messages exist on the server (ChatClient.loadOlder fetches them). */
    hasMore: boolean;
    /** The run in progress (running, awaiting_approval, paused), or null. */
    activeRun: Run | null;
    /** The session's latest run when it has ended (null while one is active or before any). */
    lastRun: Run | null;
    /** The session's approval rules ("allow for this conversation"), oldest first. */
    approvalRules: ApprovalRule[];
    /** Messages sent with whileRunning queue that wait for the active run to end, oldest first. */
    queued: QueuedMessage[];
    /** The connection, for a UI's indicator. applyFrame never changes it. */
    connection: ConnectionStatus;
    /** A fatal close (4004 deleted or not yours, 4001, ...): no more reconnects. */
    closed: {
        code: number;
        reason: string;
    } | null;
}
/** The state before anything is known. */
export declare function initialState(sessionId?: string | null): ChatState;
/**
 * Applies one server frame and returns the new state; the input is never modified, and
 * what did not change keeps its identity (messages a frame did not touch, the messages
 * array when no message changed), so a UI can compare by reference.
 *
 * - `snapshot` replaces the state (except `connection` and `closed`).
 * - `resumed` keeps it (and takes the frame's sessionId and epoch).
 * - An event applies only when its seq is `lastSeq + 1`. An event with `seq <= lastSeq`
 *   (already applied) or beyond `lastSeq + 1` (a gap) returns the state unchanged:
 *   nothing is applied twice and nothing is skipped. A gap means the connection missed
 *   events; ChatClient reconnects to get them (see {@link eventOrder}).
 * - Replies (`ack`, `error`, `history`, `auth.refreshed`) and `auth.expiring` return the
 *   state unchanged: ChatClient handles them (a history reply with {@link applyHistory}).
 *
 * The messages are the session's active path (one branch of its tree). An event that adds
 * a message (chat.started's userMessage, assistant.segment.started, tool.start,
 * message.added) replaces the message with its id when held, else appends it when its
 * parentId (null when absent) is the id of the last message held (null when none), else
 * it is on a branch not shown and is ignored; so are events about a message not held
 * (deltas, segment ends, tool output, updates and ends). `branch.selected` replaces the
 * messages and hasMore. Run events apply whatever branch their run is on.
 */
export declare function applyFrame(state: ChatState, frame: ServerFrame): ChatState;
/**
 * Where an event stands relative to a state: `next` (seq is lastSeq + 1: apply it),
 * `old` (seq <= lastSeq: already applied, ignore it) or `gap` (events are missing
 * before it: reconnect with hello{epoch, lastSeq}).
 */
export declare function eventOrder(state: ChatState, event: {
    seq: number;
}): 'next' | 'old' | 'gap';
/**
 * Adds older messages from a `history` reply: those older than the oldest message held
 * (and not held already) go in front; `hasMore` becomes the reply's. A reply that does
 * not end at the parent of the oldest message held was read from another branch (the
 * path changed while it was on its way): it changes nothing. Pure, like applyFrame.
 */
export declare function applyHistory(state: ChatState, frame: HistoryFrame): ChatState;
/** A message's place among its alternatives, for "< index+1 / count >" arrows. */
export interface BranchPosition {
    /** 0-based. */
    index: number;
    count: number;
    /** The alternative before this one (ChatClient.selectBranch shows it); absent for the first. */
    prev?: string;
    /** The alternative after this one; absent for the last. */
    next?: string;
}
/**
 * Where a message stands among its alternatives (the other answers of its question, the
 * other versions of an edited question), or null when it has none.
 */
export declare function branchOf(m: Pick<Message, 'branch'>): BranchPosition | null;
/** The tool calls that wait for a decision, oldest first. */
export declare function pendingApprovals(state: ChatState): Message[];
/**
 * The context usage to show (a meter: contextTokens / contextWindow): the active run's
 * latest, else the last run's; null when neither reported one.
 */
export declare function contextUsage(state: ChatState): Usage | null;
/**
 * The progress to show of the active run (step of of, with its label): null when no run
 * is active or it reported none. An ended run keeps its last one on lastRun.progress.
 */
export declare function runProgress(state: ChatState): Progress | null;
