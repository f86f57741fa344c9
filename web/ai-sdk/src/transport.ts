// ChatdChatTransport: DefaultChatTransport for chatd, with chatd's guarantees.
import { DefaultChatTransport, type HttpChatTransportInitOptions, type UIMessage, type UIMessageChunk, type ChatTransport } from 'ai';
import { ChatdError, errorFromResponse, isAbortError, isNetworkError, isRetryableStatus } from './errors.js';
import { Ledger } from './ledger.js';
import { Waker, backoffDelay, sleep, type BackoffOptions } from './wake.js';

type FetchFunction = typeof globalThis.fetch;
type SendOptions<M extends UIMessage> = Parameters<ChatTransport<M>['sendMessages']>[0];
type ReconnectOptions<M extends UIMessage> = Parameters<ChatTransport<M>['reconnectToStream']>[0];

export interface ChatdChatTransportOptions<M extends UIMessage> extends HttpChatTransportInitOptions<M> {
  /**
   * When the SDK aborts a stream (useChat's stop()), stop the run on the server too
   * (POST {api}/{id}/stop), for every client. Default true.
   */
  stopOnAbort?: boolean;
  /** Backoff between reconnects of a broken stream. */
  reconnect?: BackoffOptions;
  /** Called on every reconnect of a broken stream (for logs and tests). */
  onReconnect?: (info: { chatId: string; attempt: number; error: unknown; delayMs: number }) => void;
  /**
   * A stream's connection that brings no byte for this long is taken for dead (a network
   * that changed under it, a NAT that forgot it: TCP may not notice for minutes) and is
   * replaced. chatd sends a comment line every 15 s while a run is quiet. Default 45000;
   * 0 turns it off.
   */
  idleTimeoutMs?: number;
}

/** What a stream is doing, per chat: sends and resumes the SDK has open. */
interface Open {
  chatId: string;
  ledger: Ledger;
  /** Cuts the current connection (to reconnect at once). */
  cut: () => void;
  /** Ends the stream for good (the transport is closed). */
  end: () => void;
}

/**
 * A ChatTransport for chatd, in place of DefaultChatTransport (the same options and the
 * same requests). On top of it:
 * - useChat's stop() stops the run for everyone (POST {api}/{id}/stop);
 * - a stream that breaks or ends before the run's end is resumed, with jittered backoff,
 *   at once on `online`, focus and visibility, and passes on only what the SDK did not
 *   have; only the run's finish, abort or error ends it;
 * - chatd's errors are ChatdErrors: the message starts with the code, `.code` has it.
 */
export class ChatdChatTransport<M extends UIMessage = UIMessage> extends DefaultChatTransport<M> {
  private readonly userFetch: FetchFunction | undefined;
  private readonly stopOnAbort: boolean;
  private readonly backoff: BackoffOptions;
  private readonly onReconnect: ChatdChatTransportOptions<M>['onReconnect'];
  private readonly captured = new WeakMap<AbortSignal, { url: string; init: RequestInit }>();
  private readonly open = new Set<Open>();
  private readonly stops = new Map<string, Promise<void>>();
  private readonly resumes = new Map<string, number>();
  private readonly pending = new Map<string, number>();
  private readonly detached = new Set<string>();
  private readonly idleTimeoutMs: number;
  /** When each connection (by its request's signal) last brought a byte, or started. */
  private readonly lastByte = new WeakMap<AbortSignal, number>();
  private readonly waker: Waker;
  private unloading = false;

  constructor(options: ChatdChatTransportOptions<M> = {}) {
    const { stopOnAbort = true, reconnect = {}, onReconnect, idleTimeoutMs = 45000, fetch: userFetch, ...rest } = options;
    let self: ChatdChatTransport<M> | undefined;
    super({
      ...rest,
      resumeStreamIsReplay: true,
      // Every request goes through here: kept, so a broken stream can be asked for again.
      fetch: (async (input: RequestInfo | URL, init?: RequestInit) => {
        if (init?.signal && self) {
          self.captured.set(init.signal, { url: String(input instanceof Request ? input.url : input), init: { ...init } });
          self.lastByte.set(init.signal, Date.now());
        }
        const res = await (self?.userFetch ?? globalThis.fetch)(input, init);
        return self ? self.observed(res, init?.signal) : res;
      }) as FetchFunction,
    });
    self = this;
    this.userFetch = userFetch;
    this.stopOnAbort = stopOnAbort;
    this.backoff = reconnect;
    this.onReconnect = onReconnect;
    this.idleTimeoutMs = idleTimeoutMs;
    this.waker = new Waker({
      onOnline: () => {
        // A connection that was up when the network went may hang without an error:
        // start each one again (the ledger drops what repeats).
        for (const o of this.open) o.cut();
      },
      onUnload: () => {
        this.unloading = true;
      },
    });
  }

  /** The chat API's base URL, as configured. */
  get apiURL(): string {
    return this.api;
  }

  /** Whether a send or a resume of chatId is open (the SDK is reading it). */
  isStreaming(chatId: string): boolean {
    if ((this.pending.get(chatId) ?? 0) > 0) return true;
    for (const o of this.open) if (o.chatId === chatId) return true;
    return false;
  }

  /** Counts a request the SDK made that has no stream yet (its POST or GET in flight). */
  private async busy<T>(chatId: string, f: () => Promise<T>): Promise<T> {
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
  async resolvedHeaders(extra?: Record<string, string> | Headers): Promise<Record<string, string>> {
    const h = typeof this.headers === 'function' ? await this.headers() : await this.headers;
    return { ...headersToObject(h), ...headersToObject(extra) };
  }

  /** fetch, as the app configured it. */
  doFetch(input: string, init?: RequestInit): Promise<Response> {
    return (this.userFetch ?? globalThis.fetch)(input, init);
  }

  /** The URL of {api}/{id}/{path}. */
  chatURL(chatId: string, path = ''): string {
    const q = this.api.search(/[?#]/);
    const base = q === -1 ? this.api : this.api.slice(0, q);
    const suffix = q === -1 ? '' : this.api.slice(q);
    return `${base.replace(/\/$/, '')}/${encodeURIComponent(chatId)}${path ? '/' + path : ''}${suffix}`;
  }

  /** Stops chatId's active run for every client (POST {api}/{id}/stop). */
  async stopRun(chatId: string, headers?: Record<string, string> | Headers): Promise<boolean> {
    const res = await this.doFetch(this.chatURL(chatId, 'stop'), {
      method: 'POST',
      headers: await this.resolvedHeaders(headers),
    });
    if (!res.ok) throw await errorFromResponse(res);
    const j = (await res.json().catch(() => ({}))) as { stopped?: boolean };
    return j.stopped === true;
  }

  /**
   * The view of chatId goes away (a component unmounts, the app shows another chat): an
   * abort of chatId's streams in this tick is the view leaving, not a stop, so the run
   * goes on for everyone else. `@chatd/ai-sdk/react`'s useChat calls it before
   * `@ai-sdk/react`'s useChat stops its Chat on unmount.
   */
  detach(chatId: string): void {
    this.detached.add(chatId);
    setTimeout(() => this.detached.delete(chatId), 0);
  }

  /** res, its body watched: each chunk that arrives marks signal's connection alive. */
  private observed(res: Response, signal: AbortSignal | null | undefined): Response {
    // Streams are 200s; a 204 (nothing to resume) must keep its null body (Chromium gives
    // it an empty stream, which a new Response with that status refuses).
    if (!signal || !res.body || res.status !== 200 || this.idleTimeoutMs <= 0) return res;
    const seen = this.lastByte;
    seen.set(signal, Date.now());
    const body = res.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, c) {
          seen.set(signal, Date.now());
          c.enqueue(chunk);
        },
      }),
    );
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  }

  /** Ends this transport's streams and listeners (AbstractChat.dispose() calls it). */
  close(): void {
    for (const o of [...this.open]) o.end();
    this.waker.close();
  }

  override async sendMessages(options: SendOptions<M>): Promise<ReadableStream<UIMessageChunk>> {
    const { abortSignal, ...rest } = options;
    // A broken POST is asked again with the same body: the last message's id is the
    // idempotency key, so the retry streams the same run from its start (a queued message
    // waits again; an approval's continuation keeps the decisions made).
    return this.busy(options.chatId, async () => {
      // A stop() just before (regenerate and edits stop first): let it reach chatd first.
      await this.stops.get(options.chatId);
      return this.openStream(options.chatId, abortSignal, options.headers, (signal) => super.sendMessages({ ...rest, abortSignal: signal }), true);
    });
  }

  override async reconnectToStream(options: ReconnectOptions<M>): Promise<ReadableStream<UIMessageChunk> | null> {
    const { abortSignal, ...rest } = options;
    this.resumes.set(options.chatId, (this.resumes.get(options.chatId) ?? 0) + 1);
    return this.busy(options.chatId, async () => {
      const first = await this.withRetries(options.chatId, abortSignal, (signal) => super.reconnectToStream({ ...rest, abortSignal: signal }));
      if (first === null) return null;
      return this.wrap(options.chatId, abortSignal, options.headers, first, false);
    });
  }

  /** The first request, retried on the network's errors and refusals that pass. */
  private async openStream(
    chatId: string,
    abortSignal: AbortSignal | undefined,
    headers: Record<string, string> | Headers | undefined,
    request: (signal: AbortSignal) => Promise<ReadableStream<UIMessageChunk>>,
    reopenByPost: boolean,
  ): Promise<ReadableStream<UIMessageChunk>> {
    const first = await this.withRetries(chatId, abortSignal, request);
    return this.wrap(chatId, abortSignal, headers, first, reopenByPost);
  }

  private async withRetries<T>(
    chatId: string,
    abortSignal: AbortSignal | undefined,
    request: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const ac = new AbortController();
      const onAbort = () => ac.abort(abortSignal?.reason);
      abortSignal?.addEventListener('abort', onAbort, { once: true });
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
        abortSignal?.removeEventListener('abort', onAbort);
      }
    }
  }

  private firstControllers = new WeakMap<object, AbortController>();
  private remember(r: unknown, ac: AbortController): void {
    if (r && typeof r === 'object') this.firstControllers.set(r, ac);
  }

  /** The stream the SDK reads: the connections one after another, deduplicated. */
  private wrap(
    chatId: string,
    abortSignal: AbortSignal | undefined,
    headers: Record<string, string> | Headers | undefined,
    first: ReadableStream<UIMessageChunk>,
    reopenByPost: boolean,
  ): ReadableStream<UIMessageChunk> {
    const ledger = new Ledger();
    let conn: AbortController = this.firstControllers.get(first) ?? new AbortController();
    const firstSignal = this.captured.get(conn.signal);
    // The request to send again: the POST as it went (same body: same run), else a resume.
    const again = reopenByPost ? firstSignal : undefined;
    let closedBySDK = false;
    const entry: Open = {
      chatId,
      ledger,
      cut: () => conn.abort(new DOMException('reconnect', 'AbortError')),
      end: () => {
        closedBySDK = true;
        conn.abort();
        done();
        try {
          out?.close();
        } catch {
          // closed already
        }
      },
    };
    let out: ReadableStreamDefaultController<UIMessageChunk> | undefined;
    // The watchdog: a connection silent for idleTimeoutMs is cut (and so replaced).
    const watchdog =
      this.idleTimeoutMs > 0
        ? setInterval(() => {
            const last = this.lastByte.get(conn.signal);
            if (last !== undefined && !conn.signal.aborted && Date.now() - last > this.idleTimeoutMs) {
              conn.abort(new DOMException('no byte for ' + this.idleTimeoutMs + ' ms', 'AbortError'));
            }
          }, Math.max(100, Math.floor(this.idleTimeoutMs / 4)))
        : undefined;
    const done = () => {
      this.open.delete(entry);
      abortSignal?.removeEventListener('abort', onSDKAbort);
      if (watchdog !== undefined) clearInterval(watchdog);
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
      abortSignal?.addEventListener('abort', onSDKAbort, { once: true });
    }
    this.open.add(entry);

    const reopen = async (): Promise<ReadableStream<UIMessageChunk> | null> => {
      conn = new AbortController();
      this.lastByte.set(conn.signal, Date.now()); // a connect that hangs is cut too
      const onAbort = () => conn.abort(abortSignal?.reason);
      abortSignal?.addEventListener('abort', onAbort, { once: true });
      if (again) {
        const res = await this.doFetch(again.url, { ...again.init, headers: await this.refreshHeaders(again.init.headers, headers), signal: conn.signal });
        if (res.status === 409) {
          // The run is not the chat's latest any more: it ended, and another began.
          await res.body?.cancel().catch(() => {});
          return null;
        }
        if (!res.ok) throw await errorFromResponse(res);
        if (!res.body) throw new TypeError('network error: empty body');
        return this.processResponseStream(this.observed(res, conn.signal).body!);
      }
      const res = await this.doFetch(this.chatURL(chatId, 'stream'), {
        method: 'GET',
        headers: await this.resolvedHeaders(headers),
        signal: conn.signal,
      });
      if (res.status === 204) return null;
      if (!res.ok) throw await errorFromResponse(res);
      if (!res.body) throw new TypeError('network error: empty body');
      return this.processResponseStream(this.observed(res, conn.signal).body!);
    };

    return new ReadableStream<UIMessageChunk>({
      start: (controller) => {
        out = controller;
        const run = async () => {
          // source: a connection to read; null: the run ended unfollowed (finish it from
          // the transcript); undefined: none (wait, then connect again).
          let source: ReadableStream<UIMessageChunk> | null | undefined = first;
          let attempt = 0;
          for (;;) {
            let failure: unknown = new TypeError('network error: the stream ended before the run did');
            if (source) {
              ledger.newPass();
              const reader = source.getReader();
              let wrongRun = false;
              try {
                for (;;) {
                  const { value, done: end } = await reader.read();
                  if (end) break;
                  if (value.type === 'start' && ledger.runId && value.messageId !== ledger.runId) {
                    wrongRun = true; // another run is the active one now: ours ended
                    break;
                  }
                  if (value.type === 'error' && /^unauthorized: the token expired/.test(value.errorText)) {
                    failure = new ChatdError('unauthorized', value.errorText, 401);
                    break; // resume with the new token the headers function gives
                  }
                  const out = ledger.accept(value);
                  if (out) {
                    controller.enqueue(out);
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
                  // Not chatd's stream (a chunk that does not parse): fail as the SDK would.
                  done();
                  controller.error(err);
                  return;
                }
                failure = err;
              } finally {
                reader.releaseLock();
                void source.cancel().catch(() => {});
                conn.abort();
              }
              source = wrongRun ? null : undefined;
            }
            if (closedBySDK) return;
            if (source === null) {
              // The run ended while no connection followed it: the rest from the transcript.
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
              return; // the SDK gave up on it
            }
            if (closedBySDK) return;
            try {
              source = await reopen();
            } catch (err) {
              if (closedBySDK) return;
              // An abort that is not the SDK's is ours (a cut, the watchdog): again.
              if (!retryable(err) && !isAbortError(err)) {
                done();
                controller.error(err);
                return;
              }
              source = undefined; // the network, or a refusal that passes: again
            }
          }
        };
        void run().catch(() => {}); // only a closed controller: the SDK let go
      },
      cancel: () => {
        closedBySDK = true;
        conn.abort();
        done();
      },
    });
  }

  /** Headers for a request sent again: the configured ones resolved anew (a new token). */
  private async refreshHeaders(sent: HeadersInit | undefined, extra: Record<string, string> | Headers | undefined): Promise<Record<string, string>> {
    return { ...headersToObject(sent), ...(await this.resolvedHeaders(extra)) };
  }

  private async completionFromTranscript(chatId: string, ledger: Ledger, headers: Record<string, string> | Headers | undefined): Promise<UIMessageChunk[]> {
    const res = await this.doFetch(this.chatURL(chatId), { headers: await this.resolvedHeaders(headers) });
    if (!res.ok) throw await errorFromResponse(res);
    const body = (await res.json()) as { messages?: UIMessage[] };
    const stored = ledger.runId ? body.messages?.find((m) => m.id === ledger.runId) : undefined;
    return ledger.completion(stored, { type: 'finish' });
  }

  /**
   * POST stop after an abort, unless it was the SDK replacing a resume by another, the
   * page unloading or the view detaching.
   */
  private scheduleStop(chatId: string, headers: Record<string, string> | Headers | undefined): void {
    if (this.unloading || this.detached.has(chatId)) return;
    const resumesBefore = this.resumes.get(chatId) ?? 0;
    const p = (async () => {
      await new Promise((r) => setTimeout(r, 0));
      // AbstractChat aborts a resume when it starts another one (the same tick): that is
      // no stop.
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
}

function retryable(err: unknown): boolean {
  return isNetworkError(err) || (err instanceof ChatdError && isRetryableStatus(err.status));
}

/** The SDK's errors (APICallError) as ChatdErrors; the network's stay as they are. */
export function toChatdError(err: unknown): unknown {
  const e = err as { statusCode?: unknown; responseBody?: unknown; name?: string } | null;
  if (e && typeof e.statusCode === 'number' && !(err instanceof ChatdError)) {
    const body = typeof e.responseBody === 'string' ? e.responseBody : '';
    try {
      const j = JSON.parse(body) as { error?: { code?: string; message?: string } };
      if (j?.error?.code) return new ChatdError(j.error.code, String(j.error.message ?? ''), e.statusCode, body);
    } catch {
      // not chatd's JSON
    }
    return new ChatdError(e.statusCode >= 500 ? 'internal' : 'http_' + e.statusCode, body || `HTTP ${e.statusCode}`, e.statusCode, body);
  }
  return err;
}

function headersToObject(h: HeadersInit | Record<string, string> | undefined | null): Record<string, string> {
  if (!h) return {};
  if (typeof Headers !== 'undefined' && h instanceof Headers) return Object.fromEntries(h.entries());
  if (Array.isArray(h)) return Object.fromEntries(h);
  return { ...(h as Record<string, string>) };
}
