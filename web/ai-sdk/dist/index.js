// @chatd/ai-sdk: built from web/ai-sdk/src by web/ai-sdk/build.mjs; do not edit.

// src/transport.ts
import { DefaultChatTransport } from "ai";

// src/errors.ts
var ChatdError = class extends Error {
  /** chatd's error code: `run_active`, `queue_full`, `not_found`, `unauthorized`, … */
  code;
  /** The HTTP status (0 when none came back: the network). */
  status;
  /** The body as chatd sent it. */
  responseBody;
  /** Same as status, under the name the SDK's APICallError uses. */
  get statusCode() {
    return this.status;
  }
  constructor(code, message, status, responseBody) {
    super(`${code}: ${message}`);
    this.name = "ChatdError";
    this.code = code;
    this.status = status;
    this.responseBody = responseBody;
  }
};
function codeFor(status) {
  if (status === 400) return "bad_request";
  if (status === 401) return "unauthorized";
  if (status === 403) return "forbidden";
  if (status === 404) return "not_found";
  if (status === 409) return "conflict";
  if (status === 413) return "too_large";
  if (status === 429) return "rate_limited";
  if (status === 503) return "storage";
  return status >= 500 ? "internal" : "http_" + status;
}
function errorFromBody(status, text) {
  try {
    const j = JSON.parse(text);
    if (j && typeof j.error?.code === "string") {
      return new ChatdError(j.error.code, String(j.error.message ?? ""), status, text);
    }
  } catch {
  }
  return new ChatdError(codeFor(status), text.trim() || `HTTP ${status}`, status, text);
}
async function errorFromResponse(res) {
  let text = "";
  try {
    text = await res.text();
  } catch {
  }
  return errorFromBody(res.status, text);
}
function isNetworkError(err) {
  return err instanceof TypeError || err?.name === "TypeError";
}
function isAbortError(err) {
  const name = err?.name;
  return name === "AbortError" || name === "TimeoutError";
}
function isRetryableStatus(status) {
  return status === 408 || status === 429 || status === 502 || status === 503 || status === 504;
}
function chatdErrorCode(err) {
  if (err instanceof ChatdError) return err.code;
  const code = err?.code;
  if (typeof code === "string") return code;
  const m = /^([a-z][a-z_]*): /.exec(err?.message ?? "");
  return m?.[1];
}

// src/ledger.ts
var Ledger = class {
  /** The run's id (the start chunk's messageId), once seen. */
  runId;
  started = false;
  /** A terminal chunk (finish, abort, error) went out: the stream is over. */
  ended = false;
  steps = 0;
  stepsEnded = 0;
  texts = /* @__PURE__ */ new Map();
  once = /* @__PURE__ */ new Set();
  preliminary = /* @__PURE__ */ new Map();
  parts = [];
  // Where the current connection's replay is: steps and text offsets it has passed.
  pass = { steps: 0, stepsEnded: 0, pos: /* @__PURE__ */ new Map() };
  /** A new connection begins: its replay is counted from the run's start. */
  newPass() {
    this.pass = { steps: 0, stepsEnded: 0, pos: /* @__PURE__ */ new Map() };
  }
  /** What of chunk to pass on (null: the SDK has it already). */
  accept(c) {
    switch (c.type) {
      case "start":
        if (this.started) return null;
        this.started = true;
        this.runId = c.messageId;
        return c;
      case "start-step":
        this.pass.steps++;
        if (this.pass.steps <= this.steps) return null;
        this.steps++;
        this.parts.push({ kind: "step" });
        return c;
      case "finish-step":
        this.pass.stepsEnded++;
        if (this.pass.stepsEnded <= this.stepsEnded) return null;
        this.stepsEnded++;
        return c;
      case "reset-step":
        this.texts.clear();
        this.once.clear();
        this.preliminary.clear();
        this.pass.steps = this.steps;
        this.pass.stepsEnded = this.stepsEnded;
        return c;
      case "text-start":
      case "reasoning-start": {
        const kind = c.type === "text-start" ? "text" : "reasoning";
        const key = kind + ":" + c.id;
        if (this.texts.has(key)) return null;
        this.texts.set(key, { text: "", ended: false });
        this.parts.push({ kind, key, id: c.id });
        return c;
      }
      case "text-delta":
      case "reasoning-delta": {
        const key = (c.type === "text-delta" ? "text:" : "reasoning:") + c.id;
        const t = this.texts.get(key);
        if (!t) return c;
        const from = this.pass.pos.get(key) ?? 0;
        const to = from + c.delta.length;
        this.pass.pos.set(key, to);
        if (to <= t.text.length) return null;
        const fresh = from >= t.text.length ? c.delta : c.delta.slice(t.text.length - from);
        t.text += fresh;
        return fresh === c.delta ? c : { ...c, delta: fresh };
      }
      case "text-end":
      case "reasoning-end": {
        const t = this.texts.get((c.type === "text-end" ? "text:" : "reasoning:") + c.id);
        if (!t) return c;
        if (t.ended) return null;
        t.ended = true;
        return c;
      }
      case "tool-input-start":
        if (!this.first("tool-input-start:" + c.toolCallId)) return null;
        this.parts.push({ kind: "tool", toolCallId: c.toolCallId });
        return c;
      case "tool-input-delta":
        return this.once.has("tool-input-available:" + c.toolCallId) ? null : c;
      case "tool-input-available":
      case "tool-input-error":
        if (!this.once.has("tool-input-start:" + c.toolCallId)) {
          this.once.add("tool-input-start:" + c.toolCallId);
          this.parts.push({ kind: "tool", toolCallId: c.toolCallId });
        }
        return this.first(c.type + ":" + c.toolCallId) ? c : null;
      case "tool-approval-request":
        return this.first("approval:" + c.toolCallId) ? c : null;
      case "tool-approval-response":
        return this.first("decided:" + c.approvalId) ? c : null;
      case "tool-output-available":
        if (this.once.has("output:" + c.toolCallId)) return null;
        if (c.preliminary) {
          const j = JSON.stringify(c.output);
          if (this.preliminary.get(c.toolCallId) === j) return null;
          this.preliminary.set(c.toolCallId, j);
          return c;
        }
        this.once.add("output:" + c.toolCallId);
        return c;
      case "tool-output-error":
      case "tool-output-denied":
        return this.first("output:" + c.toolCallId) ? c : null;
      case "finish":
      case "abort":
      case "error":
        if (this.ended) return null;
        this.ended = true;
        return c;
      default: {
        const d = c;
        if (d.type.startsWith("data-") && d.transient) return c;
        if (d.type === "message-metadata") return c;
        return this.first("other:" + JSON.stringify(c)) ? c : null;
      }
    }
  }
  first(key) {
    if (this.once.has(key)) return false;
    this.once.add(key);
    return true;
  }
  /**
   * The chunks that bring what the SDK holds up to the stored message (the run ended
   * while no connection followed it): the rest of each text, parts not seen, tool
   * results, then the step's end and finish. Parts are matched in order.
   */
  completion(stored, end) {
    const out = [];
    const push = (c) => {
      const x = this.accept(c);
      if (x) out.push(x);
    };
    this.newPass();
    const parts = stored?.parts ?? [];
    let stepOpen = this.steps > this.stepsEnded;
    let stepsSeen = 0;
    parts.forEach((sp, k) => {
      const mine = this.parts[k];
      if (sp.type === "step-start") {
        stepsSeen++;
        if (stepsSeen <= this.steps) return;
        if (stepOpen) push({ type: "finish-step" });
        push({ type: "start-step" });
        stepOpen = true;
        return;
      }
      if (sp.type === "text" || sp.type === "reasoning") {
        const kind = sp.type;
        const text = String(sp.text ?? "");
        if (mine && mine.kind === kind) {
          const t = this.texts.get(mine.key);
          if (t && text.length > t.text.length && text.startsWith(t.text)) {
            this.pass.pos.set(mine.key, t.text.length);
            push({ type: `${kind}-delta`, id: mine.id, delta: text.slice(t.text.length) });
          }
          push({ type: `${kind}-end`, id: mine.id });
          return;
        }
        if (mine) return;
        const id = `${this.runId ?? "chatd"}:${k}`;
        push({ type: `${kind}-start`, id });
        if (text) push({ type: `${kind}-delta`, id, delta: text });
        push({ type: `${kind}-end`, id });
        return;
      }
      if (sp.type.startsWith("tool-") && typeof sp.toolCallId === "string") {
        const toolCallId = sp.toolCallId;
        if (!mine) {
          push({ type: "tool-input-start", toolCallId, toolName: sp.type.slice(5) });
          push({ type: "tool-input-available", toolCallId, toolName: sp.type.slice(5), input: sp.input });
        }
        if (sp.state === "output-available") push({ type: "tool-output-available", toolCallId, output: sp.output });
        else if (sp.state === "output-error") push({ type: "tool-output-error", toolCallId, errorText: String(sp.errorText ?? "") });
        else if (sp.state === "output-denied") push({ type: "tool-output-denied", toolCallId });
      }
    });
    if (this.steps > this.stepsEnded) push({ type: "finish-step" });
    push(end);
    return out;
  }
};

// src/wake.ts
function backoffDelay(n, { initialMs = 250, maxMs = 1e4 } = {}) {
  const base = Math.min(maxMs, initialMs * 2 ** Math.min(n, 20));
  return Math.round(base * (0.5 + Math.random()));
}
var Waker = class {
  waiters = /* @__PURE__ */ new Set();
  off = [];
  constructor(hooks = {}) {
    const g = globalThis;
    const on = (target, type, f) => {
      if (typeof target.addEventListener !== "function") return;
      target.addEventListener(type, f);
      this.off.push(() => target.removeEventListener?.(type, f));
    };
    if (typeof g.window !== "undefined") {
      on(g, "online", () => {
        hooks.onOnline?.();
        this.wake();
      });
      on(g, "focus", () => this.wake());
      on(g, "pagehide", () => hooks.onUnload?.());
      on(g, "beforeunload", () => hooks.onUnload?.());
      on(g, "pageshow", () => this.wake());
    }
    if (g.document) {
      on(g.document, "visibilitychange", () => {
        if (g.document?.visibilityState === "visible") this.wake();
      });
    }
  }
  /** Ends every wait now. */
  wake() {
    const ws = [...this.waiters];
    this.waiters.clear();
    for (const w of ws) w();
  }
  wait(f) {
    this.waiters.add(f);
    return () => this.waiters.delete(f);
  }
  close() {
    for (const f of this.off) f();
    this.off = [];
    this.wake();
  }
};
function sleep(ms, waker, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    let cancelWake = () => {
    };
    const finish = () => {
      clearTimeout(t);
      cancelWake();
      signal?.removeEventListener("abort", onAbort);
    };
    const onAbort = () => {
      finish();
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      finish();
      resolve();
    }, ms);
    cancelWake = waker?.wait(() => {
      finish();
      resolve();
    }) ?? (() => {
    });
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

// src/transport.ts
var ChatdChatTransport = class extends DefaultChatTransport {
  userFetch;
  stopOnAbort;
  backoff;
  onReconnect;
  captured = /* @__PURE__ */ new WeakMap();
  open = /* @__PURE__ */ new Set();
  stops = /* @__PURE__ */ new Map();
  resumes = /* @__PURE__ */ new Map();
  pending = /* @__PURE__ */ new Map();
  detached = /* @__PURE__ */ new Set();
  idleTimeoutMs;
  /** When each connection (by its request's signal) last brought a byte, or started. */
  lastByte = /* @__PURE__ */ new WeakMap();
  waker;
  unloading = false;
  constructor(options = {}) {
    const { stopOnAbort = true, reconnect = {}, onReconnect, idleTimeoutMs = 45e3, fetch: userFetch, ...rest } = options;
    let self;
    super({
      ...rest,
      resumeStreamIsReplay: true,
      // Every request goes through here: kept, so a broken stream can be asked for again.
      fetch: (async (input, init) => {
        if (init?.signal && self) {
          self.captured.set(init.signal, { url: String(input instanceof Request ? input.url : input), init: { ...init } });
          self.lastByte.set(init.signal, Date.now());
        }
        const res = await (self?.userFetch ?? globalThis.fetch)(input, init);
        return self ? self.observed(res, init?.signal) : res;
      })
    });
    self = this;
    this.userFetch = userFetch;
    this.stopOnAbort = stopOnAbort;
    this.backoff = reconnect;
    this.onReconnect = onReconnect;
    this.idleTimeoutMs = idleTimeoutMs;
    this.waker = new Waker({
      onOnline: () => {
        for (const o of this.open) o.cut();
      },
      onUnload: () => {
        this.unloading = true;
      }
    });
  }
  /** The chat API's base URL, as configured. */
  get apiURL() {
    return this.api;
  }
  /** Whether a send or a resume of chatId is open (the SDK is reading it). */
  isStreaming(chatId) {
    if ((this.pending.get(chatId) ?? 0) > 0) return true;
    for (const o of this.open) if (o.chatId === chatId) return true;
    return false;
  }
  /** Counts a request the SDK made that has no stream yet (its POST or GET in flight). */
  async busy(chatId, f) {
    this.pending.set(chatId, (this.pending.get(chatId) ?? 0) + 1);
    try {
      return await f();
    } finally {
      const n = (this.pending.get(chatId) ?? 1) - 1;
      if (n > 0) this.pending.set(chatId, n);
      else this.pending.delete(chatId);
    }
  }
  /** The transport's headers, resolved (for requests of its own: stop, the transcript). */
  async resolvedHeaders(extra) {
    const h = typeof this.headers === "function" ? await this.headers() : await this.headers;
    return { ...headersToObject(h), ...headersToObject(extra) };
  }
  /** fetch, as the app configured it. */
  doFetch(input, init) {
    return (this.userFetch ?? globalThis.fetch)(input, init);
  }
  /** The URL of {api}/{id}/{path}. */
  chatURL(chatId, path = "") {
    const q = this.api.search(/[?#]/);
    const base = q === -1 ? this.api : this.api.slice(0, q);
    const suffix = q === -1 ? "" : this.api.slice(q);
    return `${base.replace(/\/$/, "")}/${encodeURIComponent(chatId)}${path ? "/" + path : ""}${suffix}`;
  }
  /** Stops chatId's active run for every client (POST {api}/{id}/stop). */
  async stopRun(chatId, headers) {
    const res = await this.doFetch(this.chatURL(chatId, "stop"), {
      method: "POST",
      headers: await this.resolvedHeaders(headers)
    });
    if (!res.ok) throw await errorFromResponse(res);
    const j = await res.json().catch(() => ({}));
    return j.stopped === true;
  }
  /**
   * The view of chatId goes away (a component unmounts, the app shows another chat): an
   * abort of chatId's streams in this tick is the view leaving, not a stop, so the run
   * goes on for everyone else. `@chatd/ai-sdk/react`'s useChat calls it before
   * `@ai-sdk/react`'s useChat stops its Chat on unmount.
   */
  detach(chatId) {
    this.detached.add(chatId);
    setTimeout(() => this.detached.delete(chatId), 0);
  }
  /** res, its body watched: each chunk that arrives marks signal's connection alive. */
  observed(res, signal) {
    if (!signal || !res.body || res.status !== 200 || this.idleTimeoutMs <= 0) return res;
    const seen = this.lastByte;
    seen.set(signal, Date.now());
    const body = res.body.pipeThrough(
      new TransformStream({
        transform(chunk, c) {
          seen.set(signal, Date.now());
          c.enqueue(chunk);
        }
      })
    );
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  }
  /** Ends this transport's streams and listeners (AbstractChat.dispose() calls it). */
  close() {
    for (const o of [...this.open]) o.end();
    this.waker.close();
  }
  async sendMessages(options) {
    const { abortSignal, ...rest } = options;
    return this.busy(options.chatId, async () => {
      await this.stops.get(options.chatId);
      return this.openStream(options.chatId, abortSignal, options.headers, (signal) => super.sendMessages({ ...rest, abortSignal: signal }), true);
    });
  }
  async reconnectToStream(options) {
    const { abortSignal, ...rest } = options;
    this.resumes.set(options.chatId, (this.resumes.get(options.chatId) ?? 0) + 1);
    return this.busy(options.chatId, async () => {
      const first = await this.withRetries(options.chatId, abortSignal, (signal) => super.reconnectToStream({ ...rest, abortSignal: signal }));
      if (first === null) return null;
      return this.wrap(options.chatId, abortSignal, options.headers, first, false);
    });
  }
  /** The first request, retried on the network's errors and refusals that pass. */
  async openStream(chatId, abortSignal, headers, request, reopenByPost) {
    const first = await this.withRetries(chatId, abortSignal, request);
    return this.wrap(chatId, abortSignal, headers, first, reopenByPost);
  }
  async withRetries(chatId, abortSignal, request) {
    for (let attempt = 0; ; attempt++) {
      const ac = new AbortController();
      const onAbort = () => ac.abort(abortSignal?.reason);
      abortSignal?.addEventListener("abort", onAbort, { once: true });
      try {
        const r = await request(ac.signal);
        this.remember(r, ac);
        return r;
      } catch (err) {
        if (abortSignal?.aborted || isAbortError(err)) throw err;
        const e = toChatdError(err);
        if (!retryable(e) || attempt >= 4) throw e;
        const delay = backoffDelay(attempt, this.backoff);
        this.onReconnect?.({ chatId, attempt: attempt + 1, error: e, delayMs: delay });
        await sleep(delay, this.waker, abortSignal);
      } finally {
        abortSignal?.removeEventListener("abort", onAbort);
      }
    }
  }
  firstControllers = /* @__PURE__ */ new WeakMap();
  remember(r, ac) {
    if (r && typeof r === "object") this.firstControllers.set(r, ac);
  }
  /** The stream the SDK reads: the connections one after another, deduplicated. */
  wrap(chatId, abortSignal, headers, first, reopenByPost) {
    const ledger = new Ledger();
    let conn = this.firstControllers.get(first) ?? new AbortController();
    const firstSignal = this.captured.get(conn.signal);
    const again = reopenByPost ? firstSignal : void 0;
    let closedBySDK = false;
    const entry = {
      chatId,
      ledger,
      cut: () => conn.abort(new DOMException("reconnect", "AbortError")),
      end: () => {
        closedBySDK = true;
        conn.abort();
        done();
        try {
          out?.close();
        } catch {
        }
      }
    };
    let out;
    const watchdog = this.idleTimeoutMs > 0 ? setInterval(() => {
      const last = this.lastByte.get(conn.signal);
      if (last !== void 0 && !conn.signal.aborted && Date.now() - last > this.idleTimeoutMs) {
        conn.abort(new DOMException("no byte for " + this.idleTimeoutMs + " ms", "AbortError"));
      }
    }, Math.max(100, Math.floor(this.idleTimeoutMs / 4))) : void 0;
    const done = () => {
      this.open.delete(entry);
      abortSignal?.removeEventListener("abort", onSDKAbort);
      if (watchdog !== void 0) clearInterval(watchdog);
    };
    const onSDKAbort = () => {
      closedBySDK = true;
      conn.abort(abortSignal?.reason);
      done();
      if (ledger.ended || !this.stopOnAbort) return;
      this.scheduleStop(chatId, headers);
    };
    if (abortSignal?.aborted) {
      onSDKAbort();
    } else {
      abortSignal?.addEventListener("abort", onSDKAbort, { once: true });
    }
    this.open.add(entry);
    const reopen = async () => {
      conn = new AbortController();
      this.lastByte.set(conn.signal, Date.now());
      const onAbort = () => conn.abort(abortSignal?.reason);
      abortSignal?.addEventListener("abort", onAbort, { once: true });
      if (again) {
        const res2 = await this.doFetch(again.url, { ...again.init, headers: await this.refreshHeaders(again.init.headers, headers), signal: conn.signal });
        if (res2.status === 409) {
          await res2.body?.cancel().catch(() => {
          });
          return null;
        }
        if (!res2.ok) throw await errorFromResponse(res2);
        if (!res2.body) throw new TypeError("network error: empty body");
        return this.processResponseStream(this.observed(res2, conn.signal).body);
      }
      const res = await this.doFetch(this.chatURL(chatId, "stream"), {
        method: "GET",
        headers: await this.resolvedHeaders(headers),
        signal: conn.signal
      });
      if (res.status === 204) return null;
      if (!res.ok) throw await errorFromResponse(res);
      if (!res.body) throw new TypeError("network error: empty body");
      return this.processResponseStream(this.observed(res, conn.signal).body);
    };
    return new ReadableStream({
      start: (controller) => {
        out = controller;
        const run = async () => {
          let source = first;
          let attempt = 0;
          for (; ; ) {
            let failure = new TypeError("network error: the stream ended before the run did");
            if (source) {
              ledger.newPass();
              const reader = source.getReader();
              let wrongRun = false;
              try {
                for (; ; ) {
                  const { value, done: end } = await reader.read();
                  if (end) break;
                  if (value.type === "start" && ledger.runId && value.messageId !== ledger.runId) {
                    wrongRun = true;
                    break;
                  }
                  if (value.type === "error" && /^unauthorized: the token expired/.test(value.errorText)) {
                    failure = new ChatdError("unauthorized", value.errorText, 401);
                    break;
                  }
                  const out2 = ledger.accept(value);
                  if (out2) {
                    controller.enqueue(out2);
                    attempt = 0;
                  }
                  if (ledger.ended) {
                    done();
                    controller.close();
                    return;
                  }
                }
              } catch (err) {
                if (closedBySDK) return;
                if (!isNetworkError(err) && !isAbortError(err)) {
                  done();
                  controller.error(err);
                  return;
                }
                failure = err;
              } finally {
                reader.releaseLock();
                void source.cancel().catch(() => {
                });
                conn.abort();
              }
              source = wrongRun ? null : void 0;
            }
            if (closedBySDK) return;
            if (source === null) {
              try {
                for (const c of await this.completionFromTranscript(chatId, ledger, headers)) controller.enqueue(c);
                done();
                controller.close();
                return;
              } catch (err) {
                if (closedBySDK) return;
                if (!retryable(err)) {
                  done();
                  controller.error(err);
                  return;
                }
                failure = err;
              }
            }
            const delay = backoffDelay(attempt++, this.backoff);
            this.onReconnect?.({ chatId, attempt, error: failure, delayMs: delay });
            try {
              await sleep(delay, this.waker, abortSignal);
            } catch {
              return;
            }
            if (closedBySDK) return;
            try {
              source = await reopen();
            } catch (err) {
              if (closedBySDK) return;
              if (!retryable(err) && !isAbortError(err)) {
                done();
                controller.error(err);
                return;
              }
              source = void 0;
            }
          }
        };
        void run().catch(() => {
        });
      },
      cancel: () => {
        closedBySDK = true;
        conn.abort();
        done();
      }
    });
  }
  /** Headers for a request sent again: the configured ones resolved anew (a new token). */
  async refreshHeaders(sent, extra) {
    return { ...headersToObject(sent), ...await this.resolvedHeaders(extra) };
  }
  async completionFromTranscript(chatId, ledger, headers) {
    const res = await this.doFetch(this.chatURL(chatId), { headers: await this.resolvedHeaders(headers) });
    if (!res.ok) throw await errorFromResponse(res);
    const body = await res.json();
    const stored = ledger.runId ? body.messages?.find((m) => m.id === ledger.runId) : void 0;
    return ledger.completion(stored, { type: "finish" });
  }
  /**
   * POST stop after an abort, unless it was the SDK replacing a resume by another, the
   * page unloading or the view detaching.
   */
  scheduleStop(chatId, headers) {
    if (this.unloading || this.detached.has(chatId)) return;
    const resumesBefore = this.resumes.get(chatId) ?? 0;
    const p = (async () => {
      await new Promise((r) => setTimeout(r, 0));
      if ((this.resumes.get(chatId) ?? 0) !== resumesBefore || this.unloading) return;
      for (let attempt = 0; attempt < 3; attempt++) {
        try {
          await this.stopRun(chatId, headers);
          return;
        } catch (err) {
          if (!isNetworkError(err) && !(err instanceof ChatdError && isRetryableStatus(err.status))) return;
          await new Promise((r) => setTimeout(r, backoffDelay(attempt, this.backoff)));
        }
      }
    })().finally(() => {
      if (this.stops.get(chatId) === p) this.stops.delete(chatId);
    });
    this.stops.set(chatId, p);
  }
};
function retryable(err) {
  return isNetworkError(err) || err instanceof ChatdError && isRetryableStatus(err.status);
}
function toChatdError(err) {
  const e = err;
  if (e && typeof e.statusCode === "number" && !(err instanceof ChatdError)) {
    const body = typeof e.responseBody === "string" ? e.responseBody : "";
    try {
      const j = JSON.parse(body);
      if (j?.error?.code) return new ChatdError(j.error.code, String(j.error.message ?? ""), e.statusCode, body);
    } catch {
    }
    return new ChatdError(e.statusCode >= 500 ? "internal" : "http_" + e.statusCode, body || `HTTP ${e.statusCode}`, e.statusCode, body);
  }
  return err;
}
function headersToObject(h) {
  if (!h) return {};
  if (typeof Headers !== "undefined" && h instanceof Headers) return Object.fromEntries(h.entries());
  if (Array.isArray(h)) return Object.fromEntries(h);
  return { ...h };
}

// src/load.ts
async function loadChatdChat(api, id, options = {}) {
  const retry = () => loadChatdChat(api, id, options);
  try {
    const h = typeof options.headers === "function" ? await options.headers() : await options.headers;
    const q = api.search(/[?#]/);
    const base = (q === -1 ? api : api.slice(0, q)).replace(/\/$/, "");
    let url = `${base}/${encodeURIComponent(id)}`;
    const query = [];
    if (options.through) query.push(`through=${encodeURIComponent(options.through)}`);
    if (options.tree) query.push("tree=1");
    if (query.length) url += `?${query.join("&")}`;
    const res = await (options.fetch ?? globalThis.fetch)(url, { headers: h, signal: options.signal });
    if (res.status === 404) return { ok: true, messages: [] };
    if (!res.ok) {
      const e = await errorFromResponse(res);
      return { ok: false, error: { code: e.code, message: e.message, status: e.status }, retry };
    }
    const body = await res.json();
    let messages = Array.isArray(body.messages) ? body.messages : [];
    const active = body.activeRunId ?? null;
    const last = messages[messages.length - 1];
    if (active && last?.role === "assistant" && last.id === active) {
      messages = messages.slice(0, -1);
    }
    if (options.tree && body.tree && Array.isArray(body.tree.messages)) {
      let { headId, messages: items } = body.tree;
      const answer = active ? items.find((it) => it.message.id === active) : void 0;
      if (answer) {
        items = items.filter((it) => it !== answer);
        if (headId === answer.message.id) headId = answer.parentId;
      }
      return { ok: true, messages, activeRunId: active, tree: { headId: headId ?? null, messages: items } };
    }
    return { ok: true, messages, activeRunId: active };
  } catch (err) {
    if (err instanceof ChatdError) return { ok: false, error: { code: err.code, message: err.message, status: err.status }, retry };
    const message = err instanceof Error ? err.message : String(err);
    return { ok: false, error: { code: "network", message: `network: ${message}`, status: 0 }, retry };
  }
}

// src/follow.ts
function followChatdChat(transport, id, h) {
  let stopped = false;
  let conn;
  let last = "";
  const waker = new Waker();
  const doc = globalThis.document;
  const visible = () => !doc || doc.visibilityState !== "hidden";
  const onVisibility = () => {
    if (!visible()) conn?.abort();
    else waker.wake();
  };
  doc?.addEventListener?.("visibilitychange", onVisibility);
  const active = async () => {
    if (transport.isStreaming(id)) return;
    await reload();
    if (!transport.isStreaming(id) && !stopped) await Promise.resolve(h.resumeStream()).catch((e) => h.onError?.(e));
  };
  const reload = async () => {
    if (transport.isStreaming(id)) return;
    const r = await loadChatdChat(transport.apiURL, id, { headers: () => transport.resolvedHeaders(), fetch: (u, i) => transport.doFetch(String(u), i) });
    if (!r.ok) return h.onError?.(new Error(r.error.message));
    const j = JSON.stringify(r.messages);
    if (j === last || transport.isStreaming(id) || stopped) return;
    last = j;
    h.setMessages(r.messages);
  };
  const handle = (ev) => {
    switch (ev.type) {
      case "state":
        if (ev.activeRunId) void active();
        else void reload();
        break;
      case "run-started":
        void active();
        break;
      case "run-ended":
      case "branch-changed":
        void reload();
        break;
    }
  };
  void (async () => {
    let attempt = 0;
    while (!stopped) {
      if (!visible()) {
        await new Promise((r) => waker.wait(r));
        continue;
      }
      conn = new AbortController();
      try {
        const res = await transport.doFetch(transport.chatURL(id, "events"), { headers: await transport.resolvedHeaders(), signal: conn.signal });
        if (res.ok && res.body) {
          const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
          let buf = "";
          for (; ; ) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value;
            let nl;
            while ((nl = buf.indexOf("\n")) !== -1) {
              let line = buf.slice(0, nl).replace(/\r$/, "");
              buf = buf.slice(nl + 1);
              if (line.startsWith("data:")) line = line.slice(5).trim();
              if (!line || line.startsWith(":")) continue;
              try {
                handle(JSON.parse(line));
                attempt = 0;
              } catch (err) {
                h.onError?.(err);
              }
            }
          }
        } else {
          await res.body?.cancel().catch(() => {
          });
          if (res.status === 404) attempt = Math.max(attempt, 5);
        }
      } catch (err) {
        if (!stopped && visible()) h.onError?.(err);
      }
      if (stopped) break;
      await sleep(backoffDelay(attempt++), waker).catch(() => {
      });
    }
  })();
  return () => {
    stopped = true;
    conn?.abort();
    doc?.removeEventListener?.("visibilitychange", onVisibility);
    waker.close();
  };
}
export {
  ChatdChatTransport,
  ChatdError,
  backoffDelay,
  chatdErrorCode,
  followChatdChat,
  loadChatdChat,
  toChatdError
};
