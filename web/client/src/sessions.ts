// SessionsClient: the HTTP sessions API (docs/http.md): list, rename, delete, and a
// session's workspace files.
import { ChatError } from './errors.js';
import type { TokenSource } from './client.js';
import type { Progress, Run, RunStatus } from './protocol.js';

/** A session as the sessions API lists it. */
export interface SessionSummary {
  id: string;
  /** From the first user message until renamed; "" before. */
  title: string;
  createdAt: string;
  /** When its latest run started ("last active"). */
  updatedAt: string;
  /** The start (at most 120 characters) of the newest user or assistant text; "" when none. */
  preview: string;
  /** The active run (running, awaiting_approval, paused), or null. */
  activeRun: { runId: string; status: RunStatus } | null;
  /** The context usage of the latest run; absent when none was reported. */
  usage?: { contextTokens: number; contextWindow: number };
  /** The latest run's progress as last stored (it may trail the live run by ~2 s); absent when none. */
  progress?: Progress;
}

export interface SessionPage {
  sessions: SessionSummary[];
  /** Pass to list() for the next page; null on the last. */
  nextCursor: string | null;
}

/** A file of a session's workspace, as GET /v1/sessions/{id}/files lists it. */
export interface WorkspaceFile {
  /** Relative to the workspace, with / between its parts. */
  path: string;
  /** In bytes. */
  size: number;
  modifiedAt: string;
}

export interface WorkspaceFileList {
  files: WorkspaceFile[];
  /** There were more than the server lists (10000). */
  truncated: boolean;
}

/** A message sent over HTTP (POST /v1/sessions, POST /v1/sessions/{id}/messages). */
export interface HttpSend {
  /** The idempotency key, as chat.send's; for start() also the new session's. */
  requestId: string;
  content: string;
  /** What the message does while a run is active, as chat.send's; absent: the server's default. */
  whileRunning?: 'queue' | 'steer' | 'interrupt' | 'reject';
}

/** What a message sent over HTTP did (202). */
export interface SendAnswer {
  sessionId: string;
  requestId: string;
  /** The run it started (for a requestId seen before, the run it started then); null while queued. */
  run: Run | null;
  queued: boolean;
  /** Set when the message steers the active run, run. */
  steering?: true;
}

export interface RunPage {
  runs: Run[];
  /** Pass to runs() for the next page; null on the last. */
  nextCursor: string | null;
}

/** What erasing a user removed (DELETE /v1/users/me). */
export interface Erasure {
  liveSessions: number;
  sessions: number;
  runs: number;
  streamChunks: number;
  webhookEvents: number;
}

export interface SessionsClientOptions {
  /** Where the API is: default this page's origin (relative URLs). */
  baseURL?: string;
  /** Sent as Authorization: Bearer <token>; a function is called for every request. */
  token?: TokenSource;
  /** Default globalThis.fetch. */
  fetch?: typeof fetch;
}

/**
 * The HTTP sessions API. Every method rejects with a ChatError: the API's error code
 * (not_found, unauthorized, bad_request, storage, internal) and the HTTP status; `http`
 * for a response that is not the API's; `network` when the request failed.
 */
export class SessionsClient {
  private readonly baseURL: string;
  private readonly token: TokenSource | undefined;
  private readonly fetchFn: typeof fetch;

  constructor(opts: SessionsClientOptions = {}) {
    this.baseURL = (opts.baseURL ?? '').replace(/\/+$/, '');
    this.token = opts.token;
    const f = opts.fetch ?? (globalThis as { fetch?: typeof fetch }).fetch;
    if (!f) throw new Error('SessionsClient: no fetch (pass opts.fetch)');
    // Called as a plain function: a browser's fetch throws "Illegal invocation" when
    // called as a method of another object.
    this.fetchFn = (input, init) => f(input, init);
  }

  /** The caller's sessions, most recently active first (GET /v1/sessions). */
  async list(opts: { cursor?: string | null; limit?: number } = {}): Promise<SessionPage> {
    const q = new URLSearchParams();
    if (opts.limit !== undefined) q.set('limit', String(opts.limit));
    if (opts.cursor) q.set('cursor', opts.cursor);
    const qs = q.toString();
    const body = (await this.request('GET', `/v1/sessions${qs ? '?' + qs : ''}`)) as SessionPage;
    return { sessions: body.sessions ?? [], nextCursor: body.nextCursor ?? null };
  }

  /** Renames a session (PATCH /v1/sessions/{id}); resolves with the session as it is now. */
  async rename(id: string, title: string): Promise<SessionSummary> {
    return (await this.request('PATCH', `/v1/sessions/${encodeURIComponent(id)}`, { title })) as SessionSummary;
  }

  /** Deletes a session (DELETE /v1/sessions/{id}): its run is cancelled, its tabs closed with 4004. */
  async delete(id: string): Promise<void> {
    await this.request('DELETE', `/v1/sessions/${encodeURIComponent(id)}`);
  }

  /**
   * Starts a new session with a message (POST /v1/sessions), without a socket: its run
   * starts at once. A repeated requestId finds the session and run the first one made.
   */
  async start(msg: HttpSend): Promise<SendAnswer> {
    return (await this.request('POST', '/v1/sessions', msg)) as SendAnswer;
  }

  /** Sends a message to a session (POST /v1/sessions/{id}/messages), as chat.send does. */
  async send(id: string, msg: HttpSend): Promise<SendAnswer> {
    return (await this.request('POST', `/v1/sessions/${encodeURIComponent(id)}/messages`, msg)) as SendAnswer;
  }

  /** A run as the session's tabs know it now (GET /v1/sessions/{id}/runs/{runId}): poll it. */
  async run(id: string, runId: string): Promise<Run> {
    const body = (await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/runs/${encodeURIComponent(runId)}`)) as { run: Run };
    return body.run;
  }

  /** A session's runs, newest first, of the given statuses (GET /v1/sessions/{id}/runs). */
  async runs(id: string, opts: { status?: RunStatus[]; cursor?: string | null; limit?: number } = {}): Promise<RunPage> {
    const q = new URLSearchParams();
    if (opts.status?.length) q.set('status', opts.status.join(','));
    if (opts.limit !== undefined) q.set('limit', String(opts.limit));
    if (opts.cursor) q.set('cursor', opts.cursor);
    const qs = q.toString();
    const body = (await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/runs${qs ? '?' + qs : ''}`)) as RunPage;
    return { runs: body.runs ?? [], nextCursor: body.nextCursor ?? null };
  }

  /** Erases everything of the caller (DELETE /v1/users/me); a second call removes nothing. */
  async eraseMe(): Promise<Erasure> {
    const body = (await this.request('DELETE', '/v1/users/me')) as { erased: Erasure };
    return body.erased;
  }

  /**
   * The files of a session's workspace (GET /v1/sessions/{id}/files): what its tools
   * wrote in its sandbox; none for a session that never had one.
   */
  async files(id: string): Promise<WorkspaceFileList> {
    const body = (await this.request('GET', `/v1/sessions/${encodeURIComponent(id)}/files`)) as Partial<WorkspaceFileList>;
    return { files: body.files ?? [], truncated: body.truncated === true };
  }

  /**
   * One file of a session's workspace (GET /v1/sessions/{id}/files/{path}), its bytes as
   * a Blob. path is as files() lists it: each part is encoded, the / between them kept.
   */
  async download(id: string, path: string): Promise<Blob> {
    const parts = path.split('/').map(encodeURIComponent).join('/');
    const url = `/v1/sessions/${encodeURIComponent(id)}/files/${parts}`;
    const res = await this.fetchRaw('GET', url, { Accept: 'application/octet-stream' });
    if (!res.ok) await this.fail('GET', url, res);
    try {
      return await res.blob();
    } catch (err) {
      throw new ChatError('network', `GET ${url}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  private async fetchRaw(method: string, path: string, headers: Record<string, string>, body?: string): Promise<Response> {
    const token = typeof this.token === 'function' ? await this.token() : this.token;
    if (token) headers['Authorization'] = `Bearer ${token}`;
    const init: RequestInit = { method, headers };
    if (body !== undefined) init.body = body;
    try {
      return await this.fetchFn(this.baseURL + path, init);
    } catch (err) {
      throw new ChatError('network', `${method} ${path}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /** fail throws the ChatError of a response that is not ok: the API's error, else http. */
  private async fail(method: string, path: string, res: Response, text?: string): Promise<never> {
    if (text === undefined) text = await res.text().catch(() => '');
    let json: unknown = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    const e = (json as { error?: { code?: unknown; message?: unknown } } | null)?.error;
    if (e && typeof e.code === 'string') {
      throw new ChatError(e.code, typeof e.message === 'string' ? e.message : e.code, { status: res.status });
    }
    throw new ChatError('http', `${method} ${path}: HTTP ${res.status}`, { status: res.status });
  }

  private async request(method: string, path: string, body?: unknown): Promise<unknown> {
    const headers: Record<string, string> = { Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const res = await this.fetchRaw(method, path, headers, body === undefined ? undefined : JSON.stringify(body));
    if (res.status === 204) return null;
    const text = await res.text();
    if (!res.ok) await this.fail(method, path, res, text);
    let json: unknown = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (json === null || typeof json !== 'object') {
      throw new ChatError('http', `${method} ${path}: not a JSON object (HTTP ${res.status})`, { status: res.status });
    }
    return json;
  }
}
