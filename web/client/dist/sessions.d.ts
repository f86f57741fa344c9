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
    activeRun: {
        runId: string;
        status: RunStatus;
    } | null;
    /** The context usage of the latest run; absent when none was reported. */
    usage?: {
        contextTokens: number;
        contextWindow: number;
    };
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
export declare class SessionsClient {
    private readonly baseURL;
    private readonly token;
    private readonly fetchFn;
    constructor(opts?: SessionsClientOptions);
    /** The caller's sessions, most recently active first (GET /v1/sessions). */
    list(opts?: {
        cursor?: string | null;
        limit?: number;
    }): Promise<SessionPage>;
    /** Renames a session (PATCH /v1/sessions/{id}); resolves with the session as it is now. */
    rename(id: string, title: string): Promise<SessionSummary>;
    /** Deletes a session (DELETE /v1/sessions/{id}): its run is cancelled, its tabs closed with 4004. */
    delete(id: string): Promise<void>;
    /**
     * Starts a new session with a message (POST /v1/sessions), without a socket: its run
     * starts at once. A repeated requestId finds the session and run the first one made.
     */
    start(msg: HttpSend): Promise<SendAnswer>;
    /** Sends a message to a session (POST /v1/sessions/{id}/messages), as chat.send does. */
    send(id: string, msg: HttpSend): Promise<SendAnswer>;
    /** A run as the session's tabs know it now (GET /v1/sessions/{id}/runs/{runId}): poll it. */
    run(id: string, runId: string): Promise<Run>;
    /** A session's runs, newest first, of the given statuses (GET /v1/sessions/{id}/runs). */
    runs(id: string, opts?: {
        status?: RunStatus[];
        cursor?: string | null;
        limit?: number;
    }): Promise<RunPage>;
    /** Erases everything of the caller (DELETE /v1/users/me); a second call removes nothing. */
    eraseMe(): Promise<Erasure>;
    /**
     * The files of a session's workspace (GET /v1/sessions/{id}/files): what its tools
     * wrote in its sandbox; none for a session that never had one.
     */
    files(id: string): Promise<WorkspaceFileList>;
    /**
     * One file of a session's workspace (GET /v1/sessions/{id}/files/{path}), its bytes as
     * a Blob. path is as files() lists it: each part is encoded, the / between them kept.
     */
    download(id: string, path: string): Promise<Blob>;
    private fetchRaw;
    /** fail throws the ChatError of a response that is not ok: the API's error, else http. */
    private fail;
    private request;
}
