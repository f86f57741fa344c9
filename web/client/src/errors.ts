/**
 * The error a ChatClient or SessionsClient promise rejects with. `code` is the protocol's
 * error code (docs/protocol.md: bad_request, not_found, run_active, no_run, conflict,
 * too_large, busy, storage, ...) or one of the client's own:
 *
 * - `closed`: the client was closed (close(), or a fatal close of the connection) before
 *   the server answered; nothing more will be sent.
 * - `http`: (SessionsClient) a response that was not the API's JSON error.
 */
export class ChatError extends Error {
  readonly code: string;
  /** The requestId of the command that failed, when it had one. */
  readonly requestId?: string;
  /** SessionsClient: the HTTP status. */
  readonly status?: number;
  constructor(code: string, message: string, opts: { requestId?: string; status?: number } = {}) {
    super(message);
    this.name = 'ChatError';
    this.code = code;
    if (opts.requestId !== undefined) this.requestId = opts.requestId;
    if (opts.status !== undefined) this.status = opts.status;
  }
}
