// chatd's errors as the SDK's: an Error whose message starts with chatd's code, with the
// code, the HTTP status and the body readable.

/** An error chatd answered: `{"error": {"code", "message"}}` with an HTTP status. */
export class ChatdError extends Error {
  /** chatd's error code: `run_active`, `queue_full`, `not_found`, `unauthorized`, … */
  readonly code: string;
  /** The HTTP status (0 when none came back: the network). */
  readonly status: number;
  /** The body as chatd sent it. */
  readonly responseBody: string | undefined;
  /** Same as status, under the name the SDK's APICallError uses. */
  get statusCode(): number {
    return this.status;
  }

  constructor(code: string, message: string, status: number, responseBody?: string) {
    super(`${code}: ${message}`);
    this.name = 'ChatdError';
    this.code = code;
    this.status = status;
    this.responseBody = responseBody;
  }
}

/** The code chatd gives a status when the body names none. */
function codeFor(status: number): string {
  if (status === 400) return 'bad_request';
  if (status === 401) return 'unauthorized';
  if (status === 403) return 'forbidden';
  if (status === 404) return 'not_found';
  if (status === 409) return 'conflict';
  if (status === 413) return 'too_large';
  if (status === 429) return 'rate_limited';
  if (status === 503) return 'storage';
  return status >= 500 ? 'internal' : 'http_' + status;
}

/** A ChatdError from a status and body text (chatd's JSON, or anything a proxy sent). */
export function errorFromBody(status: number, text: string): ChatdError {
  try {
    const j = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
    if (j && typeof j.error?.code === 'string') {
      return new ChatdError(j.error.code, String(j.error.message ?? ''), status, text);
    }
  } catch {
    // not JSON
  }
  return new ChatdError(codeFor(status), text.trim() || `HTTP ${status}`, status, text);
}

/** A ChatdError from a non-2xx Response. */
export async function errorFromResponse(res: Response): Promise<ChatdError> {
  let text = '';
  try {
    text = await res.text();
  } catch {
    // the body broke off: the status is all there is
  }
  return errorFromBody(res.status, text);
}

/** Whether err is the network's (fetch's TypeError), not an answer. */
export function isNetworkError(err: unknown): boolean {
  return err instanceof TypeError || (err as { name?: string } | null)?.name === 'TypeError';
}

export function isAbortError(err: unknown): boolean {
  const name = (err as { name?: string } | null)?.name;
  return name === 'AbortError' || name === 'TimeoutError';
}

/** Whether a refusal may go away by itself: worth retrying with backoff. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status === 502 || status === 503 || status === 504;
}

/**
 * chatd's code of an error useChat reports: a ChatdError's `.code`, or the code that
 * starts the text of a stream's `error` part (a failed run: "<code>: <message>"), which
 * the SDK turns into a plain Error. undefined when there is none.
 */
export function chatdErrorCode(err: unknown): string | undefined {
  if (err instanceof ChatdError) return err.code;
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return code;
  const m = /^([a-z][a-z_]*): /.exec((err as { message?: unknown } | null)?.message as string ?? '');
  return m?.[1];
}
