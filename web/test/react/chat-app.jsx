// The React app of docs/ai-sdk.md (useChat in StrictMode), for the browser tests of
// react-aisdk.test.mjs: bundled by react-util.mjs at test time, served from another
// origin than chatd's, configured by its URL:
//   ?api=<chatd>/v1/aisdk/chat&id=<chat id>&transport=default|chatd
// It renders status, error and the messages with data-testids, and keeps in
// window.__log every (status, last answer) it rendered, so a test can tell whether the
// page ever showed `ready` with a cut-off answer.
import { StrictMode, useEffect, useMemo, useRef, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport } from 'ai';
import { ChatdChatTransport, loadChatdChat } from '@chatd/ai-sdk';
import { useChat as useChatdChat } from '@chatd/ai-sdk/react';

const q = new URLSearchParams(location.search);
const api = q.get('api');
const id = q.get('id');
const kind = q.get('transport') || 'default';
const headers = {};
window.__log = [];

function App() {
  const [init, setInit] = useState(null);
  // ?unmount: a button that takes the chat off the page (an SPA leaving the chat's route).
  const [shown, setShown] = useState(true);
  useEffect(() => {
    let gone = false;
    loadChatdChat(api, id, { headers }).then((r) => !gone && setInit(r));
    return () => {
      gone = true;
    };
  }, []);
  if (!init) return <p data-testid="loading">loading</p>;
  if (!init.ok) return <p data-testid="load-error">{init.error.message}</p>;
  if (!shown) return <p data-testid="unmounted">unmounted</p>;
  return (
    <>
      <button data-testid="unmount" onClick={() => setShown(false)}>leave</button>
      {kind === 'chatd' ? <ChatdChat id={id} initialMessages={init.messages} /> : <DefaultChat id={id} initialMessages={init.messages} />}
    </>
  );
}

// ChatdChatTransport with @chatd/ai-sdk/react's useChat: the docs' example as it is, with
// nothing of its own for runs started elsewhere, branch points or unmounting.
function ChatdChat({ id, initialMessages }) {
  const transport = useMemo(() => new ChatdChatTransport({ api, headers }), []);
  const chat = useChatdChat({ id, messages: initialMessages, transport });
  return <View chat={chat} id={id} />;
}

// The stock DefaultChatTransport, as docs/ai-sdk.md shows it.
function DefaultChat({ id, initialMessages }) {
  const transport = useMemo(() => new DefaultChatTransport({ api, headers }), []);
  const ref = useRef(null);
  const chat = useChat({
    id,
    messages: initialMessages,
    transport,
    resume: true,
    // docs/ai-sdk.md, Branches: an edited question's branch point is in the transcript,
    // not in the answer's stream; reload it after the answer. (Not after a stop: the
    // transcript of a run being stopped lacks the segment it was streaming.)
    onFinish: async ({ isAbort }) => {
      if (isAbort) return;
      const r = await loadChatdChat(api, id, { headers });
      if (r.ok && ref.current.status === 'ready') ref.current.setMessages(r.messages);
    },
  });
  ref.current = chat;
  return <View chat={chat} id={id} />;
}

function View({ chat, id }) {
  const { messages, sendMessage, status, error, stop, setMessages } = chat;
  window.__chat = chat;

  const last = [...messages].reverse().find((m) => m.role === 'assistant');
  const lastText = last ? textOf(last) : '';
  const prev = window.__log[window.__log.length - 1];
  if (!prev || prev.status !== status || prev.id !== last?.id || prev.text !== lastText)
    window.__log.push({ t: Date.now(), status, id: last?.id ?? null, text: lastText });

  const post = (path, body) =>
    fetch(`${api}/${encodeURIComponent(id)}/${path}`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: body && JSON.stringify(body),
    });
  const branch = async (m, i) => {
    const b = m.metadata?.chatd?.branch;
    const res = await post('branch', { messageId: b.siblings[i] });
    if (res.ok) setMessages((await res.json()).messages);
  };

  return (
    <>
      <p>
        status <span data-testid="status">{status}</span> <span data-testid="transport">{kind}</span>
      </p>
      {error ? <p data-testid="error">{error.message}</p> : null}
      {messages.map((m) => {
        const b = m.metadata?.chatd?.branch;
        return (
          <div key={m.id} data-testid="message" data-role={m.role} data-id={m.id}>
            {b ? (
              <span data-testid="branch" data-index={b.index} data-count={b.count}>
                <button data-testid="branch-prev" disabled={b.index === 0} onClick={() => branch(m, b.index - 1)}>&lt;</button>
                {b.index + 1} / {b.count}
                <button data-testid="branch-next" disabled={b.index === b.count - 1} onClick={() => branch(m, b.index + 1)}>&gt;</button>
              </span>
            ) : null}
            {m.parts.map((part, i) => {
              if (part.type === 'text') return <p key={i} data-testid="text">{part.text}</p>;
              if (part.type.startsWith('tool-') && 'toolCallId' in part) {
                if (part.state === 'approval-requested')
                  return (
                    <div key={i} data-testid="approval">
                      {part.type.slice(5)} wants to run with {JSON.stringify(part.input)}
                      <button data-testid="approve" onClick={() => post('approve', { toolCallId: part.toolCallId, approved: true })}>Approve</button>
                      <button data-testid="deny" onClick={() => post('approve', { toolCallId: part.toolCallId, approved: false })}>Deny</button>
                    </div>
                  );
                return (
                  <pre key={i} data-testid="tool" data-state={part.state}>
                    {part.type.slice(5)}: {part.state === 'output-available' ? String(part.output) : part.state}
                  </pre>
                );
              }
              return null;
            })}
          </div>
        );
      })}
      {status === 'streaming' || status === 'submitted' ? (
        // ChatdChatTransport: useChat's stop() stops the run for everyone; the stock
        // transport needs chatd's POST .../stop (docs/ai-sdk.md).
        <button data-testid="stop" onClick={() => (kind === 'chatd' ? stop() : post('stop'))}>Stop</button>
      ) : null}
      <form
        onSubmit={(e) => {
          e.preventDefault();
          const f = e.currentTarget;
          sendMessage({ text: String(new FormData(f).get('q')) });
          f.reset();
        }}
      >
        <input name="q" data-testid="input" />
      </form>
    </>
  );
}

function textOf(m) {
  return m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('\n');
}

createRoot(document.getElementById('root')).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
