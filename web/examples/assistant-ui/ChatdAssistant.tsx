// assistant-ui on chatd: a thread whose chat id is chatd's (a reload keeps the
// conversation and resumes the reply), whose Stop stops the run for everyone, whose
// approvals are decided on the server, whose Edit and Regenerate make chatd's branches,
// and whose messages at a branch point show and switch them. docs/ai-sdk.md, "assistant-ui", explains each piece; web/test/assistant-ui
// .test.mjs runs this very file in Chromium against a real chatd.
//
//   <ChatdAssistant api="http://127.0.0.1:8080/v1/aisdk/chat" id={chatId} />
//
// Pinned with: react 19.3.1, ai 7.0.173, @ai-sdk/react 4.0.177, @assistant-ui/react
// 0.15.22, @assistant-ui/react-ai-sdk 1.4.12, @chatd/ai-sdk (web/ai-sdk).
import { createContext, useContext, useEffect, useMemo, useRef, useState, type ReactNode } from 'react';
import { useChat } from '@ai-sdk/react';
import type { UIMessage } from 'ai';
import { ChatdChatTransport, followChatdChat, loadChatdChat, type LoadChatdChatResult } from '@chatd/ai-sdk';
import { useAISDKChat, useAISDKRuntime } from '@assistant-ui/react-ai-sdk';
import {
  ActionBarPrimitive,
  AssistantRuntimeProvider,
  ComposerPrimitive,
  MessagePrimitive,
  ThreadPrimitive,
  useAuiState,
  type AppendMessage,
  type ToolCallMessagePartProps,
} from '@assistant-ui/react';

type Headers = Record<string, string>;

/** Where the chat is, for the branch picker's POST …/branch. */
const Chatd = createContext<{ api: string; id: string; headers: Headers } | null>(null);

interface Props {
  /** chatd's AI SDK endpoint: `${CHATD}/v1/aisdk/chat`. */
  api: string;
  /** The chat id: yours to choose (a route parameter, say); chatd keeps the chat under it. */
  id: string;
  /** Authorization for chatd, if any. */
  headers?: Headers;
  children?: ReactNode;
}

/** The whole recipe: load the stored chat, then the runtime and a thread. */
export function ChatdAssistant({ api, id, headers = {}, children }: Props) {
  const [loaded, setLoaded] = useState<LoadChatdChatResult | null>(null);
  useEffect(() => {
    let gone = false;
    setLoaded(null);
    loadChatdChat(api, id, { headers }).then((r) => !gone && setLoaded(r));
    return () => {
      gone = true;
    };
  }, [api, id]);
  if (!loaded) return <p data-testid="loading">Loading…</p>;
  if (!loaded.ok)
    return (
      <p role="alert" data-testid="load-error">
        {loaded.error.message} <button onClick={() => loaded.retry().then(setLoaded)}>Retry</button>
      </p>
    );
  return (
    <ChatdRuntimeProvider api={api} id={id} headers={headers} initialMessages={loaded.messages}>
      {children}
      <Thread />
    </ChatdRuntimeProvider>
  );
}

/**
 * The runtime: useChat with chatd's chat id and ChatdChatTransport, handed to
 * assistant-ui with useAISDKRuntime. (assistant-ui's useChatRuntime makes its own
 * throwaway `__LOCALID_…` id, so a reload would lose the conversation.)
 */
export function ChatdRuntimeProvider({
  api,
  id,
  headers = {},
  initialMessages,
  children,
}: Props & { initialMessages: UIMessage[] }) {
  const transport = useMemo(
    () =>
      new ChatdChatTransport({
        api,
        headers,
        // An edit (see toCreateMessage below) names the question it replaces: chatd's
        // edit is a send with that question's id as `messageId`.
        prepareSendMessagesRequest: ({ body, id, messages, trigger, messageId }) => {
          const edits = (messages.at(-1)?.metadata as ChatdMetadata | undefined)?.chatd?.edits;
          return { body: { ...body, id, messages, trigger, messageId: edits ?? messageId } };
        },
      }),
    [api],
  );
  const ref = useRef<ReturnType<typeof useChat> | null>(null);
  const chat = useChat({
    id,
    messages: initialMessages,
    transport,
    resume: true,
    // An edited question's branch point (< 2 / 2 >) is in the transcript, not in the
    // answer's stream: reload it after an answer ends (not after a stop, when the
    // transcript lacks the open segment).
    onFinish: async ({ isAbort }) => {
      if (isAbort) return;
      const r = await loadChatdChat(api, id, { headers });
      if (r.ok && ref.current?.status === 'ready') ref.current.setMessages(r.messages);
    },
  });
  ref.current = chat;
  // Runs started elsewhere (another tab, a queued message) and branch switches.
  useEffect(
    () =>
      followChatdChat(transport, id, {
        resumeStream: () => ref.current?.resumeStream(),
        setMessages: (m) => ref.current?.setMessages(m),
      }),
    [transport, id],
  );
  const runtime = useAISDKRuntime(chat, {
    // assistant-ui sends an edit as a new message; mark which question it edits.
    toCreateMessage,
    // chatd keeps the run (and its stream) open while a call waits: decide it on the
    // server, for every tab, instead of the SDK's addToolApprovalResponse.
    onRespondToToolApproval: async ({ approved }, { toolCallId }) => {
      const res = await post(api, id, headers, 'approve', { toolCallId, approved });
      // 409: another tab decided first; the stream brings that decision.
      if (!res.ok && res.status !== 409) throw new Error(`approve: ${res.status} ${await res.text()}`);
    },
  });
  const where = useMemo(() => ({ api, id, headers }), [api, id]);
  return (
    <Chatd.Provider value={where}>
      <AssistantRuntimeProvider runtime={runtime}>{children}</AssistantRuntimeProvider>
    </Chatd.Provider>
  );
}

type ChatdMetadata = {
  chatd?: { edits?: string; branch?: { index: number; count: number; siblings: string[] } };
};

function toCreateMessage(message: AppendMessage) {
  return {
    role: message.role as 'user',
    parts: message.content.flatMap((p) => (p.type === 'text' ? [{ type: 'text' as const, text: p.text }] : [])),
    ...(message.sourceId ? { metadata: { chatd: { edits: message.sourceId } } } : {}),
  } as any; // CreateUIMessage
}

function post(api: string, id: string, headers: Headers, path: string, body: object) {
  return fetch(`${api.replace(/\/$/, '')}/${encodeURIComponent(id)}/${path}`, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

export function Thread() {
  return (
    <ThreadPrimitive.Root data-testid="thread">
      <ThreadPrimitive.Viewport>
        <ThreadPrimitive.Messages components={{ UserMessage, AssistantMessage, UserEditComposer }} />
      </ThreadPrimitive.Viewport>
      <ComposerPrimitive.Root>
        <ComposerPrimitive.Input data-testid="input" placeholder="Message" />
        <ThreadPrimitive.If running={false}>
          <ComposerPrimitive.Send data-testid="send">Send</ComposerPrimitive.Send>
        </ThreadPrimitive.If>
        <ThreadPrimitive.If running>
          {/* useChat's stop(): with ChatdChatTransport it stops the run for everyone. */}
          <ComposerPrimitive.Cancel data-testid="stop">Stop</ComposerPrimitive.Cancel>
        </ThreadPrimitive.If>
      </ComposerPrimitive.Root>
    </ThreadPrimitive.Root>
  );
}

function Text({ text }: { text: string }) {
  return <p data-testid="text">{text}</p>;
}

function UserMessage() {
  const id = useAuiState(({ message }) => message.id);
  return (
    <MessagePrimitive.Root data-testid="message" data-role="user" data-id={id}>
      <ChatdBranchPicker />
      <MessagePrimitive.Parts components={{ Text }} />
      <ActionBarPrimitive.Root>
        {/* Edit: chatd keeps the old question as a branch beside the new one. */}
        <ActionBarPrimitive.Edit data-testid="edit">Edit</ActionBarPrimitive.Edit>
      </ActionBarPrimitive.Root>
    </MessagePrimitive.Root>
  );
}

function UserEditComposer() {
  return (
    <ComposerPrimitive.Root data-testid="edit-composer">
      <ComposerPrimitive.Input data-testid="edit-input" />
      <ComposerPrimitive.Cancel>Cancel</ComposerPrimitive.Cancel>
      <ComposerPrimitive.Send data-testid="edit-send">Send</ComposerPrimitive.Send>
    </ComposerPrimitive.Root>
  );
}

function AssistantMessage() {
  const id = useAuiState(({ message }) => message.id);
  return (
    <MessagePrimitive.Root data-testid="message" data-role="assistant" data-id={id}>
      <ChatdBranchPicker />
      <MessagePrimitive.Parts components={{ Text, tools: { Fallback: ToolCall } }} />
      <ActionBarPrimitive.Root>
        {/* Regenerate: chatd answers the question again as a new branch. */}
        <ActionBarPrimitive.Reload data-testid="regenerate">Regenerate</ActionBarPrimitive.Reload>
      </ActionBarPrimitive.Root>
    </MessagePrimitive.Root>
  );
}

/** A tool call, with Approve and Deny while it waits for approval. */
function ToolCall({ toolName, args, result, approval, respondToApproval }: ToolCallMessagePartProps) {
  const waiting = approval && approval.approved === undefined;
  return (
    <div data-testid="tool" data-tool={toolName} data-waiting={waiting ? 'yes' : 'no'}>
      <code>
        {toolName}({JSON.stringify(args)})
      </code>
      {waiting ? (
        <>
          <button data-testid="approve" onClick={() => respondToApproval({ approved: true })}>Approve</button>
          <button data-testid="deny" onClick={() => respondToApproval({ approved: false })}>Deny</button>
        </>
      ) : null}
      {result !== undefined ? <pre data-testid="tool-result">{String(result)}</pre> : null}
    </div>
  );
}

/**
 * "< 2 / 3 >" on an answer at a branch point, from chatd's transcript
 * (metadata.chatd.branch); switching is chatd's POST …/branch, for every tab.
 */
function ChatdBranchPicker() {
  const chat = useAISDKChat();
  const messageId = useAuiState(({ message }) => message.id);
  const m = chat?.messages.find((x) => x.id === messageId);
  const b = (m?.metadata as ChatdMetadata | undefined)?.chatd?.branch;
  const where = useContext(Chatd);
  if (!chat || !b || !where) return null;
  const show = async (i: number) => {
    const res = await post(where.api, where.id, where.headers, 'branch', { messageId: b.siblings[i] });
    if (res.ok) chat.setMessages((await res.json()).messages);
  };
  return (
    <span data-testid="branch" data-index={b.index} data-count={b.count}>
      <button data-testid="branch-prev" disabled={b.index === 0} onClick={() => show(b.index - 1)}>&lt;</button>
      {b.index + 1} / {b.count}
      <button data-testid="branch-next" disabled={b.index === b.count - 1} onClick={() => show(b.index + 1)}>&gt;</button>
    </span>
  );
}
