// The test page of assistant-ui.test.mjs: web/examples/assistant-ui/ChatdAssistant.tsx as
// it is, in StrictMode, configured by the URL (?api=…&id=…), with a probe inside its
// runtime that shows useChat's status and logs (status, last answer) renders in
// window.__log, as chat-app.jsx does.
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { useAISDKChat } from '@assistant-ui/react-ai-sdk';
import { ChatdAssistant } from '../../examples/assistant-ui/ChatdAssistant.tsx';

const q = new URLSearchParams(location.search);
window.__log = [];

function Probe() {
  const chat = useAISDKChat();
  if (!chat) return null;
  const last = [...chat.messages].reverse().find((m) => m.role === 'assistant');
  const text = last ? last.parts.filter((p) => p.type === 'text').map((p) => p.text).join('\n') : '';
  const prev = window.__log[window.__log.length - 1];
  if (!prev || prev.status !== chat.status || prev.id !== last?.id || prev.text !== text)
    window.__log.push({ t: Date.now(), status: chat.status, id: last?.id ?? null, text });
  return (
    <p>
      status <span data-testid="status">{chat.status}</span>
      {chat.error ? <span data-testid="error">{chat.error.message}</span> : null}
    </p>
  );
}

createRoot(document.getElementById('root')).render(
  <StrictMode>
    <ChatdAssistant api={q.get('api')} id={q.get('id')}>
      <Probe />
    </ChatdAssistant>
  </StrictMode>,
);
