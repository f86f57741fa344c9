// Following a chat while the app is idle: runs started in another tab or on another
// device, and a transcript that moved on (a run that ended unwatched, a branch switch).
// The SDK calls a transport only when the app asks (send, resumeStream), so this is the
// one thing the app wires: followChatdChat(transport, id, { resumeStream, setMessages }).
import type { UIMessage } from 'ai';
import type { ChatdChatTransport } from './transport.js';
import { loadChatdChat } from './load.js';
import { Waker, backoffDelay, sleep } from './wake.js';

export interface FollowHandlers<M extends UIMessage> {
  /** useChat's resumeStream: called when a run is active and this chat is not streaming. */
  resumeStream: () => unknown;
  /** useChat's setMessages: called with the stored transcript when it changed. */
  setMessages: (messages: M[]) => unknown;
  /** Errors of the feed (it goes on retrying). */
  onError?: (err: unknown) => void;
}

/** One event of GET {api}/{id}/events. */
export type ChatdChatEvent =
  | { type: 'state'; activeRunId: string | null }
  | { type: 'run-started'; runId: string }
  | { type: 'run-ended'; runId: string; status: 'done' | 'error' | 'cancelled' | 'interrupted' }
  | { type: 'branch-changed' };

/**
 * Follows chat id while the page is visible: listens to chatd's per-chat feed
 * (GET {api}/{id}/events) and, when a run starts that this transport is not streaming,
 * calls resumeStream(); when a run ends or the branch changes (and nothing streams here),
 * loads the transcript and calls setMessages. Returns the function that stops following
 * (for useEffect's cleanup).
 */
export function followChatdChat<M extends UIMessage>(transport: ChatdChatTransport<M>, id: string, h: FollowHandlers<M>): () => void {
  let stopped = false;
  let conn: AbortController | undefined;
  let last = '';
  const waker = new Waker();
  const doc = (globalThis as { document?: { visibilityState?: string; addEventListener?: (t: string, f: () => void) => void; removeEventListener?: (t: string, f: () => void) => void } }).document;
  const visible = () => !doc || doc.visibilityState !== 'hidden';
  const onVisibility = () => {
    if (!visible()) conn?.abort(); // no feed while hidden: the loop waits for visible
    else waker.wake();
  };
  doc?.addEventListener?.('visibilitychange', onVisibility);

  // A run is active: the transcript first (it has the run's question, and the answer so
  // far), then the run's stream, which replaces the answer by its id.
  const active = async () => {
    if (transport.isStreaming(id)) return;
    await reload();
    if (!transport.isStreaming(id) && !stopped) await Promise.resolve(h.resumeStream()).catch((e) => h.onError?.(e));
  };
  const reload = async () => {
    if (transport.isStreaming(id)) return;
    const r = await loadChatdChat<M>(transport.apiURL, id, { headers: () => transport.resolvedHeaders(), fetch: (u, i) => transport.doFetch(String(u), i) });
    if (!r.ok) return h.onError?.(new Error(r.error.message));
    const j = JSON.stringify(r.messages);
    if (j === last || transport.isStreaming(id) || stopped) return;
    last = j;
    h.setMessages(r.messages);
  };
  const handle = (ev: ChatdChatEvent) => {
    switch (ev.type) {
      case 'state':
        if (ev.activeRunId) void active();
        else void reload();
        break;
      case 'run-started':
        void active();
        break;
      case 'run-ended':
      case 'branch-changed':
        void reload();
        break;
    }
  };

  void (async () => {
    let attempt = 0;
    while (!stopped) {
      if (!visible()) {
        await new Promise<void>((r) => waker.wait(r));
        continue;
      }
      conn = new AbortController();
      try {
        const res = await transport.doFetch(transport.chatURL(id, 'events'), { headers: await transport.resolvedHeaders(), signal: conn.signal });
        if (res.ok && res.body) {
          const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
          let buf = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value;
            let nl: number;
            while ((nl = buf.indexOf('\n')) !== -1) {
              let line = buf.slice(0, nl).replace(/\r$/, '');
              buf = buf.slice(nl + 1);
              if (line.startsWith('data:')) line = line.slice(5).trim();
              if (!line || line.startsWith(':')) continue;
              try {
                handle(JSON.parse(line) as ChatdChatEvent);
                attempt = 0;
              } catch (err) {
                h.onError?.(err);
              }
            }
          }
        } else {
          await res.body?.cancel().catch(() => {});
          // 404: the chat does not exist yet (its first send makes it); wait longer.
          if (res.status === 404) attempt = Math.max(attempt, 5);
        }
      } catch (err) {
        if (!stopped && visible()) h.onError?.(err);
      }
      if (stopped) break;
      await sleep(backoffDelay(attempt++), waker).catch(() => {});
    }
  })();

  return () => {
    stopped = true;
    conn?.abort();
    doc?.removeEventListener?.('visibilitychange', onVisibility);
    waker.close();
  };
}
