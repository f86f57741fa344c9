export type Uuid = string;
/** RFC 3339, UTC. */
export type Timestamp = string;
export type Role = 'user' | 'assistant' | 'tool' | 'system';
export type MessageStatus = 'complete' | 'streaming' | 'cancelled' | 'error' | 'interrupted';
export type ToolStatus = 'running' | 'awaiting_approval' | 'ok' | 'error' | 'denied' | 'cancelled' | 'interrupted';
export type ActiveRunStatus = 'running' | 'awaiting_approval' | 'paused';
export type EndedRunStatus = 'done' | 'error' | 'cancelled' | 'interrupted';
export type RunStatus = ActiveRunStatus | EndedRunStatus;
export type CancelReason = 'user' | 'abandoned' | 'shutdown' | 'new_message';
/** What a chat.send does while a run is active (protocol.md, Messages sent mid-run). */
export type WhileRunning = 'queue' | 'steer' | 'interrupt' | 'reject';
/** A message sent with whileRunning queue, waiting for the runs before it to end. */
export interface QueuedMessage {
    requestId: string;
    content: string;
    /** steering: sent with whileRunning steer, it waits for the active run's next step boundary. */
    status: 'queued' | 'steering';
    createdAt: string;
}
export type Decision = 'approve' | 'deny';
export type ResumeMode = 'continue' | 'retry';
/** The code of an error reply. */
export type ErrorCode = 'bad_request' | 'unknown_type' | 'not_found' | 'unauthorized' | 'run_active' | 'queue_full' | 'no_run' | 'conflict' | 'too_large' | 'rate_limited' | 'too_many_sessions' | 'moved' | 'busy' | 'storage' | 'internal';
/** The error of a run or a message: an open set of codes. */
export interface ErrorObject {
    code: string;
    message: string;
}
/** The tool call of a message with role tool. */
export interface Tool {
    callId: string;
    name: string;
    /** JSON as the agent gave it. */
    input: unknown;
    /** Only while the call awaits approval: the hash tool.decide sends back (ChatClient.decide does). */
    inputHash?: string;
    /** The output so far; absent until there is some. */
    output?: string;
    status: ToolStatus;
    /** How the call's approval was decided; absent while it waits, and for calls that needed none. */
    decision?: ToolDecision;
}
/** How a tool call's approval was decided (docs/protocol.md, Approvals as a security boundary). */
export interface ToolDecision {
    approved: boolean;
    /** The deciding user's id; absent for an expiry. */
    by?: string;
    at: Timestamp;
    /** The transport it came through, or the rule or expiry that decided it; absent for one made in process. */
    via?: 'ws' | 'aisdk' | 'http' | 'rule' | 'expiry';
    /** The approval rule that approved it (via rule). */
    ruleId?: Uuid;
}
/** A session's standing approval ("allow for this conversation"). */
export interface ApprovalRule {
    ruleId: Uuid;
    tool: string;
    /** shell only: the command's first word the rule allows. */
    command?: string;
    createdBy: string;
    createdVia: 'ws' | 'aisdk' | 'http';
    toolCallId: string;
    createdAt: Timestamp;
}
/** One entry of a session's transcript. */
export interface Message {
    id: Uuid;
    /** Orders a session's messages; the first is 1. */
    position: number;
    role: Role;
    /** 'reasoning' on an assistant message holding the model's reasoning; absent otherwise. */
    kind?: 'reasoning';
    content: string;
    status: MessageStatus;
    runId?: Uuid;
    requestId?: string;
    createdAt: Timestamp;
    error?: ErrorObject;
    /** Only (and always) on role tool. */
    tool?: Tool;
    /** The message before this one on its branch; absent for a root message (the first of a
     * branch that starts at the conversation's beginning). */
    parentId?: Uuid;
    /** Present when this message is one of several alternatives (its parent has more than
     * one child): an edited question's siblings are the user messages, a regenerated
     * answer's the first message of each answer. Shown as "< index+1 / siblings.length >". */
    branch?: Branch;
}
/** A message's place among its alternatives (docs/protocol.md, Branches). */
export interface Branch {
    /** The alternatives' ids, in creation order. */
    siblings: Uuid[];
    /** 0-based: this message's place in siblings. */
    index: number;
}
export interface Usage {
    inputTokens: number;
    outputTokens: number;
    /** How much of the model's context the session fills; absent while unknown. */
    contextTokens?: number;
    /** The budget contextTokens counts against; absent while unknown. */
    contextWindow?: number;
}
/**
 * How far a long run is, as its agent or a tool last reported it: step of of ("3 of 7
 * pages"); label says what the steps are (absent when none).
 */
export interface Progress {
    step: number;
    of: number;
    label?: string;
}
/** The oldest tool call a run waits on a decision for. */
export interface PendingApproval {
    toolCallId: string;
    name: string;
    input: unknown;
    /** SHA-256 (hex) of the input's canonical JSON: what tool.decide sends back. */
    inputHash: string;
}
/** One user message and everything produced for it. */
export interface Run {
    runId: Uuid;
    requestId: string;
    status: RunStatus;
    startedAt: Timestamp;
    endedAt?: Timestamp;
    lastActivityAt: Timestamp;
    error?: ErrorObject;
    pendingApproval?: PendingApproval;
    cancelReason?: CancelReason;
    model?: string;
    usage?: Usage;
    /** The run's progress as last reported; absent when none. Kept once the run ends. */
    progress?: Progress;
    /** Present (true) while the run can be continued with chat.resume. */
    resumable?: true;
    recoveries?: number;
    /** The run this one answers again (chat.regenerate, or chat.resume retry). */
    retryOf?: Uuid;
}
export interface HelloFrame {
    type: 'hello';
    requestId?: string;
    sessionId?: Uuid;
    epoch?: string;
    lastSeq?: number;
    token?: string;
}
export interface ChatSendFrame {
    type: 'chat.send';
    requestId: string;
    content: string;
    /** Absent: the server's CHATD_DOUBLE_TEXT. With editOf only 'interrupt' changes anything:
     * otherwise an edit while a run is active is refused with run_active. */
    whileRunning?: WhileRunning;
    /** Edits a user message (any, on any branch): the new message becomes its sibling, starts
     * a run, and its branch becomes the active path. */
    editOf?: Uuid;
}
/** Answers the user message of an ended run again, as a new run whose retryOf is runId;
 * the new answer is a sibling of the old one and becomes the active path. */
export interface ChatRegenerateFrame {
    type: 'chat.regenerate';
    requestId: string;
    runId: Uuid;
}
/** Makes the active path the branch through messageId (its ancestors, itself, then the
 * most recently written branch below it), for every tab (branch.selected). */
export interface BranchSelectFrame {
    type: 'branch.select';
    requestId?: string;
    messageId: Uuid;
}
/** Takes back a queued message (requestId: that message's) before its run starts. */
export interface ChatUnqueueFrame {
    type: 'chat.unqueue';
    requestId: string;
}
export interface ChatCancelFrame {
    type: 'chat.cancel';
    requestId?: string;
    runId?: Uuid;
}
export interface HistoryFetchFrame {
    type: 'history.fetch';
    requestId?: string;
    before?: number;
    limit?: number;
    /** Pages the branch through this message instead of the active path (without selecting it). */
    through?: Uuid;
}
export interface ToolDecideFrame {
    type: 'tool.decide';
    requestId?: string;
    toolCallId: string;
    decision: Decision;
    runId?: Uuid;
    /** The call's inputHash as shown: another one is refused with conflict. */
    inputHash?: string;
    /** 'session': also approve matching calls for the rest of the session (approve only). */
    scope?: 'session';
}
/** Revokes one of the session's approval rules. */
export interface ApprovalRevokeFrame {
    type: 'approval.revoke';
    requestId?: string;
    ruleId: Uuid;
}
export interface ChatResumeFrame {
    type: 'chat.resume';
    requestId: string;
    runId: Uuid;
    mode?: ResumeMode;
}
export interface ChatDismissFrame {
    type: 'chat.dismiss';
    requestId?: string;
    runId: Uuid;
}
/** A new token for the connection's user, sent when auth.expiring warns. */
export interface AuthRefreshFrame {
    type: 'auth.refresh';
    requestId?: string;
    token: string;
}
export type ClientFrame = HelloFrame | ChatSendFrame | ChatRegenerateFrame | BranchSelectFrame | ChatCancelFrame | ChatUnqueueFrame | HistoryFetchFrame | ToolDecideFrame | ChatResumeFrame | ChatDismissFrame | AuthRefreshFrame | ApprovalRevokeFrame;
/** A client frame other than hello. */
export type CommandFrame = Exclude<ClientFrame, HelloFrame>;
export interface SnapshotFrame {
    type: 'snapshot';
    requestId?: string;
    sessionId: Uuid;
    epoch: string;
    lastSeq: number;
    /** The newest messages (at most 200), ascending position. */
    messages: Message[];
    hasMore: boolean;
    activeRun: Run | null;
    /** The latest run when it has ended; absent while a run is active or before any. */
    lastRun?: Run;
    /** The session's approval rules, oldest first. */
    approvalRules?: ApprovalRule[];
    /** The messages queued behind the active run, oldest first. */
    queued?: QueuedMessage[];
}
export interface ResumedFrame {
    type: 'resumed';
    requestId?: string;
    sessionId: Uuid;
    epoch: string;
    lastSeq: number;
}
export interface AckFrame {
    type: 'ack';
    requestId?: string;
    /** Absent on the ack of approval.revoke, chat.unqueue and branch.select (as is status), and of a queued chat.send. */
    runId: Uuid;
    /** true when the command named something already done: nothing new was started. */
    duplicate: boolean;
    /** 'queued': a chat.send under whileRunning queue; the message has no run yet. */
    status: RunStatus | 'queued' | 'steering' | 'steered';
}
/** The reply to chat.send, chat.regenerate, chat.cancel, tool.decide, chat.resume and chat.dismiss. */
export type Ack = AckFrame;
export interface ErrorFrame {
    type: 'error';
    requestId?: string;
    code: ErrorCode;
    message: string;
}
export interface HistoryFrame {
    type: 'history';
    requestId?: string;
    /** Ascending position. */
    messages: Message[];
    hasMore: boolean;
}
export type ReplyFrame = AckFrame | ErrorFrame | HistoryFrame;
/** The reply to auth.refresh: the connection runs on the new token. */
export interface AuthRefreshedFrame {
    type: 'auth.refreshed';
    requestId?: string;
    /** RFC 3339; absent when the new token never expires. */
    expiresAt?: string;
}
/** Sent unprompted shortly before the connection's token expires: send auth.refresh, or the connection closes with 4001. */
export interface AuthExpiringFrame {
    type: 'auth.expiring';
    expiresAt: string;
}
interface EventBase {
    seq: number;
    runId: Uuid;
    requestId: string;
}
export interface ChatStartedEvent extends EventBase {
    type: 'chat.started';
    run: Run;
    userMessage: Message;
}
export interface AssistantSegmentStartedEvent extends EventBase {
    type: 'assistant.segment.started';
    message: Message;
}
export interface ChatDeltaEvent extends EventBase {
    type: 'chat.delta';
    messageId: Uuid;
    text: string;
}
export interface AssistantSegmentEndedEvent extends EventBase {
    type: 'assistant.segment.ended';
    messageId: Uuid;
    status: Exclude<MessageStatus, 'streaming'>;
    error?: ErrorObject;
}
export interface ToolStartEvent extends EventBase {
    type: 'tool.start';
    message: Message;
}
export interface ToolOutputEvent extends EventBase {
    type: 'tool.output';
    messageId: Uuid;
    text: string;
}
export interface ToolUpdateEvent extends EventBase {
    type: 'tool.update';
    message: Message;
}
export interface ToolEndEvent extends EventBase {
    type: 'tool.end';
    message: Message;
}
export interface MessageAddedEvent extends EventBase {
    type: 'message.added';
    message: Message;
}
export interface RunStatusEvent extends EventBase {
    type: 'run.status';
    run: Run;
}
export interface ChatDoneEvent extends EventBase {
    type: 'chat.done';
    run: Run;
}
export interface ChatErrorEvent extends EventBase {
    type: 'chat.error';
    run: Run;
}
export interface ChatCancelledEvent extends EventBase {
    type: 'chat.cancelled';
    run: Run;
}
/** The session's approval rules changed: rules is the whole list. Outside a run runId is absent and requestId empty. */
export interface ApprovalRulesEvent {
    type: 'approval.rules';
    seq: number;
    runId?: Uuid;
    requestId: string;
    rules: ApprovalRule[];
}
/** The session's queued messages changed: queued is the whole list, oldest first. */
export interface QueueUpdatedEvent {
    type: 'queue.updated';
    seq: number;
    requestId: string;
    queued: QueuedMessage[];
}
/**
 * The active path changed (a branch.select, an edit, a regenerate): messages replaces the
 * held messages (the newest 200 of the new path, as a snapshot carries them) and hasMore.
 */
export interface BranchSelectedEvent {
    type: 'branch.selected';
    seq: number;
    requestId: string;
    /** The last message of the path; absent when the path is empty. */
    leafId?: Uuid;
    /** Ascending position. */
    messages: Message[];
    hasMore: boolean;
}
export type EventFrame = ChatStartedEvent | AssistantSegmentStartedEvent | ChatDeltaEvent | AssistantSegmentEndedEvent | ToolStartEvent | ToolOutputEvent | ToolUpdateEvent | ToolEndEvent | MessageAddedEvent | RunStatusEvent | ChatDoneEvent | ChatErrorEvent | ChatCancelledEvent | ApprovalRulesEvent | QueueUpdatedEvent | BranchSelectedEvent;
export type ServerFrame = SnapshotFrame | ResumedFrame | ReplyFrame | AuthRefreshedFrame | AuthExpiringFrame | EventFrame;
/** The event types, in the order docs/protocol.md lists them. */
export declare const EVENT_TYPES: readonly EventFrame['type'][];
/** Whether a frame is a sequenced event. */
export declare function isEvent(frame: ServerFrame): frame is EventFrame;
/** Whether a run status is an active one (running, awaiting_approval, paused). */
export declare function isActiveStatus(status: RunStatus): status is ActiveRunStatus;
export {};
