// assistant-ui on chatd: a thread whose chat id is chatd's (a reload keeps the
// conversation and resumes the reply), whose Stop stops the run for everyone, whose
// approvals are decided on the server, whose Edit and Regenerate make chatd's branches,
// and whose own BranchPicker shows and switches them for every tab. docs/ai-sdk.md,
// "assistant-ui", explains each piece; web/test/assistant-ui.test.mjs runs this very file
// in Chromium against a real chatd.
//
//   <ChatdAssistant api="http://127.0.0.1:8080/v1/aisdk/chat" id={chatId} />
//
// Pinned with: react 19.3.1, ai 7.0.173, @ai-sdk/react 4.0.177, @assistant-ui/react
// 0.15.22, @assistant-ui/react-ai-sdk 1.4.12, @chatd/ai-sdk (web/ai-sdk).
import { useEffect, useMemo, useRef, useState, type ReactNode } from 'react';
import type { UIMessage } from 'ai';
import { ChatdChatTransport, loadChatdChat, type ChatdTree, type LoadChatdChatResult } from '@chatd/ai-sdk';
import { useChat } from '@chatd/ai-sdk/react';
import { useAISDKRuntime } from '@assistant-ui/react-ai-sdk';
import {
  ActionBarPrimitive,
  AssistantRuntimeProvider,
  BranchPickerPrimitive,
  ComposerPrimitive,
  MessagePrimitive,
  ThreadPrimitive,
  useAuiState,
  type AppendMessage,
  type ToolCallMessagePartProps,
} from '@assistant-ui/react';

type Headers = Record<string, string>;

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
    // tree: every branch, for assistant-ui's BranchPicker.
    loadChatdChat(api, id, { headers, tree: true }).then((r) => !gone && setLoaded(r));
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
    <ChatdRuntimeProvider api={api} id={id} headers={headers} initialTree={loaded.tree}>
      {children}
      <Thread />
    </ChatdRuntimeProvider>
  );
}

/**
 * The runtime: useChat (@chatd/ai-sdk/react's: it follows runs started elsewhere, reloads
 * the transcript after an answer, resumes at mount, and leaves the run going on unmount)
 * with chatd's chat id and ChatdChatTransport, handed to assistant-ui with
 * useAISDKRuntime. (assistant-ui's useChatRuntime makes its own throwaway `__LOCALID_…`
 * id, so a reload would lose the conversation.)
 */
export function ChatdRuntimeProvider({
  api,
  id,
  headers = {},
  initialTree,
  children,
}: Props & { initialTree: ChatdTree | undefined }) {
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
  // Empty: assistant-ui fills it from the tree below (it seeds only an empty chat).
  const chat = useChat({ id, messages: [] as UIMessage[], transport });
  const ref = useRef(chat);
  ref.current = chat;
  const runtime = useAISDKRuntime(chat, {
    // chatd's branches are assistant-ui's: every branch seeds its message tree, so its
    // BranchPicker counts and switches chatd's alternatives; what happens later (here or
    // in another tab) reaches it through useChat's messages.
    messageRepository: initialTree,
    // A branch picked here becomes the chat's branch for every tab (and a reload).
    // chatd answers with that branch as it stores it, which may go on below what this
    // tab had seen of it.
    unstable_onBranchChange: async ({ headId }) => {
      if (!headId) return;
      const res = await post(api, id, headers, 'branch', { messageId: headId });
      if (res.ok && ref.current?.status === 'ready') ref.current.setMessages((await res.json()).messages);
    },
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
  return <AssistantRuntimeProvider runtime={runtime}>{children}</AssistantRuntimeProvider>;
}

type ChatdMetadata = { chatd?: { edits?: string } };

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
      <BranchPicker />
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
      <BranchPicker />
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

/** "< 2 / 3 >" at a branch point: assistant-ui's own, over chatd's branches. */
function BranchPicker() {
  const number = useAuiState(({ message }) => message.branchNumber);
  const count = useAuiState(({ message }) => message.branchCount);
  return (
    <BranchPickerPrimitive.Root hideWhenSingleBranch data-testid="branch" data-index={number - 1} data-count={count}>
      <BranchPickerPrimitive.Previous data-testid="branch-prev">&lt;</BranchPickerPrimitive.Previous>
      <BranchPickerPrimitive.Number /> / <BranchPickerPrimitive.Count />
      <BranchPickerPrimitive.Next data-testid="branch-next">&gt;</BranchPickerPrimitive.Next>
    </BranchPickerPrimitive.Root>
  );
}
