import type { Ack, ClientFrame, Decision, ResumeMode, ServerFrame, WhileRunning } from './protocol.js';
import { type ChatState } from './state.js';
import { type StorageLike } from './storage.js';
/** A token, or a function that gives one (called before every hello, so it can refresh). */
export type TokenSource = string | (() => string | Promise<string>);
/** The parts of a WebSocket the client uses (the browser's, or Node's). */
export interface WebSocketLike {
    readonly readyState: number;
    send(data: string): void;
    close(code?: number, reason?: string): void;
    onopen: ((ev: any) => any) | null;
    onmessage: ((ev: {
        data: any;
    }) => any) | null;
    onclose: ((ev: {
        code: number;
        reason: string;
        wasClean?: boolean;
    }) => any) | null;
    onerror: ((ev: any) => any) | null;
}
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;
/** What the client listens to for page life: window, document and navigator, or stand-ins. */
export interface ClientEnvironment {
    /** Gets online, offline, pageshow, pagehide. */
    window?: Pick<EventTarget, 'addEventListener' | 'removeEventListener'> | null;
    /** Gets visibilitychange, freeze, resume; visibilityState is read. */
    document?: (Pick<EventTarget, 'addEventListener' | 'removeEventListener'> & {
        visibilityState?: string;
    }) | null;
    /** onLine is read at connect. */
    navigator?: {
        onLine?: boolean;
    } | null;
}
/** What happened, for logging and tests: every socket opened and closed, frame sent and received. */
export type TraceEvent = {
    type: 'open';
    conn: number;
    url: string;
} | {
    type: 'close';
    conn: number;
    code: number;
    reason: string;
    by: 'server' | 'client';
} | {
    type: 'send';
    conn: number;
    frame: ClientFrame;
} | {
    type: 'frame';
    conn: number;
    frame: ServerFrame;
    /** applied: a snapshot, resumed or event applied; old: an event already applied (ignored);
     * gap: an event after missing ones (ignored, the client reconnects); reply: ack, error,
     * history; stale: a frame the client did not expect (ignored). */
    outcome: 'applied' | 'old' | 'gap' | 'reply' | 'stale';
} | {
    type: 'reconnect';
    delayMs: number;
    reason: string;
};
export interface ChatClientOptions {
    /** The WebSocket URL; default from location: ws(s)://host/v1/ws. */
    url?: string;
    /** The session: one that exists (else the client stops with 4004 "session not found").
     * null/undefined: a new one, created by the server at the first hello, which names it:
     * state.sessionId is null until then, and commands wait for it. */
    sessionId?: string | null;
    /** Passed in hello. A function is called before every hello, and makes 4001 retryable. */
    token?: TokenSource;
    /** Where the state is kept between reloads: default sessionStorage when it works, else
     * memory shared by this page's clients; null: memory of this client only. */
    storage?: StorageLike | null;
    /** Default globalThis.WebSocket. */
    WebSocket?: WebSocketConstructor | typeof WebSocket;
    /** Reconnect delays: jittered, doubling from initialMs (default 500) up to maxMs (default 10000). */
    backoff?: {
        initialMs?: number;
        maxMs?: number;
    };
    /** The stored state is written at most this often while it changes (default 1000 ms),
     * and at once on pagehide / visibility hidden / close(). */
    persistThrottleMs?: number;
    /** A page hidden or frozen at least this long reconnects when it shows again (default
     * 10000 ms: the server drops a connection that missed a ping for 10 s). */
    staleAfterHiddenMs?: number;
    /** A hello or command unanswered (or a socket not open) after this long means the
     * connection is dead: reconnect (default 20000 ms). */
    replyTimeoutMs?: number;
    /** Commands in flight on one connection, hello included (default 8; the server answers
     * busy beyond 16). More wait in the client's queue. */
    maxInFlight?: number;
    /** Window, document and navigator to follow (default the globals, when present). */
    environment?: ClientEnvironment;
    /** Called for every socket, frame and reconnect. */
    onTrace?: (e: TraceEvent) => void;
}
export declare class ChatClient {
    private _state;
    private readonly subscribers;
    private notifyQueued;
    private readonly url;
    private readonly token;
    private readonly storage;
    private readonly WS;
    private readonly initialMs;
    private readonly maxMs;
    private readonly persistThrottleMs;
    private readonly staleAfterHiddenMs;
    private readonly replyTimeoutMs;
    private readonly maxInFlight;
    private readonly env;
    private readonly trace;
    private started;
    private stopped;
    private ws;
    private conn;
    private socketOpen;
    private helloSent;
    private helloOk;
    private helloRequestId;
    private helloSentAt;
    private openedAt;
    private attempt;
    private forcedAt;
    private wantSnapshot;
    private offline;
    private hiddenAt;
    private reconnectTimer;
    private watchdogTimer;
    private flushTimer;
    private persistTimer;
    private persisted;
    private readonly pending;
    private olderLoad;
    private listeners;
    constructor(opts?: ChatClientOptions);
    /**
     * The session this storage followed last (the default storage: this tab's), or null.
     * A page that reloads can pass it as sessionId to pick up where it was.
     */
    static lastSessionId(storage?: StorageLike | null): string | null;
    /** Removes a session's stored state (for example after deleting the session). */
    static forget(sessionId: string, storage?: StorageLike | null): void;
    /** The current state; replaced (never modified) on every change. */
    get state(): ChatState;
    /**
     * Calls fn after state changes (at most once per microtask, with the latest state), the
     * server naming a new session (state.sessionId no longer null) included. Returns the
     * unsubscribe.
     */
    subscribe(fn: (state: ChatState) => void): () => void;
    /** Starts connecting (once; later calls do nothing). Commands made before are queued
     * (a new session's until the server has named it). */
    connect(): void;
    /** Stops for good: closes with 1000, rejects what waits for a reply (ChatError closed), reconnects no more. */
    close(): void;
    /**
     * Sends a user message (chat.send). Resolves with the ack (duplicate true when a re-send found its run).
     * opts.whileRunning says what it does if a run is active: 'queue' (stored at once, in
     * state.queued, the ack's status 'queued' and no runId; it starts its run when the
     * runs before it ended; over the server's bound the promise rejects with queue_full),
     * 'steer' (stored at once, in state.queued with status 'steering', and given to the
     * running agent at its next step boundary as a user turn of the same run: the ack's
     * status 'steering' and runId that run; a run that ends before a boundary leaves it queued),
     * 'reject' (the promise rejects with run_active) or 'interrupt' (the active run is
     * cancelled, its partial kept, and this message starts a run); absent, the server's
     * CHATD_DOUBLE_TEXT decides (default queue).
     */
    send(content: string, opts?: {
        requestId?: string;
        whileRunning?: WhileRunning;
    }): Promise<Ack>;
    /**
     * Edits a user message (chat.send with editOf): content becomes a new version of the
     * message messageId (any user message, on any branch), a sibling of it, and starts a
     * run; its branch becomes the active path for every tab (branch.selected, then
     * chat.started), the old version stays one arrow away (message.branch). While a run is
     * active it rejects with run_active, unless opts.whileRunning is 'interrupt' (the run is
     * cancelled first). not_found: messageId is not a user message of the session.
     */
    edit(messageId: string, content: string, opts?: {
        requestId?: string;
        whileRunning?: 'interrupt' | 'reject';
    }): Promise<Ack>;
    private sendFrame;
    /**
     * Answers the question of an ended run again (chat.regenerate; runId: any ended run of
     * the session, on any branch): a new run, whose run.retryOf is runId, writes a new
     * answer beside the old one, and its branch becomes the active path for every tab. Resolves
     * with the ack (runId: the new run). run_active while a run is active; not_found for an
     * unknown run.
     */
    regenerate(runId: string, opts?: {
        requestId?: string;
    }): Promise<Ack>;
    /**
     * Shows another branch (branch.select): the active path becomes the one through
     * messageId (its ancestors, itself, then the branch below it written last), in every tab
     * of the session (branch.selected replaces state.messages). Resolves once the server has
     * it; a run streaming goes on, on its own branch. not_found: no such message. The ids to
     * pass are in message.branch (see branchOf).
     */
    selectBranch(messageId: string): Promise<void>;
    /** Cancels the active run (runId: only that run; default the run active when called). */
    cancel(runId?: string): Promise<Ack>;
    /**
     * Answers a tool approval (runId: default the run of that call, as the state shows it).
     * It sends the call's inputHash as the state shows it (the input the user was shown),
     * so a decision on another input is refused with conflict; opts.inputHash overrides it.
     * opts.scope 'session' (approve only) also allows matching calls for the rest of the
     * session: an approval rule, listed in state.approvalRules.
     */
    decide(toolCallId: string, decision: Decision, runId?: string, opts?: {
        scope?: 'session';
        inputHash?: string;
    }): Promise<Ack>;
    /**
     * Takes back a queued message (chat.unqueue; requestId: the one its send used) before
     * its run starts. Rejects with not_found when it is not queued (any more).
     */
    unqueue(requestId: string): Promise<void>;
    /** Revokes one of the session's approval rules (approval.revoke): later matching calls ask again. */
    revokeRule(ruleId: string): Promise<void>;
    /** Continues (or with mode retry, answers again) a resumable run (chat.resume). */
    resume(runId: string, mode?: ResumeMode): Promise<Ack>;
    /** Keeps a resumable run as it is (chat.dismiss). */
    dismiss(runId: string): Promise<Ack>;
    /**
     * Fetches messages older than the oldest one held (history.fetch, at most limit, default
     * 50) and puts them in front. Resolves with how many were added and whether more exist.
     * A call while one is under way returns that one's promise.
     */
    loadOlder(limit?: number): Promise<{
        added: number;
        hasMore: boolean;
    }>;
    private enqueue;
    /** Sends queued commands on the current connection, in order, up to maxInFlight. */
    private flush;
    private transmit;
    private open;
    /**
     * The URL to dial: the given one, with ?session=<id> once the session is known, so a
     * load balancer that hashes on it sends the client straight to the node holding the
     * session (any node serves it all the same). The URL's own query is kept.
     */
    private dialURL;
    private onOpen;
    private onMessage;
    /**
     * The connection's token is about to expire: a token function is asked for a new one,
     * sent as auth.refresh. With a fixed token there is nothing to send; the connection
     * closes with 4001 at the expiry, which is fatal for a fixed token.
     */
    private onAuthExpiring;
    private onHelloAnswer;
    private onEvent;
    private onReply;
    private onCommandError;
    private outcomeOfResend;
    private onHelloError;
    private onClose;
    /** Forgets the current socket: its handlers are cleared and its commands go again on the next. */
    private detach;
    /** Closes the current socket from this side. */
    private drop;
    /** Reconnects now (backing off if this keeps happening). */
    private forceReconnect;
    private backoffDelay;
    private scheduleReconnect;
    private clearReconnect;
    /** A connection that does not open, or leaves its hello or a command unanswered, is dead. */
    private armWatchdog;
    private clearWatchdog;
    private fatal;
    private stop;
    private listen;
    private onShown;
    private onOnline;
    private onOffline;
    private connectionStatus;
    private updateConnection;
    private setState;
    private dirty;
    private schedulePersist;
    private clearPersist;
    /** Writes the state now if it changed since the last write. */
    private flushPersist;
}
