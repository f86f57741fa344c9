// The client half of the protocol: one state object and a pure function that applies a
// server frame to it. Nothing here touches the network, storage or time, so it is tested
// alone; ChatClient feeds it.
import type {
  ApprovalRule,
  QueuedMessage,
  EventFrame,
  HistoryFrame,
  Message,
  Progress,
  ResumedFrame,
  Run,
  ServerFrame,
  SnapshotFrame,
  Usage,
} from './protocol.js';
import { isActiveStatus } from './protocol.js';

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
  closed: { code: number; reason: string } | null;
}

/** The state before anything is known. */
export function initialState(sessionId: string | null = null): ChatState {
  return {
    sessionId: sessionId ?? null,
    epoch: null,
    lastSeq: 0,
    messages: [],
    hasMore: false,
    activeRun: null,
    lastRun: null,
    approvalRules: [],
    queued: [],
    connection: 'connecting',
    closed: null,
  };
}

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
export function applyFrame(state: ChatState, frame: ServerFrame): ChatState {
  switch (frame.type) {
    case 'snapshot':
      return applySnapshot(state, frame);
    case 'resumed':
      return applyResumed(state, frame);
    case 'ack':
    case 'error':
    case 'history':
    case 'auth.refreshed':
    case 'auth.expiring':
      return state;
    default:
      if (eventOrder(state, frame) !== 'next') return state;
      return { ...applyEvent(state, frame), lastSeq: frame.seq };
  }
}

/**
 * Where an event stands relative to a state: `next` (seq is lastSeq + 1: apply it),
 * `old` (seq <= lastSeq: already applied, ignore it) or `gap` (events are missing
 * before it: reconnect with hello{epoch, lastSeq}).
 */
export function eventOrder(state: ChatState, event: { seq: number }): 'next' | 'old' | 'gap' {
  if (event.seq <= state.lastSeq) return 'old';
  if (event.seq === state.lastSeq + 1) return 'next';
  return 'gap';
}

function applySnapshot(state: ChatState, f: SnapshotFrame): ChatState {
  return {
    ...state,
    sessionId: f.sessionId,
    epoch: f.epoch,
    lastSeq: f.lastSeq,
    messages: pathMessages(f.messages),
    hasMore: f.hasMore,
    activeRun: f.activeRun ?? null,
    lastRun: f.lastRun ?? null,
    approvalRules: f.approvalRules ?? [],
    queued: f.queued ?? [],
  };
}

function applyResumed(state: ChatState, f: ResumedFrame): ChatState {
  if (state.sessionId === f.sessionId && state.epoch === f.epoch) return state;
  return { ...state, sessionId: f.sessionId, epoch: f.epoch };
}

function applyEvent(state: ChatState, e: EventFrame): ChatState {
  switch (e.type) {
    case 'chat.started':
      // A regeneration's userMessage is the question answered again, already held (the
      // branch.selected before it ended the path there): it is replaced.
      return { ...withMessages(state, putMessage(state.messages, e.userMessage)), activeRun: e.run, lastRun: null };
    case 'assistant.segment.started':
    case 'tool.start':
    case 'message.added':
      return withMessages(state, putMessage(state.messages, e.message));
    case 'tool.update':
    case 'tool.end':
      // About a message of the path shown, or of another branch (ignored).
      return withMessages(state, replaceMessage(state.messages, e.message));
    case 'branch.selected':
      return { ...state, messages: pathMessages(e.messages), hasMore: e.hasMore };
    case 'chat.delta':
      if (e.text === '') return state;
      return withMessages(
        state,
        updateMessage(state.messages, e.messageId, (m) => ({ ...m, content: m.content + e.text })),
      );
    case 'assistant.segment.ended':
      return withMessages(
        state,
        updateMessage(state.messages, e.messageId, (m) => {
          const next: Message = { ...m, status: e.status };
          if (e.error) next.error = e.error;
          return next;
        }),
      );
    case 'tool.output':
      if (e.text === '') return state;
      return withMessages(
        state,
        updateMessage(state.messages, e.messageId, (m) =>
          m.tool ? { ...m, tool: { ...m.tool, output: (m.tool.output ?? '') + e.text } } : m,
        ),
      );
    case 'run.status':
      if (isActiveStatus(e.run.status)) return { ...state, activeRun: e.run, lastRun: null };
      // An ended run: a dismissed one (no longer resumable). It stays ended.
      return {
        ...state,
        activeRun: state.activeRun?.runId === e.run.runId ? null : state.activeRun,
        lastRun: e.run,
      };
    case 'chat.done':
    case 'chat.error':
    case 'chat.cancelled':
      return { ...state, activeRun: null, lastRun: e.run };
    case 'approval.rules':
      return { ...state, approvalRules: e.rules };
    case 'queue.updated':
      return { ...state, queued: e.queued };
    default:
      // An event type this version does not know: its seq still counts (the state
      // follows the sequence), its content is not shown.
      return state;
  }
}

/**
 * Adds older messages from a `history` reply: those older than the oldest message held
 * (and not held already) go in front; `hasMore` becomes the reply's. A reply that does
 * not end at the parent of the oldest message held was read from another branch (the
 * path changed while it was on its way): it changes nothing. Pure, like applyFrame.
 */
export function applyHistory(state: ChatState, frame: HistoryFrame): ChatState {
  const first = state.messages[0];
  const oldest = first ? first.position : Infinity;
  const have = new Set(state.messages.map((m) => m.id));
  const older = frame.messages
    .filter((m) => m.position < oldest && !have.has(m.id))
    .sort((a, b) => a.position - b.position);
  const dedup: Message[] = [];
  for (const m of older) if (!dedup.length || dedup[dedup.length - 1]!.id !== m.id) dedup.push(m);
  if (first?.parentId !== undefined && dedup.length && dedup[dedup.length - 1]!.id !== first.parentId) return state;
  if (!dedup.length && state.hasMore === frame.hasMore) return state;
  return {
    ...state,
    messages: dedup.length ? [...dedup, ...state.messages] : state.messages,
    hasMore: frame.hasMore,
  };
}

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
export function branchOf(m: Pick<Message, 'branch'>): BranchPosition | null {
  const b = m.branch;
  if (!b || b.siblings.length < 2) return null;
  const index = Math.max(0, Math.min(b.siblings.length - 1, b.index));
  const pos: BranchPosition = { index, count: b.siblings.length };
  if (index > 0) pos.prev = b.siblings[index - 1]!;
  if (index < b.siblings.length - 1) pos.next = b.siblings[index + 1]!;
  return pos;
}

/** The tool calls that wait for a decision, oldest first. */
export function pendingApprovals(state: ChatState): Message[] {
  return state.messages.filter((m) => m.role === 'tool' && m.tool?.status === 'awaiting_approval');
}

/**
 * The context usage to show (a meter: contextTokens / contextWindow): the active run's
 * latest, else the last run's; null when neither reported one.
 */
export function contextUsage(state: ChatState): Usage | null {
  return state.activeRun?.usage ?? state.lastRun?.usage ?? null;
}

/**
 * The progress to show of the active run (step of of, with its label): null when no run
 * is active or it reported none. An ended run keeps its last one on lastRun.progress.
 */
export function runProgress(state: ChatState): Progress | null {
  return state.activeRun?.progress ?? null;
}

function withMessages(state: ChatState, messages: Message[]): ChatState {
  return messages === state.messages ? state : { ...state, messages };
}

/** The messages of a path as the server sent them (a snapshot, branch.selected): in position order, unique ids. */
function pathMessages(from: readonly Message[]): Message[] {
  let messages: Message[] = [];
  for (const m of from) messages = addMessage(messages, m);
  return messages;
}

/** Adds m in position order, or replaces the message with its id. */
function addMessage(messages: Message[], m: Message): Message[] {
  const i = indexOf(messages, m.id);
  if (i >= 0) {
    const next = messages.slice();
    next[i] = m;
    return next;
  }
  // Almost always at the end: scan from there.
  let at = messages.length;
  while (at > 0 && messages[at - 1]!.position > m.position) at--;
  const next = messages.slice();
  next.splice(at, 0, m);
  return next;
}

/**
 * The rule for an event that adds a message (docs/protocol.md, Branches): a message held
 * is replaced; one whose parent is the last message held (null for none, and for a root
 * message) continues the path shown and is appended; any other is on a branch not shown,
 * and is ignored.
 */
function putMessage(messages: Message[], m: Message): Message[] {
  const i = indexOf(messages, m.id);
  if (i >= 0) return replaceAt(messages, i, keepBranch(messages[i]!, m));
  const last = messages.length ? messages[messages.length - 1]!.id : null;
  if ((m.parentId ?? null) !== last) return messages;
  return [...messages, m];
}

/** Replaces the message with m's id; one not held is on a branch not shown: nothing changes. */
function replaceMessage(messages: Message[], m: Message): Message[] {
  const i = indexOf(messages, m.id);
  return i < 0 ? messages : replaceAt(messages, i, keepBranch(messages[i]!, m));
}

/**
 * The message to hold instead of held: next, with held's branch when next has none. An
 * event may carry a message without its branch (a regeneration's chat.started has the
 * question as written); its alternatives cannot have changed while it stayed held, since
 * every new alternative comes with a branch.selected, which replaces the path.
 */
function keepBranch(held: Message, next: Message): Message {
  return held.branch && !next.branch ? { ...next, branch: held.branch } : next;
}

function replaceAt(messages: Message[], i: number, m: Message): Message[] {
  if (messages[i] === m) return messages;
  const next = messages.slice();
  next[i] = m;
  return next;
}

function updateMessage(messages: Message[], id: string, fn: (m: Message) => Message): Message[] {
  const i = indexOf(messages, id);
  if (i < 0) return messages;
  return replaceAt(messages, i, fn(messages[i]!));
}

/** The index of a message by id, searching from the end (where streaming happens). */
function indexOf(messages: Message[], id: string): number {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.id === id) return i;
  return -1;
}
