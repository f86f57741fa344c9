// @chatd/client: built from web/client/src by web/client/build.mjs; do not edit.

// src/protocol.ts
var EVENT_TYPES = [
  "chat.started",
  "assistant.segment.started",
  "chat.delta",
  "assistant.segment.ended",
  "tool.start",
  "tool.update",
  "tool.output",
  "tool.end",
  "message.added",
  "run.status",
  "chat.done",
  "chat.error",
  "chat.cancelled",
  "approval.rules",
  "queue.updated",
  "branch.selected"
];
function isEvent(frame) {
  return typeof frame.seq === "number";
}
function isActiveStatus(status) {
  return status === "running" || status === "awaiting_approval" || status === "paused";
}

// src/state.ts
function initialState(sessionId = null) {
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
    connection: "connecting",
    closed: null
  };
}
function applyFrame(state, frame) {
  switch (frame.type) {
    case "snapshot":
      return applySnapshot(state, frame);
    case "resumed":
      return applyResumed(state, frame);
    case "ack":
    case "error":
    case "history":
    case "auth.refreshed":
    case "auth.expiring":
      return state;
    default:
      if (eventOrder(state, frame) !== "next") return state;
      return { ...applyEvent(state, frame), lastSeq: frame.seq };
  }
}
function eventOrder(state, event) {
  if (event.seq <= state.lastSeq) return "old";
  if (event.seq === state.lastSeq + 1) return "next";
  return "gap";
}
function applySnapshot(state, f) {
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
    queued: f.queued ?? []
  };
}
function applyResumed(state, f) {
  if (state.sessionId === f.sessionId && state.epoch === f.epoch) return state;
  return { ...state, sessionId: f.sessionId, epoch: f.epoch };
}
function applyEvent(state, e) {
  switch (e.type) {
    case "chat.started":
      return { ...withMessages(state, putMessage(state.messages, e.userMessage)), activeRun: e.run, lastRun: null };
    case "assistant.segment.started":
    case "tool.start":
    case "message.added":
      return withMessages(state, putMessage(state.messages, e.message));
    case "tool.update":
    case "tool.end":
      return withMessages(state, replaceMessage(state.messages, e.message));
    case "branch.selected":
      return { ...state, messages: pathMessages(e.messages), hasMore: e.hasMore };
    case "chat.delta":
      if (e.text === "") return state;
      return withMessages(
        state,
        updateMessage(state.messages, e.messageId, (m) => ({ ...m, content: m.content + e.text }))
      );
    case "assistant.segment.ended":
      return withMessages(
        state,
        updateMessage(state.messages, e.messageId, (m) => {
          const next = { ...m, status: e.status };
          if (e.error) next.error = e.error;
          return next;
        })
      );
    case "tool.output":
      if (e.text === "") return state;
      return withMessages(
        state,
        updateMessage(
          state.messages,
          e.messageId,
          (m) => m.tool ? { ...m, tool: { ...m.tool, output: (m.tool.output ?? "") + e.text } } : m
        )
      );
    case "run.status":
      if (isActiveStatus(e.run.status)) return { ...state, activeRun: e.run, lastRun: null };
      return {
        ...state,
        activeRun: state.activeRun?.runId === e.run.runId ? null : state.activeRun,
        lastRun: e.run
      };
    case "chat.done":
    case "chat.error":
    case "chat.cancelled":
      return { ...state, activeRun: null, lastRun: e.run };
    case "approval.rules":
      return { ...state, approvalRules: e.rules };
    case "queue.updated":
      return { ...state, queued: e.queued };
    default:
      return state;
  }
}
function applyHistory(state, frame) {
  const first = state.messages[0];
  const oldest = first ? first.position : Infinity;
  const have = new Set(state.messages.map((m) => m.id));
  const older = frame.messages.filter((m) => m.position < oldest && !have.has(m.id)).sort((a, b) => a.position - b.position);
  const dedup = [];
  for (const m of older) if (!dedup.length || dedup[dedup.length - 1].id !== m.id) dedup.push(m);
  if (first?.parentId !== void 0 && dedup.length && dedup[dedup.length - 1].id !== first.parentId) return state;
  if (!dedup.length && state.hasMore === frame.hasMore) return state;
  return {
    ...state,
    messages: dedup.length ? [...dedup, ...state.messages] : state.messages,
    hasMore: frame.hasMore
  };
}
function branchOf(m) {
  const b = m.branch;
  if (!b || b.siblings.length < 2) return null;
  const index = Math.max(0, Math.min(b.siblings.length - 1, b.index));
  const pos = { index, count: b.siblings.length };
  if (index > 0) pos.prev = b.siblings[index - 1];
  if (index < b.siblings.length - 1) pos.next = b.siblings[index + 1];
  return pos;
}
function pendingApprovals(state) {
  return state.messages.filter((m) => m.role === "tool" && m.tool?.status === "awaiting_approval");
}
function contextUsage(state) {
  return state.activeRun?.usage ?? state.lastRun?.usage ?? null;
}
function runProgress(state) {
  return state.activeRun?.progress ?? null;
}
function withMessages(state, messages) {
  return messages === state.messages ? state : { ...state, messages };
}
function pathMessages(from) {
  let messages = [];
  for (const m of from) messages = addMessage(messages, m);
  return messages;
}
function addMessage(messages, m) {
  const i = indexOf(messages, m.id);
  if (i >= 0) {
    const next2 = messages.slice();
    next2[i] = m;
    return next2;
  }
  let at = messages.length;
  while (at > 0 && messages[at - 1].position > m.position) at--;
  const next = messages.slice();
  next.splice(at, 0, m);
  return next;
}
function putMessage(messages, m) {
  const i = indexOf(messages, m.id);
  if (i >= 0) return replaceAt(messages, i, keepBranch(messages[i], m));
  const last = messages.length ? messages[messages.length - 1].id : null;
  if ((m.parentId ?? null) !== last) return messages;
  return [...messages, m];
}
function replaceMessage(messages, m) {
  const i = indexOf(messages, m.id);
  return i < 0 ? messages : replaceAt(messages, i, keepBranch(messages[i], m));
}
function keepBranch(held, next) {
  return held.branch && !next.branch ? { ...next, branch: held.branch } : next;
}
function replaceAt(messages, i, m) {
  if (messages[i] === m) return messages;
  const next = messages.slice();
  next[i] = m;
  return next;
}
function updateMessage(messages, id, fn) {
  const i = indexOf(messages, id);
  if (i < 0) return messages;
  return replaceAt(messages, i, fn(messages[i]));
}
function indexOf(messages, id) {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].id === id) return i;
  return -1;
}

// src/errors.ts
var ChatError = class extends Error {
  code;
  /** The requestId of the command that failed, when it had one. */
  requestId;
  /** SessionsClient: the HTTP status. */
  status;
  constructor(code, message, opts = {}) {
    super(message);
    this.name = "ChatError";
    this.code = code;
    if (opts.requestId !== void 0) this.requestId = opts.requestId;
    if (opts.status !== void 0) this.status = opts.status;
  }
};

// src/storage.ts
var MemoryStorage = class {
  items = /* @__PURE__ */ new Map();
  getItem(key) {
    return this.items.get(key) ?? null;
  }
  setItem(key, value) {
    this.items.set(key, String(value));
  }
  removeItem(key) {
    this.items.delete(key);
  }
  clear() {
    this.items.clear();
  }
};
var pageMemory = new MemoryStorage();
function resolveStorage(storage) {
  if (storage) return storage;
  if (storage === null) return new MemoryStorage();
  try {
    const s = globalThis.sessionStorage;
    if (s) {
      const probe = "chatd.v1.probe";
      s.setItem(probe, "1");
      s.removeItem(probe);
      return s;
    }
  } catch {
  }
  return pageMemory;
}
var KEY_PREFIX = "chatd.v1.";
function sessionKey(sessionId) {
  return `${KEY_PREFIX}session.${sessionId}`;
}
var LAST_SESSION_KEY = `${KEY_PREFIX}lastSession`;
var INDEX_KEY = `${KEY_PREFIX}sessions`;
var MAX_STORED_SESSIONS = 20;
function loadSession(storage, sessionId) {
  let raw;
  try {
    raw = storage.getItem(sessionKey(sessionId));
  } catch {
    return null;
  }
  if (!raw) return null;
  try {
    const s = JSON.parse(raw);
    if (s && s.v === 1 && s.sessionId === sessionId && typeof s.epoch === "string" && s.epoch !== "" && Number.isInteger(s.lastSeq) && s.lastSeq >= 0 && Array.isArray(s.messages) && typeof s.hasMore === "boolean") {
      return s;
    }
  } catch {
  }
  forgetSession(storage, sessionId);
  return null;
}
function saveSession(storage, state) {
  if (!state.sessionId || !state.epoch) return false;
  const item = {
    v: 1,
    sessionId: state.sessionId,
    epoch: state.epoch,
    lastSeq: state.lastSeq,
    messages: state.messages,
    hasMore: state.hasMore,
    activeRun: state.activeRun,
    lastRun: state.lastRun
  };
  const key = sessionKey(state.sessionId);
  try {
    storage.setItem(key, JSON.stringify(item));
  } catch {
    try {
      storage.removeItem(key);
    } catch {
    }
    return false;
  }
  touchIndex(storage, state.sessionId);
  return true;
}
function forgetSession(storage, sessionId) {
  try {
    storage.removeItem(sessionKey(sessionId));
    const index = readIndex(storage).filter((id) => id !== sessionId);
    storage.setItem(INDEX_KEY, JSON.stringify(index));
    if (storage.getItem(LAST_SESSION_KEY) === sessionId) storage.removeItem(LAST_SESSION_KEY);
  } catch {
  }
}
function rememberLastSession(storage, sessionId) {
  try {
    storage.setItem(LAST_SESSION_KEY, sessionId);
  } catch {
  }
}
function lastSession(storage) {
  try {
    return storage.getItem(LAST_SESSION_KEY);
  } catch {
    return null;
  }
}
function readIndex(storage) {
  try {
    const v = JSON.parse(storage.getItem(INDEX_KEY) ?? "[]");
    return Array.isArray(v) ? v.filter((x) => typeof x === "string") : [];
  } catch {
    return [];
  }
}
function touchIndex(storage, sessionId) {
  try {
    const index = readIndex(storage);
    if (index[0] === sessionId) return;
    const next = [sessionId, ...index.filter((id) => id !== sessionId)];
    for (const old of next.splice(MAX_STORED_SESSIONS)) storage.removeItem(sessionKey(old));
    storage.setItem(INDEX_KEY, JSON.stringify(next));
  } catch {
  }
}

// src/ids.ts
function randomBytes(n) {
  const b = new Uint8Array(n);
  const c = globalThis.crypto;
  if (c && typeof c.getRandomValues === "function") c.getRandomValues(b);
  else for (let i = 0; i < n; i++) b[i] = Math.floor(Math.random() * 256);
  return b;
}
function format(b) {
  let h = "";
  for (let i = 0; i < 16; i++) {
    h += b[i].toString(16).padStart(2, "0");
    if (i === 3 || i === 5 || i === 7 || i === 9) h += "-";
  }
  return h;
}
function uuid4() {
  const c = globalThis.crypto;
  if (c && typeof c.randomUUID === "function") return c.randomUUID();
  const b = randomBytes(16);
  b[6] = b[6] & 15 | 64;
  b[8] = b[8] & 63 | 128;
  return format(b);
}
var UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
function isUuid(s) {
  return UUID_RE.test(s) && s !== "00000000-0000-0000-0000-000000000000";
}
function splitToolName(name) {
  const i = name.indexOf("__");
  if (i <= 0 || i + 2 >= name.length) return { server: null, tool: name };
  return { server: name.slice(0, i), tool: name.slice(i + 2) };
}

// src/client.ts
var STORAGE_RETRIES = 3;
function isFatalClose(code, tokenIsFunction) {
  switch (code) {
    case 4004:
    // session not found, deleted, or not yours
    case 4e3:
    // protocol violation: a client bug, reconnecting repeats it
    case 1008:
    // origin not allowed
    case 1009:
      return true;
    case 4001:
      return !tokenIsFunction;
    default:
      return false;
  }
}
function defaultURL() {
  const loc = globalThis.location;
  if (!loc || !loc.host) throw new Error("ChatClient: no url given and no location to derive it from");
  return `${loc.protocol === "https:" ? "wss" : "ws"}://${loc.host}/v1/ws`;
}
var ChatClient = class {
  _state;
  subscribers = /* @__PURE__ */ new Set();
  notifyQueued = false;
  url;
  token;
  storage;
  WS;
  initialMs;
  maxMs;
  persistThrottleMs;
  staleAfterHiddenMs;
  replyTimeoutMs;
  maxInFlight;
  env;
  trace;
  started = false;
  stopped = false;
  ws = null;
  conn = 0;
  // id of the current socket; increases with every socket
  socketOpen = false;
  helloSent = false;
  helloOk = false;
  helloRequestId = "";
  helloSentAt = 0;
  openedAt = 0;
  attempt = 0;
  forcedAt = [];
  wantSnapshot = false;
  offline = false;
  hiddenAt = null;
  reconnectTimer = null;
  watchdogTimer = null;
  flushTimer = null;
  persistTimer = null;
  persisted = null;
  pending = /* @__PURE__ */ new Map();
  olderLoad = null;
  listeners = [];
  constructor(opts = {}) {
    this.url = opts.url ?? defaultURL();
    this.token = opts.token;
    this.storage = resolveStorage(opts.storage);
    const WS = opts.WebSocket ?? globalThis.WebSocket;
    if (!WS) throw new Error("ChatClient: no WebSocket implementation (pass opts.WebSocket)");
    this.WS = WS;
    this.initialMs = Math.max(1, opts.backoff?.initialMs ?? 500);
    this.maxMs = Math.max(this.initialMs, opts.backoff?.maxMs ?? 1e4);
    this.persistThrottleMs = opts.persistThrottleMs ?? 1e3;
    this.staleAfterHiddenMs = opts.staleAfterHiddenMs ?? 1e4;
    this.replyTimeoutMs = opts.replyTimeoutMs ?? 2e4;
    this.maxInFlight = Math.max(2, Math.min(16, opts.maxInFlight ?? 8));
    const g = globalThis;
    this.env = opts.environment ?? {
      window: typeof g.addEventListener === "function" ? globalThis : null,
      document: g.document ?? null,
      navigator: g.navigator ?? null
    };
    this.trace = opts.onTrace;
    let sessionId = opts.sessionId ?? null;
    if (sessionId !== null && !isUuid(sessionId)) throw new Error(`ChatClient: sessionId must be a UUID, got ${JSON.stringify(sessionId)}`);
    if (sessionId !== null) sessionId = sessionId.toLowerCase();
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
        lastRun: stored.lastRun ?? null
      };
      this.persisted = state;
    }
    this._state = state;
  }
  /**
   * The session this storage followed last (the default storage: this tab's), or null.
   * A page that reloads can pass it as sessionId to pick up where it was.
   */
  static lastSessionId(storage) {
    return lastSession(resolveStorage(storage));
  }
  /** Removes a session's stored state (for example after deleting the session). */
  static forget(sessionId, storage) {
    forgetSession(resolveStorage(storage), sessionId);
  }
  /** The current state; replaced (never modified) on every change. */
  get state() {
    return this._state;
  }
  /**
   * Calls fn after state changes (at most once per microtask, with the latest state), the
   * server naming a new session (state.sessionId no longer null) included. Returns the
   * unsubscribe.
   */
  subscribe(fn) {
    this.subscribers.add(fn);
    return () => {
      this.subscribers.delete(fn);
    };
  }
  /** Starts connecting (once; later calls do nothing). Commands made before are queued
   * (a new session's until the server has named it). */
  connect() {
    if (this.started || this.stopped) return;
    this.started = true;
    this.listen();
    this.offline = this.env.navigator?.onLine === false;
    this.open();
  }
  /** Stops for good: closes with 1000, rejects what waits for a reply (ChatError closed), reconnects no more. */
  close() {
    if (this.stopped) return;
    this.flushPersist();
    this.stop({ code: 1e3, reason: "closed by the client" }, "the client was closed");
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
  send(content, opts = {}) {
    return this.sendFrame("send", content, opts);
  }
  /**
   * Edits a user message (chat.send with editOf): content becomes a new version of the
   * message messageId (any user message, on any branch), a sibling of it, and starts a
   * run; its branch becomes the active path for every tab (branch.selected, then
   * chat.started), the old version stays one arrow away (message.branch). While a run is
   * active it rejects with run_active, unless opts.whileRunning is 'interrupt' (the run is
   * cancelled first). not_found: messageId is not a user message of the session.
   */
  edit(messageId, content, opts = {}) {
    if (!isUuid(messageId)) throw new Error(`ChatClient.edit: messageId must be a UUID, got ${JSON.stringify(messageId)}`);
    return this.sendFrame("edit", content, { ...opts, editOf: messageId.toLowerCase() });
  }
  sendFrame(what, content, opts) {
    const requestId = opts.requestId ?? uuid4();
    if (requestId.length < 1 || requestId.length > 128) throw new Error(`ChatClient.${what}: requestId must be 1 to 128 characters`);
    const { whileRunning, editOf } = opts;
    if (whileRunning !== void 0 && !["queue", "steer", "reject", "interrupt"].includes(whileRunning)) {
      throw new Error(`ChatClient.${what}: whileRunning must be 'queue', 'steer', 'interrupt' or 'reject'`);
    }
    return this.enqueue({
      kind: "send",
      requestId,
      build: () => {
        const f = { type: "chat.send", requestId, content };
        if (whileRunning !== void 0) f.whileRunning = whileRunning;
        if (editOf !== void 0) f.editOf = editOf;
        return f;
      }
    });
  }
  /**
   * Answers the question of an ended run again (chat.regenerate; runId: any ended run of
   * the session, on any branch): a new run, whose run.retryOf is runId, writes a new
   * answer beside the old one, and its branch becomes the active path for every tab. Resolves
   * with the ack (runId: the new run). run_active while a run is active; not_found for an
   * unknown run.
   */
  regenerate(runId, opts = {}) {
    const requestId = opts.requestId ?? uuid4();
    return this.enqueue({
      kind: "regenerate",
      requestId,
      runId,
      build: () => ({ type: "chat.regenerate", requestId, runId })
    });
  }
  /**
   * Shows another branch (branch.select): the active path becomes the one through
   * messageId (its ancestors, itself, then the branch below it written last), in every tab
   * of the session (branch.selected replaces state.messages). Resolves once the server has
   * it; a run streaming goes on, on its own branch. not_found: no such message. The ids to
   * pass are in message.branch (see branchOf).
   */
  selectBranch(messageId) {
    const requestId = uuid4();
    return this.enqueue({
      kind: "select",
      requestId,
      build: () => ({ type: "branch.select", requestId, messageId })
    }).then(() => void 0);
  }
  /** Cancels the active run (runId: only that run; default the run active when called). */
  cancel(runId) {
    const requestId = uuid4();
    const target = runId ?? this._state.activeRun?.runId;
    return this.enqueue({
      kind: "cancel",
      requestId,
      ...target !== void 0 ? { runId: target } : {},
      build: () => {
        const f = { type: "chat.cancel", requestId };
        if (target !== void 0) f.runId = target;
        return f;
      }
    });
  }
  /**
   * Answers a tool approval (runId: default the run of that call, as the state shows it).
   * It sends the call's inputHash as the state shows it (the input the user was shown),
   * so a decision on another input is refused with conflict; opts.inputHash overrides it.
   * opts.scope 'session' (approve only) also allows matching calls for the rest of the
   * session: an approval rule, listed in state.approvalRules.
   */
  decide(toolCallId, decision, runId, opts = {}) {
    const requestId = uuid4();
    const msg = [...this._state.messages].reverse().find((m) => m.role === "tool" && m.tool?.callId === toolCallId && (runId === void 0 || m.runId === runId));
    const target = runId ?? msg?.runId ?? this._state.activeRun?.runId;
    const pending = this._state.activeRun?.pendingApproval;
    const inputHash = opts.inputHash ?? msg?.tool?.inputHash ?? (pending && pending.toolCallId === toolCallId ? pending.inputHash : void 0);
    const scope = opts.scope;
    return this.enqueue({
      kind: "decide",
      requestId,
      toolCallId,
      decision,
      ...target !== void 0 ? { runId: target } : {},
      build: () => ({
        type: "tool.decide",
        requestId,
        toolCallId,
        decision,
        ...target !== void 0 ? { runId: target } : {},
        ...inputHash !== void 0 ? { inputHash } : {},
        ...scope !== void 0 ? { scope } : {}
      })
    });
  }
  /**
   * Takes back a queued message (chat.unqueue; requestId: the one its send used) before
   * its run starts. Rejects with not_found when it is not queued (any more).
   */
  unqueue(requestId) {
    if (this.pending.has(requestId)) throw new Error("ChatClient.unqueue: the send of this message is not answered yet");
    return this.enqueue({
      kind: "unqueue",
      requestId,
      build: () => ({ type: "chat.unqueue", requestId })
    }).then(() => void 0);
  }
  /** Revokes one of the session's approval rules (approval.revoke): later matching calls ask again. */
  revokeRule(ruleId) {
    const requestId = uuid4();
    return this.enqueue({
      kind: "revoke",
      requestId,
      ruleId,
      build: () => ({ type: "approval.revoke", requestId, ruleId })
    }).then(() => void 0);
  }
  /** Continues (or with mode retry, answers again) a resumable run (chat.resume). */
  resume(runId, mode) {
    const requestId = uuid4();
    return this.enqueue({
      kind: "resume",
      requestId,
      runId,
      build: () => ({ type: "chat.resume", requestId, runId, ...mode ? { mode } : {} })
    });
  }
  /** Keeps a resumable run as it is (chat.dismiss). */
  dismiss(runId) {
    const requestId = uuid4();
    return this.enqueue({ kind: "dismiss", requestId, runId, build: () => ({ type: "chat.dismiss", requestId, runId }) });
  }
  /**
   * Fetches messages older than the oldest one held (history.fetch, at most limit, default
   * 50) and puts them in front. Resolves with how many were added and whether more exist.
   * A call while one is under way returns that one's promise.
   */
  loadOlder(limit = 50) {
    if (this.olderLoad) return this.olderLoad;
    if (this._state.epoch !== null && !this._state.hasMore) return Promise.resolve({ added: 0, hasMore: false });
    const requestId = uuid4();
    const n = Math.max(1, Math.min(200, Math.floor(limit)));
    const p = this.enqueue({
      kind: "history",
      requestId,
      afterHello: true,
      build: () => {
        const oldest = this._state.messages[0]?.position;
        return { type: "history.fetch", requestId, limit: n, ...oldest !== void 0 ? { before: oldest } : {} };
      }
    });
    const done = () => {
      if (this.olderLoad === p) this.olderLoad = null;
    };
    this.olderLoad = p;
    p.then(done, done);
    return p;
  }
  // ---- commands ----
  enqueue(spec) {
    if (this.stopped) {
      const closed = this._state.closed;
      return Promise.reject(
        new ChatError("closed", `the client is closed${closed ? ` (${closed.code} ${closed.reason})` : ""}`, {
          requestId: spec.requestId
        })
      );
    }
    return new Promise((resolve, reject) => {
      this.pending.set(spec.requestId, {
        afterHello: false,
        ...spec,
        resolve,
        reject,
        sentOn: 0,
        sentAt: 0,
        sends: 0,
        notBefore: 0,
        storageRetries: 0
      });
      this.flush();
    });
  }
  /** Sends queued commands on the current connection, in order, up to maxInFlight. */
  flush() {
    if (!this.ws || !this.socketOpen || !this.helloSent) return;
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
  transmit(frame) {
    const ws = this.ws;
    if (!ws) return false;
    try {
      ws.send(JSON.stringify(frame));
    } catch {
      this.drop("send failed");
      this.scheduleReconnect("send failed");
      return false;
    }
    this.trace?.({ type: "send", conn: this.conn, frame });
    return true;
  }
  // ---- the socket ----
  open() {
    if (this.stopped || this.ws) return;
    this.clearReconnect();
    const conn = ++this.conn;
    let ws;
    const url = this.dialURL();
    try {
      ws = new this.WS(url, "chatd.v1");
    } catch {
      this.scheduleReconnect("WebSocket constructor failed");
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
      if (conn === this.conn) this.onClose(ev.code, ev.reason ?? "");
    };
    ws.onerror = () => {
    };
    this.updateConnection();
    this.armWatchdog();
  }
  /**
   * The URL to dial: the given one, with ?session=<id> once the session is known, so a
   * load balancer that hashes on it sends the client straight to the node holding the
   * session (any node serves it all the same). The URL's own query is kept.
   */
  dialURL() {
    const id = this._state.sessionId;
    if (id === null) return this.url;
    try {
      const u = new URL(this.url);
      u.searchParams.set("session", id);
      return u.toString();
    } catch {
      return `${this.url}${this.url.includes("?") ? "&" : "?"}session=${encodeURIComponent(id)}`;
    }
  }
  async onOpen(conn, url) {
    this.socketOpen = true;
    this.offline = false;
    this.trace?.({ type: "open", conn, url });
    this.updateConnection();
    let token;
    try {
      token = typeof this.token === "function" ? await this.token() : this.token;
    } catch {
      if (conn !== this.conn) return;
      this.drop("the token function failed");
      this.scheduleReconnect("the token function failed");
      return;
    }
    if (conn !== this.conn || !this.socketOpen) return;
    const s = this._state;
    this.helloRequestId = `hello-${uuid4()}`;
    const hello = { type: "hello", requestId: this.helloRequestId };
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
  onMessage(conn, data) {
    if (typeof data !== "string") return;
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    if (!frame || typeof frame !== "object" || typeof frame.type !== "string") return;
    switch (frame.type) {
      case "snapshot":
      case "resumed":
        this.onHelloAnswer(conn, frame);
        return;
      case "ack":
      case "error":
      case "history":
        this.onReply(conn, frame);
        return;
      case "auth.expiring":
        void this.onAuthExpiring(conn, frame);
        return;
      case "auth.refreshed":
        this.trace?.({ type: "frame", conn, frame, outcome: "reply" });
        return;
    }
    if (!isEvent(frame)) {
      this.trace?.({ type: "frame", conn, frame, outcome: "stale" });
      return;
    }
    this.onEvent(conn, frame);
  }
  /**
   * The connection's token is about to expire: a token function is asked for a new one,
   * sent as auth.refresh. With a fixed token there is nothing to send; the connection
   * closes with 4001 at the expiry, which is fatal for a fixed token.
   */
  async onAuthExpiring(conn, frame) {
    this.trace?.({ type: "frame", conn, frame, outcome: "applied" });
    if (typeof this.token !== "function" || !this.helloOk) return;
    let token;
    try {
      token = await this.token();
    } catch {
      return;
    }
    if (conn !== this.conn || !this.socketOpen || !token) return;
    this.transmit({ type: "auth.refresh", requestId: `auth-${uuid4()}`, token });
  }
  onHelloAnswer(conn, frame) {
    if (this.helloOk || frame.requestId !== void 0 && frame.requestId !== this.helloRequestId) {
      this.trace?.({ type: "frame", conn, frame, outcome: "stale" });
      return;
    }
    const s = this._state;
    if (frame.type === "resumed" && (frame.epoch !== s.epoch || frame.lastSeq !== s.lastSeq || frame.sessionId !== s.sessionId)) {
      this.trace?.({ type: "frame", conn, frame, outcome: "stale" });
      this.wantSnapshot = true;
      this.forceReconnect("resumed at another position");
      return;
    }
    this.wantSnapshot = false;
    this.helloOk = true;
    this.attempt = 0;
    this.setState(applyFrame(s, frame));
    this.trace?.({ type: "frame", conn, frame, outcome: "applied" });
    if (this._state.sessionId) rememberLastSession(this.storage, this._state.sessionId);
    this.updateConnection();
    this.flush();
  }
  onEvent(conn, e) {
    if (!this.helloOk) {
      this.trace?.({ type: "frame", conn, frame: e, outcome: "stale" });
      return;
    }
    const order = eventOrder(this._state, e);
    this.trace?.({ type: "frame", conn, frame: e, outcome: order === "next" ? "applied" : order });
    if (order === "next") {
      this.setState(applyFrame(this._state, e));
    } else if (order === "gap") {
      this.forceReconnect(`gap: seq ${e.seq} after ${this._state.lastSeq}`);
    }
  }
  onReply(conn, frame) {
    this.trace?.({ type: "frame", conn, frame, outcome: "reply" });
    const id = frame.requestId;
    if (id !== void 0 && id === this.helloRequestId && !this.helloOk) {
      if (frame.type === "error") this.onHelloError(frame);
      return;
    }
    const p = id !== void 0 ? this.pending.get(id) : void 0;
    if (!p || p.sentOn !== conn) return;
    p.sentOn = 0;
    if (frame.type === "history") {
      this.pending.delete(p.requestId);
      const before = this._state.messages.length;
      this.setState(applyHistory(this._state, frame));
      p.resolve({ added: this._state.messages.length - before, hasMore: this._state.hasMore });
    } else if (frame.type === "ack") {
      this.pending.delete(p.requestId);
      p.resolve(frame);
    } else {
      this.onCommandError(p, frame);
    }
    this.flush();
  }
  onCommandError(p, e) {
    const now = Date.now();
    if (e.code === "busy") {
      p.notBefore = now + Math.min(this.maxMs, 100 * 2 ** Math.min(p.sends, 6));
      return;
    }
    const idempotent = p.kind === "send" || p.kind === "resume" || p.kind === "regenerate" || p.kind === "select" || p.kind === "history" || p.kind === "dismiss";
    if (e.code === "storage" && idempotent && p.storageRetries < STORAGE_RETRIES) {
      p.storageRetries++;
      p.notBefore = now + this.backoffDelay(p.storageRetries);
      return;
    }
    this.pending.delete(p.requestId);
    if (p.sends > 1) {
      const ack = this.outcomeOfResend(p, e);
      if (ack) {
        p.resolve(ack);
        return;
      }
    }
    p.reject(new ChatError(e.code, e.message, { requestId: p.requestId }));
  }
  outcomeOfResend(p, e) {
    const s = this._state;
    const runStatus = (runId) => s.activeRun?.runId === runId ? s.activeRun.status : s.lastRun?.runId === runId ? s.lastRun.status : null;
    if (p.kind === "cancel" && e.code === "no_run" && p.runId) {
      if (runStatus(p.runId) === "cancelled") {
        return { type: "ack", requestId: p.requestId, runId: p.runId, duplicate: true, status: "cancelled" };
      }
    }
    if (p.kind === "regenerate" && e.code === "run_active" && s.activeRun?.requestId === p.requestId) {
      return { type: "ack", requestId: p.requestId, runId: s.activeRun.runId, duplicate: true, status: s.activeRun.status };
    }
    if (p.kind === "unqueue" && e.code === "not_found" && p.sends > 1 && !s.queued.some((q) => q.requestId === p.requestId)) {
      return { type: "ack", requestId: p.requestId, duplicate: true };
    }
    if (p.kind === "revoke" && e.code === "not_found" && p.ruleId && !s.approvalRules.some((r) => r.ruleId === p.ruleId)) {
      return { type: "ack", requestId: p.requestId, duplicate: true };
    }
    if (p.kind === "decide" && (e.code === "conflict" || e.code === "not_found") && p.toolCallId) {
      const m = [...s.messages].reverse().find((m2) => m2.role === "tool" && m2.tool?.callId === p.toolCallId && (!p.runId || m2.runId === p.runId));
      const ts = m?.tool?.status;
      const approved = ts === "running" || ts === "ok" || ts === "error" || ts === "interrupted";
      if (m && m.runId && (p.decision === "approve" && approved || p.decision === "deny" && ts === "denied")) {
        return {
          type: "ack",
          requestId: p.requestId,
          runId: m.runId,
          duplicate: true,
          status: runStatus(m.runId) ?? "running"
        };
      }
    }
    return null;
  }
  onHelloError(e) {
    switch (e.code) {
      case "not_found":
        this.fatal(4004, e.message);
        return;
      case "unauthorized":
        if (typeof this.token === "function") break;
        this.fatal(4001, e.message);
        return;
      case "bad_request":
        this.fatal(4e3, `hello refused: ${e.message}`);
        return;
      case "too_many_sessions":
        this.fatal(4029, e.message);
        return;
      case "moved":
        this.forceReconnect("hello: moved");
        return;
    }
    this.drop(`hello failed: ${e.code}`);
    this.scheduleReconnect(`hello failed: ${e.code}`);
  }
  onClose(code, reason) {
    this.trace?.({ type: "close", conn: this.conn, code, reason, by: "server" });
    const helloOk = this.helloOk;
    this.detach();
    const deadline = code === 4e3 && !helloOk;
    if (!deadline && isFatalClose(code, typeof this.token === "function")) {
      this.fatal(code, reason || `closed with ${code}`);
      return;
    }
    if (code === 4010) {
      this.forceReconnect(`closed 4010${reason ? " " + reason : ""}`);
      return;
    }
    this.scheduleReconnect(`closed ${code}${reason ? " " + reason : ""}`);
  }
  /** Forgets the current socket: its handlers are cleared and its commands go again on the next. */
  detach() {
    const ws = this.ws;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
    }
    this.ws = null;
    this.socketOpen = false;
    this.helloSent = false;
    this.helloOk = false;
    this.conn++;
    for (const p of this.pending.values()) p.sentOn = 0;
    this.clearWatchdog();
    this.updateConnection();
    return ws;
  }
  /** Closes the current socket from this side. */
  drop(reason, code = 1e3) {
    const conn = this.conn;
    const ws = this.detach();
    if (!ws) return;
    this.trace?.({ type: "close", conn, code, reason, by: "client" });
    try {
      ws.close(code, reason.slice(0, 100));
    } catch {
    }
  }
  /** Reconnects now (backing off if this keeps happening). */
  forceReconnect(reason) {
    if (this.stopped) return;
    this.drop(reason);
    const now = Date.now();
    this.forcedAt = this.forcedAt.filter((t) => now - t < 1e4);
    this.forcedAt.push(now);
    if (this.offline) {
      this.scheduleReconnect(reason);
    } else if (this.forcedAt.length > 3) {
      this.scheduleReconnect(reason);
    } else {
      this.clearReconnect();
      this.trace?.({ type: "reconnect", delayMs: 0, reason });
      this.open();
    }
  }
  backoffDelay(attempt) {
    const base = Math.min(this.maxMs, this.initialMs * 2 ** Math.min(attempt, 30));
    return Math.round(base / 2 + Math.random() * base / 2);
  }
  scheduleReconnect(reason) {
    if (this.stopped || this.ws || this.reconnectTimer) return;
    const delay = this.backoffDelay(this.attempt++);
    this.trace?.({ type: "reconnect", delayMs: delay, reason });
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      this.open();
    }, delay);
    this.updateConnection();
  }
  clearReconnect() {
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
  }
  /** A connection that does not open, or leaves its hello or a command unanswered, is dead. */
  armWatchdog() {
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
        this.drop("no answer");
        this.scheduleReconnect("no answer");
      },
      Math.max(0, since + this.replyTimeoutMs - Date.now())
    );
  }
  clearWatchdog() {
    if (this.watchdogTimer) clearTimeout(this.watchdogTimer);
    this.watchdogTimer = null;
  }
  fatal(code, reason) {
    if (this.stopped) return;
    const sessionId = this._state.sessionId;
    if (code === 4004 && sessionId) {
      this.clearPersist();
      forgetSession(this.storage, sessionId);
    } else {
      this.flushPersist();
    }
    this.stop({ code, reason }, `the connection was closed for good (${code} ${reason})`);
  }
  stop(closed, why) {
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
    for (const p of pending) p.reject(new ChatError("closed", why, { requestId: p.requestId }));
    this.setState({ ...this._state, closed, connection: "offline" });
  }
  // ---- page life ----
  listen() {
    const on = (target, type, fn) => {
      if (!target || typeof target.addEventListener !== "function") return;
      target.addEventListener(type, fn);
      this.listeners.push(() => target.removeEventListener(type, fn));
    };
    const { window: win, document: doc } = this.env;
    on(win, "online", () => this.onOnline());
    on(win, "offline", () => this.onOffline());
    on(win, "pagehide", () => {
      this.hiddenAt ??= Date.now();
      this.flushPersist();
    });
    on(win, "pageshow", (ev) => {
      if (ev.persisted) {
        this.hiddenAt = null;
        this.forceReconnect("page restored from the back/forward cache");
      }
    });
    on(doc, "visibilitychange", () => {
      if (doc?.visibilityState === "hidden") {
        this.hiddenAt ??= Date.now();
        this.flushPersist();
      } else {
        this.onShown("page visible again");
      }
    });
    on(doc, "freeze", () => {
      this.hiddenAt ??= Date.now();
      this.flushPersist();
    });
    on(doc, "resume", () => this.onShown("page resumed from frozen"));
  }
  onShown(reason) {
    const since = this.hiddenAt;
    this.hiddenAt = null;
    if (since === null || this.stopped) return;
    if (Date.now() - since >= this.staleAfterHiddenMs) {
      this.forceReconnect(`${reason} after ${Date.now() - since} ms`);
    } else if (!this.ws && !this.offline) {
      this.clearReconnect();
      this.open();
    }
  }
  onOnline() {
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
  onOffline() {
    if (this.stopped) return;
    this.offline = true;
    this.clearReconnect();
    this.drop("offline");
    this.scheduleReconnect("offline");
    this.updateConnection();
  }
  // ---- state, subscribers, storage ----
  connectionStatus() {
    if (this.ws && this.socketOpen) return this.helloOk ? "live" : "catching-up";
    return this.offline ? "offline" : "connecting";
  }
  updateConnection() {
    const c = this.connectionStatus();
    if (c !== this._state.connection) this.setState({ ...this._state, connection: c });
  }
  setState(next) {
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
          queueMicrotask(() => {
            throw err;
          });
        }
      }
    });
  }
  dirty() {
    const s = this._state;
    const p = this.persisted;
    if (s.epoch === null) return false;
    return !p || p.epoch !== s.epoch || p.lastSeq !== s.lastSeq || p.messages !== s.messages || p.hasMore !== s.hasMore || p.activeRun !== s.activeRun || p.lastRun !== s.lastRun;
  }
  schedulePersist() {
    if (this.persistTimer || !this.dirty()) return;
    this.persistTimer = setTimeout(() => {
      this.persistTimer = null;
      this.flushPersist();
    }, this.persistThrottleMs);
  }
  clearPersist() {
    if (this.persistTimer) clearTimeout(this.persistTimer);
    this.persistTimer = null;
  }
  /** Writes the state now if it changed since the last write. */
  flushPersist() {
    this.clearPersist();
    if (!this.dirty()) return;
    const s = this._state;
    this.persisted = s;
    saveSession(this.storage, s);
  }
};

// src/sessions.ts
var SessionsClient = class {
  baseURL;
  token;
  fetchFn;
  constructor(opts = {}) {
    this.baseURL = (opts.baseURL ?? "").replace(/\/+$/, "");
    this.token = opts.token;
    const f = opts.fetch ?? globalThis.fetch;
    if (!f) throw new Error("SessionsClient: no fetch (pass opts.fetch)");
    this.fetchFn = (input, init) => f(input, init);
  }
  /** The caller's sessions, most recently active first (GET /v1/sessions). */
  async list(opts = {}) {
    const q = new URLSearchParams();
    if (opts.limit !== void 0) q.set("limit", String(opts.limit));
    if (opts.cursor) q.set("cursor", opts.cursor);
    const qs = q.toString();
    const body = await this.request("GET", `/v1/sessions${qs ? "?" + qs : ""}`);
    return { sessions: body.sessions ?? [], nextCursor: body.nextCursor ?? null };
  }
  /** Renames a session (PATCH /v1/sessions/{id}); resolves with the session as it is now. */
  async rename(id, title) {
    return await this.request("PATCH", `/v1/sessions/${encodeURIComponent(id)}`, { title });
  }
  /** Deletes a session (DELETE /v1/sessions/{id}): its run is cancelled, its tabs closed with 4004. */
  async delete(id) {
    await this.request("DELETE", `/v1/sessions/${encodeURIComponent(id)}`);
  }
  /**
   * Starts a new session with a message (POST /v1/sessions), without a socket: its run
   * starts at once. A repeated requestId finds the session and run the first one made.
   */
  async start(msg) {
    return await this.request("POST", "/v1/sessions", msg);
  }
  /** Sends a message to a session (POST /v1/sessions/{id}/messages), as chat.send does. */
  async send(id, msg) {
    return await this.request("POST", `/v1/sessions/${encodeURIComponent(id)}/messages`, msg);
  }
  /** A run as the session's tabs know it now (GET /v1/sessions/{id}/runs/{runId}): poll it. */
  async run(id, runId) {
    const body = await this.request("GET", `/v1/sessions/${encodeURIComponent(id)}/runs/${encodeURIComponent(runId)}`);
    return body.run;
  }
  /** A session's runs, newest first, of the given statuses (GET /v1/sessions/{id}/runs). */
  async runs(id, opts = {}) {
    const q = new URLSearchParams();
    if (opts.status?.length) q.set("status", opts.status.join(","));
    if (opts.limit !== void 0) q.set("limit", String(opts.limit));
    if (opts.cursor) q.set("cursor", opts.cursor);
    const qs = q.toString();
    const body = await this.request("GET", `/v1/sessions/${encodeURIComponent(id)}/runs${qs ? "?" + qs : ""}`);
    return { runs: body.runs ?? [], nextCursor: body.nextCursor ?? null };
  }
  /** Erases everything of the caller (DELETE /v1/users/me); a second call removes nothing. */
  async eraseMe() {
    const body = await this.request("DELETE", "/v1/users/me");
    return body.erased;
  }
  /**
   * The files of a session's workspace (GET /v1/sessions/{id}/files): what its tools
   * wrote in its sandbox; none for a session that never had one.
   */
  async files(id) {
    const body = await this.request("GET", `/v1/sessions/${encodeURIComponent(id)}/files`);
    return { files: body.files ?? [], truncated: body.truncated === true };
  }
  /**
   * One file of a session's workspace (GET /v1/sessions/{id}/files/{path}), its bytes as
   * a Blob. path is as files() lists it: each part is encoded, the / between them kept.
   */
  async download(id, path) {
    const parts = path.split("/").map(encodeURIComponent).join("/");
    const url = `/v1/sessions/${encodeURIComponent(id)}/files/${parts}`;
    const res = await this.fetchRaw("GET", url, { Accept: "application/octet-stream" });
    if (!res.ok) await this.fail("GET", url, res);
    try {
      return await res.blob();
    } catch (err) {
      throw new ChatError("network", `GET ${url}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  async fetchRaw(method, path, headers, body) {
    const token = typeof this.token === "function" ? await this.token() : this.token;
    if (token) headers["Authorization"] = `Bearer ${token}`;
    const init = { method, headers };
    if (body !== void 0) init.body = body;
    try {
      return await this.fetchFn(this.baseURL + path, init);
    } catch (err) {
      throw new ChatError("network", `${method} ${path}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  /** fail throws the ChatError of a response that is not ok: the API's error, else http. */
  async fail(method, path, res, text) {
    if (text === void 0) text = await res.text().catch(() => "");
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    const e = json?.error;
    if (e && typeof e.code === "string") {
      throw new ChatError(e.code, typeof e.message === "string" ? e.message : e.code, { status: res.status });
    }
    throw new ChatError("http", `${method} ${path}: HTTP ${res.status}`, { status: res.status });
  }
  async request(method, path, body) {
    const headers = { Accept: "application/json" };
    if (body !== void 0) headers["Content-Type"] = "application/json";
    const res = await this.fetchRaw(method, path, headers, body === void 0 ? void 0 : JSON.stringify(body));
    if (res.status === 204) return null;
    const text = await res.text();
    if (!res.ok) await this.fail(method, path, res, text);
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (json === null || typeof json !== "object") {
      throw new ChatError("http", `${method} ${path}: not a JSON object (HTTP ${res.status})`, { status: res.status });
    }
    return json;
  }
};
export {
  ChatClient,
  ChatError,
  EVENT_TYPES,
  MemoryStorage,
  SessionsClient,
  applyFrame,
  applyHistory,
  branchOf,
  contextUsage,
  eventOrder,
  initialState,
  isActiveStatus,
  isEvent,
  isUuid,
  pendingApprovals,
  runProgress,
  sessionKey,
  splitToolName,
  uuid4
};
