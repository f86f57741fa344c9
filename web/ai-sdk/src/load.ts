// The initial load: the chat as chatd stored it, as a result the app can render (never a
// throw for the network).
import type { UIMessage } from 'ai';
import { errorFromResponse, ChatdError } from './errors.js';

type Resolvable<T> = T | Promise<T> | (() => T | Promise<T>);

export interface LoadChatdChatOptions {
  /** Headers for the request, as the transport's (a function for a token refreshed). */
  headers?: Resolvable<Record<string, string> | Headers>;
  /** fetch to use (default globalThis.fetch). */
  fetch?: typeof globalThis.fetch;
  /** Another branch: the id of a message on it (GET …?through=). */
  through?: string;
  /** Also every branch of the chat, as one tree (GET …?tree=1): the result's `tree`. */
  tree?: boolean;
  signal?: AbortSignal;
}

export type LoadChatdChatResult<M extends UIMessage = UIMessage> =
  | {
      ok: true;
      messages: M[];
      /** The run still going, whose answer is left out of messages (resume streams it). */
      activeRunId?: string | null;
      /** With `tree: true`: every branch (the active run's answer left out here too). */
      tree?: ChatdTree<M>;
    }
  | {
      ok: false;
      /** chatd's error, or `network` when chatd could not be reached. */
      error: { code: string; message: string; status: number };
      /** Tries the same load again. */
      retry: () => Promise<LoadChatdChatResult<M>>;
    };

/**
 * A chat's branches as one tree, in the shape of assistant-ui's MessageFormatRepository
 * (its `messageRepository` option): each message with the one before it on its branch,
 * parents first, alternatives in the order they were written; headId ends the branch
 * shown.
 */
export interface ChatdTree<M extends UIMessage = UIMessage> {
  headId: string | null;
  messages: { parentId: string | null; message: M }[];
}

/**
 * GET {api}/{id}: the stored transcript as UIMessages, for useChat's `messages`. A chat
 * that does not exist yet is `{ok: true, messages: []}`; a network error or a refusal is
 * `{ok: false, error, retry}`. The answer of a run still going is left out: useChat's
 * resume (`resume: true`) streams it from its start, and shown before that its partial
 * text would look finished.
 */
export async function loadChatdChat<M extends UIMessage = UIMessage>(
  api: string,
  id: string,
  options: LoadChatdChatOptions = {},
): Promise<LoadChatdChatResult<M>> {
  const retry = () => loadChatdChat<M>(api, id, options);
  try {
    const h = typeof options.headers === 'function' ? await options.headers() : await options.headers;
    const q = api.search(/[?#]/);
    const base = (q === -1 ? api : api.slice(0, q)).replace(/\/$/, '');
    let url = `${base}/${encodeURIComponent(id)}`;
    const query = [];
    if (options.through) query.push(`through=${encodeURIComponent(options.through)}`);
    if (options.tree) query.push('tree=1');
    if (query.length) url += `?${query.join('&')}`;
    const res = await (options.fetch ?? globalThis.fetch)(url, { headers: h, signal: options.signal });
    if (res.status === 404) return { ok: true, messages: [] };
    if (!res.ok) {
      const e = await errorFromResponse(res);
      return { ok: false, error: { code: e.code, message: e.message, status: e.status }, retry };
    }
    const body = (await res.json()) as { messages?: M[]; activeRunId?: string | null; tree?: ChatdTree<M> };
    let messages = Array.isArray(body.messages) ? body.messages : [];
    const active = body.activeRunId ?? null;
    const last = messages[messages.length - 1];
    if (active && last?.role === 'assistant' && last.id === active) {
      // The run still writes it: resuming streams it from its start. Shown meanwhile,
      // its partial text would look like a finished answer (status ready).
      messages = messages.slice(0, -1);
    }
    if (options.tree && body.tree && Array.isArray(body.tree.messages)) {
      let { headId, messages: items } = body.tree;
      const answer = active ? items.find((it) => it.message.id === active) : undefined;
      if (answer) {
        // As above: the resume streams it. (What was written below it, nothing yet.)
        items = items.filter((it) => it !== answer);
        if (headId === answer.message.id) headId = answer.parentId;
      }
      return { ok: true, messages, activeRunId: active, tree: { headId: headId ?? null, messages: items } };
    }
    return { ok: true, messages, activeRunId: active };
  } catch (err) {
    if (err instanceof ChatdError) return { ok: false, error: { code: err.code, message: err.message, status: err.status }, retry };
    const message = err instanceof Error ? err.message : String(err);
    return { ok: false, error: { code: 'network', message: `network: ${message}`, status: 0 }, retry };
  }
}
