// ChatClient: one session over one WebSocket at a time, reconnecting for as long as it
// lives. It moves frames and feeds them to applyFrame (state.ts); everything it knows is
// in `state`, which it keeps in storage so that a reload starts from there.
import type {
  Ack,
  AckFrame,
  AuthExpiringFrame,
  ChatCancelFrame,
  ChatSendFrame,
  ClientFrame,
  CommandFrame,
  Decision,
  ErrorFrame,
  EventFrame,
  HelloFrame,
  HistoryFrame,
  ResumeMode,
  ServerFrame,
  WhileRunning,
} from './protocol.js';
import { isEvent } from './protocol.js';
import { ChatError } from './errors.js';
import { applyFrame, applyHistory, eventOrder, initialState, type ChatState, type ConnectionStatus } from './state.js';
import {
  forgetSession,
  lastSession,
  loadSession,
  rememberLastSession,
  resolveStorage,
  saveSession,
  type StorageLike,
} from './storage.js';
import { isUuid, uuid4 } from './ids.js';

/** A token, or a function that gives one (called before every hello, so it can refresh). */
export type TokenSource = string | (() => string | Promise<string>);

/** The parts of a WebSocket the client uses (the browser's, or Node's). */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: any) => any) | null;
  onmessage: ((ev: { data: any }) => any) | null;
  onclose: ((ev: { code: number; reason: string; wasClean?: boolean }) => any) | null;
  onerror: ((ev: any) => any) | null;
}
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/** What the client listens to for page life: window, document and navigator, or stand-ins. */
export interface ClientEnvironment {
  /** Gets online, offline, pageshow, pagehide. */
  window?: Pick<EventTarget, 'addEventListener' | 'removeEventListener'> | null;
  /** Gets visibilitychange, freeze, resume; visibilityState is read. */
  document?: (Pick<EventTarget, 'addEventListener' | 'removeEventListener'> & { visibilityState?: string }) | null;
  /** onLine is read at connect. */
  navigator?: { onLine?: boolean } | null;
}

/** What happened, for logging and tests: every socket opened and closed, frame sent and received. */
export type TraceEvent =
  | { type: 'open'; conn: number; url: string }
  | { type: 'close'; conn: number; code: number; reason: string; by: 'server' | 'client' }
  | { type: 'send'; conn: number; frame: ClientFrame }
  | {
      type: 'frame';
      conn: number;
      frame: ServerFrame;
      /** applied: a snapshot, resumed or event applied; old: an event already applied (ignored);
       * gap: an event after missing ones (ignored, the client reconnects); reply: ack, error,
       * history; stale: a frame the client did not expect (ignored). */
      outcome: 'applied' | 'old' | 'gap' | 'reply' | 'stale';
    }
  | { type: 'reconnect'; delayMs: number; reason: string };

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
  backoff?: { initialMs?: number; maxMs?: number };
  // ---- additions to the contract's options (all optional) ----
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

type Kind = 'send' | 'cancel' | 'decide' | 'resume' | 'regenerate' | 'select' | 'dismiss' | 'history' | 'revoke' | 'unqueue';

interface Pending {
  kind: Kind;
  requestId: string;
  /** Builds the frame when it is (re)sent. */
  build: () => CommandFrame;
  resolve: (v: any) => void;
  reject: (e: ChatError) => void;
  /** The connection it was sent on and waits for a reply from; 0: not sent (on the current one). */
  sentOn: number;
  sentAt: number;
  /** Times sent (on any connection). */
  sends: number;
  /** Sent only once the hello is answered (history: its `before` needs the caught-up state). */
  afterHello: boolean;
  /** Not before this time (a retry after busy or storage). */
  notBefore: number;
  storageRetries: number;
  /** cancel/decide: what they are about. */
  runId?: string;
  toolCallId?: string;
  decision?: Decision;
  /** revoke: the rule. */
  ruleId?: string;
}

const OPEN = 1;
const STORAGE_RETRIES = 3;

/** Close codes after which the client stops: see docs/protocol.md "Close codes". */
function isFatalClose(code: number, tokenIsFunction: boolean): boolean {
  switch (code) {
    case 4004: // session not found, deleted, or not yours
    case 4000: // protocol violation: a client bug, reconnecting repeats it
    case 1008: // origin not allowed
    case 1009: // frame too large
      return true;
    case 4001: // unauthorized: only a token function can give a new token
      return !tokenIsFunction;
    default:
      return false;
  }
}

function defaultURL(): string {
  const loc = (globalThis as { location?: Location }).location;
  if (!loc || !loc.host) throw new Error('ChatClient: no url given and no location to derive it from');
  return `${loc.protocol === 'https:' ? 'wss' : 'ws'}://${loc.host}/v1/ws`;
}

export class ChatClient {
  private _state: ChatState;
  private readonly subscribers = new Set<(state: ChatState) => void>();
  private notifyQueued = false;

  private readonly url: string;
  private readonly token: TokenSource | undefined;
  private readonly storage: StorageLike;
  private readonly WS: WebSocketConstructor;
  private readonly initialMs: number;
  private readonly maxMs: number;
  private readonly persistThrottleMs: number;
  private readonly staleAfterHiddenMs: number;
  private readonly replyTimeoutMs: number;
  private readonly maxInFlight: number;
  private readonly env: ClientEnvironment;
  private readonly trace: ((e: TraceEvent) => void) | undefined;

  private started = false;
  private stopped = false;
  private ws: WebSocketLike | null = null;
  private conn = 0; // id of the current socket; increases with every socket
  private socketOpen = false;
  private helloSent = false;
  private helloOk = false;
  private helloRequestId = '';
  private helloSentAt = 0;
  private openedAt = 0;
  private attempt = 0;
  private forcedAt: number[] = [];
  private wantSnapshot = false;
  private offline = false;
  private hiddenAt: number | null = null;
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  private watchdogTimer: ReturnType<typeof setTimeout> | null = null;
  private flushTimer: ReturnType<typeof setTimeout> | null = null;
  private persistTimer: ReturnType<typeof setTimeout> | null = null;
  private persisted: Pick<ChatState, 'epoch' | 'lastSeq' | 'messages' | 'hasMore' | 'activeRun' | 'lastRun'> | null =
    null;
  private readonly pending = new Map<string, Pending>();
  private olderLoad: Promise<{ added: number; hasMore: boolean }> | null = null;
  private listeners: Array<() => void> = [];

  constructor(opts: ChatClientOptions = {}) {
    this.url = opts.url ?? defaultURL();
    this.token = opts.token;
    this.storage = resolveStorage(opts.storage);
    const WS = (opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket) as
      | WebSocketConstructor
      | undefined;
    if (!WS) throw new Error('ChatClient: no WebSocket implementation (pass opts.WebSocket)');
    this.WS = WS;
    this.initialMs = Math.max(1, opts.backoff?.initialMs ?? 500);
    this.maxMs = Math.max(this.initialMs, opts.backoff?.maxMs ?? 10000);
    this.persistThrottleMs = opts.persistThrottleMs ?? 1000;
    this.staleAfterHiddenMs = opts.staleAfterHiddenMs ?? 10000;
    this.replyTimeoutMs = opts.replyTimeoutMs ?? 20000;
    this.maxInFlight = Math.max(2, Math.min(16, opts.maxInFlight ?? 8));
    const g = globalThis as {
      addEventListener?: unknown;
      document?: ClientEnvironment['document'];
      navigator?: ClientEnvironment['navigator'];
    };
    this.env = opts.environment ?? {
      window: typeof g.addEventListener === 'function' ? (globalThis as unknown as EventTarget) : null,
      document: g.document ?? null,
      navigator: g.navigator ?? null,
    };
    this.trace = opts.onTrace;

    let sessionId = opts.sessionId ?? null;
    if (sessionId !== null && !isUuid(sessionId)) throw new Error(`ChatClient: sessionId must be a UUID, got ${JSON.stringify(sessionId)}`);
    // The server spells ids in lower case: so does the state, and the storage key.
    if (sessionId !== null) sessionId = sessionId.toLowerCase();
    // A new session is named by the server (a client may not choose the id of a session
    // that does not exist): it stays null until the answer to a hello without one. See
    // flush for why commands wait for it.
    let state = initialState(sessionId);
    const stored = sessionId === null ? null : loadSession(this.storage, sessionId);
    if (stored) {
      state = {
        ...state,
        epoch: stored.epoch,
        lastSeq: stored.lastSeq,
        messages: stored.messages,
        hasMore: stored.hasMore,
        activeRun: stored.activeRun ?? null,
        lastRun: stored.lastRun ?? null,
      };
      this.persisted = state;
    }
    this._state = state;
  }

  /**
   * The session this storage followed last (the default storage: this tab's), or null.
   * A page that reloads can pass it as sessionId to pick up where it was.
   */
  static lastSessionId(storage?: StorageLike | null): string | null {
    return lastSession(resolveStorage(storage));
  }

  /** Removes a session's stored state (for example after deleting the session). */
  static forget(sessionId: string, storage?: StorageLike | null): void {
    forgetSession(resolveStorage(storage), sessionId);
  }

  /** The current state; replaced (never modified) on every change. */
  get state(): ChatState {
    return this._state;
  }

  /**
   * Calls fn after state changes (at most once per microtask, with the latest state), the
   * server naming a new session (state.sessionId no longer null) included. Returns the
   * unsubscribe.
   */
  subscribe(fn: (state: ChatState) => void): () => void {
    this.subscribers.add(fn);
    return () => {
      this.subscribers.delete(fn);
    };
  }

  /** Starts connecting (once; later calls do nothing). Commands made before are queued
   * (a new session's until the server has named it). */
  connect(): void {
    if (this.started || this.stopped) return;
    this.started = true;
    this.listen();
    // Offline or not, try at once: navigator.onLine is not always right (a machine with
    // only a loopback network says offline, and chatd may be on that loopback).
    this.offline = this.env.navigator?.onLine === false;
    this.open();
  }

  /** Stops for good: closes with 1000, rejects what waits for a reply (ChatError closed), reconnects no more. */
  close(): void {
    if (this.stopped) return;
    this.flushPersist();
    this.stop({ code: 1000, reason: 'closed by the client' }, 'the client was closed');
  }

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
  send(content: string, opts: { requestId?: string; whileRunning?: WhileRunning } = {}): Promise<Ack> {
    return this.sendFrame('send', content, opts);
  }

  /**
   * Edits a user message (chat.send with editOf): content becomes a new version of the
   * message messageId (any user message, on any branch), a sibling of it, and starts a
   * run; its branch becomes the active path for every tab (branch.selected, then
   * chat.started), the old version stays one arrow away (message.branch). While a run is
   * active it rejects with run_active, unless opts.whileRunning is 'interrupt' (the run is
   * cancelled first). not_found: messageId is not a user message of the session.
   */
  edit(messageId: string, content: string, opts: { requestId?: string; whileRunning?: 'interrupt' | 'reject' } = {}): Promise<Ack> {
    if (!isUuid(messageId)) throw new Error(`ChatClient.edit: messageId must be a UUID, got ${JSON.stringify(messageId)}`);
    return this.sendFrame('edit', content, { ...opts, editOf: messageId.toLowerCase() });
  }

  private sendFrame(
    what: 'send' | 'edit',
    content: string,
    opts: { requestId?: string; whileRunning?: WhileRunning; editOf?: string },
  ): Promise<Ack> {
    // A requestId of the caller's lets a UI match its "sending" placeholder to the user
    // message the run brings (Message.requestId), which can come before the ack.
    const requestId = opts.requestId ?? uuid4();
    if (requestId.length < 1 || requestId.length > 128) throw new Error(`ChatClient.${what}: requestId must be 1 to 128 characters`);
    const { whileRunning, editOf } = opts;
    if (whileRunning !== undefined && !['queue', 'steer', 'reject', 'interrupt'].includes(whileRunning)) {
      throw new Error(`ChatClient.${what}: whileRunning must be 'queue', 'steer', 'interrupt' or 'reject'`);
    }
    return this.enqueue<Ack>({
      kind: 'send',
      requestId,
      build: () => {
        const f: ChatSendFrame = { type: 'chat.send', requestId, content };
        if (whileRunning !== undefined) f.whileRunning = whileRunning;
        if (editOf !== undefined) f.editOf = editOf;
        return f;
      },
    });
  }

  /**
   * Answers the question of an ended run again (chat.regenerate; runId: any ended run of
   * the session, on any branch): a new run, whose run.retryOf is runId, writes a new
   * answer beside the old one, and its branch becomes the active path for every tab. Resolves
   * with the ack (runId: the new run). run_active while a run is active; not_found for an
   * unknown run.
   */
  regenerate(runId: string, opts: { requestId?: string } = {}): Promise<Ack> {
    const requestId = opts.requestId ?? uuid4();
    return this.enqueue<Ack>({
      kind: 'regenerate',
      requestId,
      runId,
      build: () => ({ type: 'chat.regenerate', requestId, runId }),
    });
  }

  /**
   * Shows another branch (branch.select): the active path becomes the one through
   * messageId (its ancestors, itself, then the branch below it written last), in every tab
   * of the session (branch.selected replaces state.messages). Resolves once the server has
   * it; a run streaming goes on, on its own branch. not_found: no such message. The ids to
   * pass are in message.branch (see branchOf).
   */
  selectBranch(messageId: string): Promise<void> {
    const requestId = uuid4();
    return this.enqueue<AckFrame>({
      kind: 'select',
      requestId,
      build: () => ({ type: 'branch.select', requestId, messageId }),
    }).then(() => undefined);
  }

  /** Cancels the active run (runId: only that run; default the run active when called). */
  cancel(runId?: string): Promise<Ack> {
    const requestId = uuid4();
    const target = runId ?? this._state.activeRun?.runId;
    return this.enqueue<Ack>({
      kind: 'cancel',
      requestId,
      ...(target !== undefined ? { runId: target } : {}),
      build: () => {
        const f: ChatCancelFrame = { type: 'chat.cancel', requestId };
        if (target !== undefined) f.runId = target;
        return f;
      },
    });
  }

  /**
   * Answers a tool approval (runId: default the run of that call, as the state shows it).
   * It sends the call's inputHash as the state shows it (the input the user was shown),
   * so a decision on another input is refused with conflict; opts.inputHash overrides it.
   * opts.scope 'session' (approve only) also allows matching calls for the rest of the
   * session: an approval rule, listed in state.approvalRules.
   */
  decide(
    toolCallId: string,
    decision: Decision,
    runId?: string,
    opts: { scope?: 'session'; inputHash?: string } = {},
  ): Promise<Ack> {
    const requestId = uuid4();
    const msg = [...this._state.messages]
      .reverse()
      .find((m) => m.role === 'tool' && m.tool?.callId === toolCallId && (runId === undefined || m.runId === runId));
    const target = runId ?? msg?.runId ?? this._state.activeRun?.runId;
    const pending = this._state.activeRun?.pendingApproval;
    const inputHash =
      opts.inputHash ??
      msg?.tool?.inputHash ??
      (pending && pending.toolCallId === toolCallId ? pending.inputHash : undefined);
    const scope = opts.scope;
    return this.enqueue<Ack>({
      kind: 'decide',
      requestId,
      toolCallId,
      decision,
      ...(target !== undefined ? { runId: target } : {}),
      build: () => ({
        type: 'tool.decide',
        requestId,
        toolCallId,
        decision,
        ...(target !== undefined ? { runId: target } : {}),
        ...(inputHash !== undefined ? { inputHash } : {}),
        ...(scope !== undefined ? { scope } : {}),
      }),
    });
  }

  /**
   * Takes back a queued message (chat.unqueue; requestId: the one its send used) before
   * its run starts. Rejects with not_found when it is not queued (any more).
   */
  unqueue(requestId: string): Promise<void> {
    if (this.pending.has(requestId)) throw new Error('ChatClient.unqueue: the send of this message is not answered yet');
    return this.enqueue<AckFrame>({
      kind: 'unqueue',
      requestId,
      build: () => ({ type: 'chat.unqueue', requestId }),
    }).then(() => undefined);
  }

  /** Revokes one of the session's approval rules (approval.revoke): later matching calls ask again. */
  revokeRule(ruleId: string): Promise<void> {
    const requestId = uuid4();
    return this.enqueue<AckFrame>({
      kind: 'revoke',
      requestId,
      ruleId,
      build: () => ({ type: 'approval.revoke', requestId, ruleId }),
    }).then(() => undefined);
  }

  /** Continues (or with mode retry, answers again) a resumable run (chat.resume). */
  resume(runId: string, mode?: ResumeMode): Promise<Ack> {
    const requestId = uuid4();
    return this.enqueue<Ack>({
      kind: 'resume',
      requestId,
      runId,
      build: () => ({ type: 'chat.resume', requestId, runId, ...(mode ? { mode } : {}) }),
    });
  }

  /** Keeps a resumable run as it is (chat.dismiss). */
  dismiss(runId: string): Promise<Ack> {
    const requestId = uuid4();
    return this.enqueue<Ack>({ kind: 'dismiss', requestId, runId, build: () => ({ type: 'chat.dismiss', requestId, runId }) });
  }

  /**
   * Fetches messages older than the oldest one held (history.fetch, at most limit, default
   * 50) and puts them in front. Resolves with how many were added and whether more exist.
   * A call while one is under way returns that one's promise.
   */
  loadOlder(limit = 50): Promise<{ added: number; hasMore: boolean }> {
    if (this.olderLoad) return this.olderLoad;
    if (this._state.epoch !== null && !this._state.hasMore) return Promise.resolve({ added: 0, hasMore: false });
    const requestId = uuid4();
    const n = Math.max(1, Math.min(200, Math.floor(limit)));
    const p = this.enqueue<{ added: number; hasMore: boolean }>({
      kind: 'history',
      requestId,
      afterHello: true,
      build: () => {
        const oldest = this._state.messages[0]?.position;
        return { type: 'history.fetch', requestId, limit: n, ...(oldest !== undefined ? { before: oldest } : {}) };
      },
    });
    const done = () => {
      if (this.olderLoad === p) this.olderLoad = null;
    };
    this.olderLoad = p;
    p.then(done, done);
    return p;
  }

  // ---- commands ----

  private enqueue<T>(
    spec: Pick<Pending, 'kind' | 'requestId' | 'build'> & Partial<Pick<Pending, 'afterHello' | 'runId' | 'toolCallId' | 'decision' | 'ruleId'>>,
  ): Promise<T> {
    if (this.stopped) {
      const closed = this._state.closed;
      return Promise.reject(
        new ChatError('closed', `the client is closed${closed ? ` (${closed.code} ${closed.reason})` : ''}`, {
          requestId: spec.requestId,
        }),
      );
    }
    return new Promise<T>((resolve, reject) => {
      this.pending.set(spec.requestId, {
        afterHello: false,
        ...spec,
        resolve,
        reject,
        sentOn: 0,
        sentAt: 0,
        sends: 0,
        notBefore: 0,
        storageRetries: 0,
      });
      this.flush();
    });
  }

  /** Sends queued commands on the current connection, in order, up to maxInFlight. */
  private flush(): void {
    if (!this.ws || !this.socketOpen || !this.helloSent) return;
    // A new session's commands wait until a snapshot named it. Sent behind a hello that
    // creates a session, a command whose answer is lost with the connection would be
    // sent again behind the next such hello, which creates another session: one message
    // could start two runs in two sessions. Held back, it goes once, to the named one.
    if (this._state.sessionId === null) return;
    const conn = this.conn;
    let inFlight = this.helloOk ? 0 : 1;
    for (const p of this.pending.values()) if (p.sentOn === conn) inFlight++;
    const now = Date.now();
    let later = Infinity;
    for (const p of this.pending.values()) {
      if (inFlight >= this.maxInFlight) break;
      if (p.sentOn === conn) continue;
      if (p.afterHello && !this.helloOk) continue;
      if (p.notBefore > now) {
        later = Math.min(later, p.notBefore);
        continue;
      }
      const frame = p.build();
      if (!this.transmit(frame)) return;
      p.sentOn = conn;
      p.sentAt = now;
      p.sends++;
      inFlight++;
    }
    if (later !== Infinity && !this.flushTimer) {
      this.flushTimer = setTimeout(() => {
        this.flushTimer = null;
        this.flush();
      }, later - now);
    }
    this.armWatchdog();
  }

  private transmit(frame: ClientFrame): boolean {
    const ws = this.ws;
    if (!ws) return false;
    try {
      ws.send(JSON.stringify(frame));
    } catch {
      this.drop('send failed');
      this.scheduleReconnect('send failed');
      return false;
    }
    this.trace?.({ type: 'send', conn: this.conn, frame });
    return true;
  }

  // ---- the socket ----

  private open(): void {
    if (this.stopped || this.ws) return;
    this.clearReconnect();
    const conn = ++this.conn;
    let ws: WebSocketLike;
    const url = this.dialURL();
    try {
      ws = new this.WS(url, 'chatd.v1');
    } catch {
      this.scheduleReconnect('WebSocket constructor failed');
      return;
    }
    this.ws = ws;
    this.socketOpen = false;
    this.helloSent = false;
    this.helloOk = false;
    this.openedAt = Date.now();
    ws.onopen = () => {
      if (conn === this.conn) void this.onOpen(conn, url);
    };
    ws.onmessage = (ev) => {
      if (conn === this.conn) this.onMessage(conn, ev.data);
    };
    ws.onclose = (ev) => {
      if (conn === this.conn) this.onClose(ev.code, ev.reason ?? '');
    };
    ws.onerror = () => {
      // A close event follows.
    };
    this.updateConnection();
    this.armWatchdog();
  }

  /**
   * The URL to dial: the given one, with ?session=<id> once the session is known, so a
   * load balancer that hashes on it sends the client straight to the node holding the
   * session (any node serves it all the same). The URL's own query is kept.
   */
  private dialURL(): string {
    const id = this._state.sessionId;
    if (id === null) return this.url;
    try {
      const u = new URL(this.url);
      u.searchParams.set('session', id);
      return u.toString();
    } catch {
      return `${this.url}${this.url.includes('?') ? '&' : '?'}session=${encodeURIComponent(id)}`;
    }
  }

  private async onOpen(conn: number, url: string): Promise<void> {
    this.socketOpen = true;
    // A socket that opens proves the network works, whatever the browser said.
    this.offline = false;
    this.trace?.({ type: 'open', conn, url });
    this.updateConnection();
    let token: string | undefined;
    try {
      token = typeof this.token === 'function' ? await this.token() : this.token;
    } catch {
      if (conn !== this.conn) return;
      this.drop('the token function failed');
      this.scheduleReconnect('the token function failed');
      return;
    }
    if (conn !== this.conn || !this.socketOpen) return;
    const s = this._state;
    this.helloRequestId = `hello-${uuid4()}`;
    // Without a sessionId the hello creates a session; with one, it must exist and be ours.
    const hello: HelloFrame = { type: 'hello', requestId: this.helloRequestId };
    if (s.sessionId !== null) hello.sessionId = s.sessionId;
    if (s.epoch !== null && !this.wantSnapshot) {
      hello.epoch = s.epoch;
      hello.lastSeq = s.lastSeq;
    }
    if (token) hello.token = token;
    if (!this.transmit(hello)) return;
    this.helloSent = true;
    this.helloSentAt = Date.now();
    this.flush();
  }

  private onMessage(conn: number, data: unknown): void {
    if (typeof data !== 'string') return;
    let frame: ServerFrame;
    try {
      frame = JSON.parse(data) as ServerFrame;
    } catch {
      return;
    }
    if (!frame || typeof frame !== 'object' || typeof frame.type !== 'string') return;
    switch (frame.type) {
      case 'snapshot':
      case 'resumed':
        this.onHelloAnswer(conn, frame);
        return;
      case 'ack':
      case 'error':
      case 'history':
        this.onReply(conn, frame);
        return;
      case 'auth.expiring':
        void this.onAuthExpiring(conn, frame);
        return;
      case 'auth.refreshed':
        this.trace?.({ type: 'frame', conn, frame, outcome: 'reply' });
        return;
    }
    if (!isEvent(frame)) {
      this.trace?.({ type: 'frame', conn, frame, outcome: 'stale' });
      return;
    }
    this.onEvent(conn, frame);
  }

  /**
   * The connection's token is about to expire: a token function is asked for a new one,
   * sent as auth.refresh. With a fixed token there is nothing to send; the connection
   * closes with 4001 at the expiry, which is fatal for a fixed token.
   */
  private async onAuthExpiring(conn: number, frame: AuthExpiringFrame): Promise<void> {
    this.trace?.({ type: 'frame', conn, frame, outcome: 'applied' });
    if (typeof this.token !== 'function' || !this.helloOk) return;
    let token: string | undefined;
    try {
      token = await this.token();
    } catch {
      return; // the close at the expiry reconnects, asking again
    }
    if (conn !== this.conn || !this.socketOpen || !token) return;
    this.transmit({ type: 'auth.refresh', requestId: `auth-${uuid4()}`, token });
  }

  private onHelloAnswer(conn: number, frame: Extract<ServerFrame, { type: 'snapshot' | 'resumed' }>): void {
    if (this.helloOk || (frame.requestId !== undefined && frame.requestId !== this.helloRequestId)) {
      this.trace?.({ type: 'frame', conn, frame, outcome: 'stale' });
      return;
    }
    const s = this._state;
    if (frame.type === 'resumed' && (frame.epoch !== s.epoch || frame.lastSeq !== s.lastSeq || frame.sessionId !== s.sessionId)) {
      // Not the position this state is at: never apply events on top of it. Start over
      // from a snapshot.
      this.trace?.({ type: 'frame', conn, frame, outcome: 'stale' });
      this.wantSnapshot = true;
      this.forceReconnect('resumed at another position');
      return;
    }
    this.wantSnapshot = false;
    this.helloOk = true;
    this.attempt = 0;
    this.setState(applyFrame(s, frame));
    this.trace?.({ type: 'frame', conn, frame, outcome: 'applied' });
    if (this._state.sessionId) rememberLastSession(this.storage, this._state.sessionId);
    this.updateConnection();
    this.flush();
  }

  private onEvent(conn: number, e: EventFrame): void {
    if (!this.helloOk) {
      this.trace?.({ type: 'frame', conn, frame: e, outcome: 'stale' });
      return;
    }
    const order = eventOrder(this._state, e);
    this.trace?.({ type: 'frame', conn, frame: e, outcome: order === 'next' ? 'applied' : order });
    if (order === 'next') {
      this.setState(applyFrame(this._state, e));
    } else if (order === 'gap') {
      // Events are missing: a new hello with lastSeq gets them (or a snapshot).
      this.forceReconnect(`gap: seq ${e.seq} after ${this._state.lastSeq}`);
    }
  }

  private onReply(conn: number, frame: AckFrame | ErrorFrame | HistoryFrame): void {
    this.trace?.({ type: 'frame', conn, frame, outcome: 'reply' });
    const id = frame.requestId;
    if (id !== undefined && id === this.helloRequestId && !this.helloOk) {
      if (frame.type === 'error') this.onHelloError(frame);
      return;
    }
    const p = id !== undefined ? this.pending.get(id) : undefined;
    if (!p || p.sentOn !== conn) return;
    p.sentOn = 0;
    if (frame.type === 'history') {
      this.pending.delete(p.requestId);
      const before = this._state.messages.length;
      this.setState(applyHistory(this._state, frame));
      p.resolve({ added: this._state.messages.length - before, hasMore: this._state.hasMore });
    } else if (frame.type === 'ack') {
      this.pending.delete(p.requestId);
      p.resolve(frame);
    } else {
      this.onCommandError(p, frame);
    }
    this.flush();
  }

  private onCommandError(p: Pending, e: ErrorFrame): void {
    const now = Date.now();
    if (e.code === 'busy') {
      // Not handled: send it again a little later (the client keeps under the server's
      // bound, so this means another client's commands share the limit somehow).
      p.notBefore = now + Math.min(this.maxMs, 100 * 2 ** Math.min(p.sends, 6));
      return;
    }
    const idempotent =
      p.kind === 'send' ||
      p.kind === 'resume' ||
      p.kind === 'regenerate' ||
      p.kind === 'select' ||
      p.kind === 'history' ||
      p.kind === 'dismiss';
    if (e.code === 'storage' && idempotent && p.storageRetries < STORAGE_RETRIES) {
      // The database failed; the same requestId again can never run twice.
      p.storageRetries++;
      p.notBefore = now + this.backoffDelay(p.storageRetries);
      return;
    }
    this.pending.delete(p.requestId);
    if (p.sends > 1) {
      // A re-send after a reconnect: the first may have been handled before the
      // connection dropped. If what it asked for is what happened, it succeeded.
      const ack = this.outcomeOfResend(p, e);
      if (ack) {
        p.resolve(ack);
        return;
      }
    }
    p.reject(new ChatError(e.code, e.message, { requestId: p.requestId }));
  }

  private outcomeOfResend(p: Pending, e: ErrorFrame): AckFrame | null {
    const s = this._state;
    const runStatus = (runId: string) =>
      s.activeRun?.runId === runId ? s.activeRun.status : s.lastRun?.runId === runId ? s.lastRun.status : null;
    if (p.kind === 'cancel' && e.code === 'no_run' && p.runId) {
      if (runStatus(p.runId) === 'cancelled') {
        return { type: 'ack', requestId: p.requestId, runId: p.runId, duplicate: true, status: 'cancelled' };
      }
    }
    if (p.kind === 'regenerate' && e.code === 'run_active' && s.activeRun?.requestId === p.requestId) {
      // The first send started the run that is now active.
      return { type: 'ack', requestId: p.requestId, runId: s.activeRun.runId, duplicate: true, status: s.activeRun.status };
    }
    if (p.kind === 'unqueue' && e.code === 'not_found' && p.sends > 1 && !s.queued.some((q) => q.requestId === p.requestId)) {
      // The first send took it back.
      return { type: 'ack', requestId: p.requestId, duplicate: true } as AckFrame;
    }
    if (p.kind === 'revoke' && e.code === 'not_found' && p.ruleId && !s.approvalRules.some((r) => r.ruleId === p.ruleId)) {
      // The first send revoked it.
      return { type: 'ack', requestId: p.requestId, duplicate: true } as AckFrame;
    }
    if (p.kind === 'decide' && (e.code === 'conflict' || e.code === 'not_found') && p.toolCallId) {
      const m = [...s.messages]
        .reverse()
        .find((m) => m.role === 'tool' && m.tool?.callId === p.toolCallId && (!p.runId || m.runId === p.runId));
      const ts = m?.tool?.status;
      const approved = ts === 'running' || ts === 'ok' || ts === 'error' || ts === 'interrupted';
      if (m && m.runId && ((p.decision === 'approve' && approved) || (p.decision === 'deny' && ts === 'denied'))) {
        return {
          type: 'ack',
          requestId: p.requestId,
          runId: m.runId,
          duplicate: true,
          status: runStatus(m.runId) ?? 'running',
        };
      }
    }
    return null;
  }

  private onHelloError(e: ErrorFrame): void {
    switch (e.code) {
      case 'not_found':
        // The server closes with 4004 right behind it; do not wait for that.
        this.fatal(4004, e.message);
        return;
      case 'unauthorized':
        if (typeof this.token === 'function') break;
        this.fatal(4001, e.message);
        return;
      case 'bad_request':
        this.fatal(4000, `hello refused: ${e.message}`);
        return;
      case 'too_many_sessions':
        // A new session over the user's limit: trying again cannot help until the app
        // deletes one (SessionsClient.delete) and starts a new client.
        this.fatal(4029, e.message);
        return;
      case 'moved':
        // Another node holds the session and this one could not reach it; 4010 follows.
        // Reconnect at once: the next node (or this one, once the lease is free) serves it.
        this.forceReconnect('hello: moved');
        return;
    }
    // storage, internal, ...: say hello again later, on a new connection. Commands sent
    // behind this hello are not handled; they go again after the next hello.
    this.drop(`hello failed: ${e.code}`);
    this.scheduleReconnect(`hello failed: ${e.code}`);
  }

  private onClose(code: number, reason: string): void {
    this.trace?.({ type: 'close', conn: this.conn, code, reason, by: 'server' });
    const helloOk = this.helloOk;
    this.detach();
    // A 4000 before the hello was answered is the server's hello deadline (a page frozen
    // between opening the socket and saying hello, a hello stuck in the network), not a
    // bug of this client: try again. After it, it is a protocol violation: stop.
    const deadline = code === 4000 && !helloOk;
    if (!deadline && isFatalClose(code, typeof this.token === 'function')) {
      this.fatal(code, reason || `closed with ${code}`);
      return;
    }
    if (code === 4010) {
      // The session moved to another node: reconnect at once (forceReconnect backs off
      // only if it keeps happening), and resume.
      this.forceReconnect(`closed 4010${reason ? ' ' + reason : ''}`);
      return;
    }
    this.scheduleReconnect(`closed ${code}${reason ? ' ' + reason : ''}`);
  }

  /** Forgets the current socket: its handlers are cleared and its commands go again on the next. */
  private detach(): WebSocketLike | null {
    const ws = this.ws;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    }
    this.ws = null;
    this.socketOpen = false;
    this.helloSent = false;
    this.helloOk = false;
    this.conn++; // frames of the old socket, should any come, are stale
    for (const p of this.pending.values()) p.sentOn = 0;
    this.clearWatchdog();
    this.updateConnection();
    return ws;
  }

  /** Closes the current socket from this side. */
  private drop(reason: string, code = 1000): void {
    const conn = this.conn;
    const ws = this.detach();
    if (!ws) return;
    this.trace?.({ type: 'close', conn, code, reason, by: 'client' });
    try {
      ws.close(code, reason.slice(0, 100));
    } catch {
      // already closed
    }
  }

  /** Reconnects now (backing off if this keeps happening). */
  private forceReconnect(reason: string): void {
    if (this.stopped) return;
    this.drop(reason);
    const now = Date.now();
    this.forcedAt = this.forcedAt.filter((t) => now - t < 10000);
    this.forcedAt.push(now);
    if (this.offline) {
      this.scheduleReconnect(reason);
    } else if (this.forcedAt.length > 3) {
      this.scheduleReconnect(reason);
    } else {
      this.clearReconnect();
      this.trace?.({ type: 'reconnect', delayMs: 0, reason });
      this.open();
    }
  }

  private backoffDelay(attempt: number): number {
    const base = Math.min(this.maxMs, this.initialMs * 2 ** Math.min(attempt, 30));
    return Math.round(base / 2 + (Math.random() * base) / 2);
  }

  private scheduleReconnect(reason: string): void {
    if (this.stopped || this.ws || this.reconnectTimer) return;
    // Offline too, with the same backoff: navigator.onLine is not always right.
    const delay = this.backoffDelay(this.attempt++);
    this.trace?.({ type: 'reconnect', delayMs: delay, reason });
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.open();
    }, delay);
    this.updateConnection();
  }

  private clearReconnect(): void {
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
  }

  /** A connection that does not open, or leaves its hello or a command unanswered, is dead. */
  private armWatchdog(): void {
    this.clearWatchdog();
    if (!this.ws) return;
    let since = Infinity;
    if (!this.socketOpen) since = this.openedAt;
    else if (!this.helloOk && this.helloSent) since = this.helloSentAt;
    for (const p of this.pending.values()) if (p.sentOn === this.conn) since = Math.min(since, p.sentAt);
    if (since === Infinity) return;
    const conn = this.conn;
    this.watchdogTimer = setTimeout(
      () => {
        this.watchdogTimer = null;
        if (conn !== this.conn) return;
        this.drop('no answer');
        this.scheduleReconnect('no answer');
      },
      Math.max(0, since + this.replyTimeoutMs - Date.now()),
    );
  }

  private clearWatchdog(): void {
    if (this.watchdogTimer) clearTimeout(this.watchdogTimer);
    this.watchdogTimer = null;
  }

  private fatal(code: number, reason: string): void {
    if (this.stopped) return;
    const sessionId = this._state.sessionId;
    if (code === 4004 && sessionId) {
      // Deleted, or never ours: nothing stored is worth keeping.
      this.clearPersist();
      forgetSession(this.storage, sessionId);
    } else {
      this.flushPersist();
    }
    this.stop({ code, reason }, `the connection was closed for good (${code} ${reason})`);
  }

  private stop(closed: { code: number; reason: string }, why: string): void {
    this.stopped = true;
    this.clearReconnect();
    if (this.flushTimer) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    this.clearPersist();
    this.drop(closed.reason);
    this.clearWatchdog();
    for (const off of this.listeners) off();
    this.listeners = [];
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) p.reject(new ChatError('closed', why, { requestId: p.requestId }));
    // Stopped for good: not connected, and not trying (state.closed says why).
    this.setState({ ...this._state, closed, connection: 'offline' });
  }

  // ---- page life ----

  private listen(): void {
    const on = (
      target: Pick<EventTarget, 'addEventListener' | 'removeEventListener'> | null | undefined,
      type: string,
      fn: (ev: any) => void,
    ) => {
      if (!target || typeof target.addEventListener !== 'function') return;
      target.addEventListener(type, fn);
      this.listeners.push(() => target.removeEventListener(type, fn));
    };
    const { window: win, document: doc } = this.env;
    on(win, 'online', () => this.onOnline());
    on(win, 'offline', () => this.onOffline());
    on(win, 'pagehide', () => {
      this.hiddenAt ??= Date.now();
      this.flushPersist();
    });
    on(win, 'pageshow', (ev: { persisted?: boolean }) => {
      // Back from the back/forward cache: whatever socket there was is gone or stale.
      if (ev.persisted) {
        this.hiddenAt = null;
        this.forceReconnect('page restored from the back/forward cache');
      }
    });
    on(doc, 'visibilitychange', () => {
      if (doc?.visibilityState === 'hidden') {
        this.hiddenAt ??= Date.now();
        this.flushPersist();
      } else {
        this.onShown('page visible again');
      }
    });
    on(doc, 'freeze', () => {
      this.hiddenAt ??= Date.now();
      this.flushPersist();
    });
    on(doc, 'resume', () => this.onShown('page resumed from frozen'));
  }

  private onShown(reason: string): void {
    const since = this.hiddenAt;
    this.hiddenAt = null;
    if (since === null || this.stopped) return;
    if (Date.now() - since >= this.staleAfterHiddenMs) {
      // The server may have dropped the connection for missing pings, and the browser
      // may not know yet: a new hello costs little (resumed).
      this.forceReconnect(`${reason} after ${Date.now() - since} ms`);
    } else if (!this.ws && !this.offline) {
      this.clearReconnect();
      this.open();
    }
  }

  private onOnline(): void {
    if (this.stopped) return;
    this.offline = false;
    this.attempt = 0;
    if (!this.ws) {
      this.clearReconnect();
      this.open();
    } else {
      this.updateConnection();
    }
  }

  private onOffline(): void {
    if (this.stopped) return;
    this.offline = true;
    this.clearReconnect();
    this.drop('offline');
    this.scheduleReconnect('offline');
    this.updateConnection();
  }

  // ---- state, subscribers, storage ----

  private connectionStatus(): ConnectionStatus {
    if (this.ws && this.socketOpen) return this.helloOk ? 'live' : 'catching-up';
    return this.offline ? 'offline' : 'connecting';
  }

  private updateConnection(): void {
    const c = this.connectionStatus();
    if (c !== this._state.connection) this.setState({ ...this._state, connection: c });
  }

  private setState(next: ChatState): void {
    if (next === this._state) return;
    this._state = next;
    if (!this.stopped) this.schedulePersist();
    if (this.notifyQueued) return;
    this.notifyQueued = true;
    queueMicrotask(() => {
      this.notifyQueued = false;
      const s = this._state;
      for (const fn of [...this.subscribers]) {
        try {
          fn(s);
        } catch (err) {
          // One subscriber's bug must not starve the others.
          queueMicrotask(() => {
            throw err;
          });
        }
      }
    });
  }

  private dirty(): boolean {
    const s = this._state;
    const p = this.persisted;
    if (s.epoch === null) return false;
    return (
      !p ||
      p.epoch !== s.epoch ||
      p.lastSeq !== s.lastSeq ||
      p.messages !== s.messages ||
      p.hasMore !== s.hasMore ||
      p.activeRun !== s.activeRun ||
      p.lastRun !== s.lastRun
    );
  }

  private schedulePersist(): void {
    if (this.persistTimer || !this.dirty()) return;
    this.persistTimer = setTimeout(() => {
      this.persistTimer = null;
      this.flushPersist();
    }, this.persistThrottleMs);
  }

  private clearPersist(): void {
    if (this.persistTimer) clearTimeout(this.persistTimer);
    this.persistTimer = null;
  }

  /** Writes the state now if it changed since the last write. */
  private flushPersist(): void {
    this.clearPersist();
    if (!this.dirty()) return;
    const s = this._state;
    // Written or not, this state is settled: a failed write (quota) is not retried until
    // the state changes again, and the next load falls back to a snapshot.
    this.persisted = s;
    saveSession(this.storage, s);
  }
}
