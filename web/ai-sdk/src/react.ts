// @chatd/ai-sdk/react: @ai-sdk/react's useChat with chatd's guarantees wired in, so an app
// that uses ChatdChatTransport needs no code of its own to follow the chat:
//
//   import { useChat } from '@chatd/ai-sdk/react';   // was: from '@ai-sdk/react'
//
// It is @ai-sdk/react's useChat (the same options, the same helpers), and when the
// transport is a ChatdChatTransport it also:
// - follows runs started elsewhere (another tab, another device, a queued message) and
//   transcripts that moved on (followChatdChat), while the component is mounted;
// - reloads the transcript after an answer ends (an edit's branch point is in the
//   transcript, not in the answer's stream);
// - resumes at mount (`resume` defaults to true);
// - does not stop the run when the component unmounts or shows another chat
//   (@ai-sdk/react stops its Chat then, which ChatdChatTransport would take for stop()).
//
// react and @ai-sdk/react are optional peer dependencies: only this entry needs them.
import { useEffect, useRef } from 'react';
import { useChat as useSDKChat, type UseChatHelpers, type UseChatOptions } from '@ai-sdk/react';
import type { UIMessage } from 'ai';
import { ChatdChatTransport, followChatdChat, loadChatdChat } from './index.js';

/** What @chatd/ai-sdk/react adds to useChat's options. */
export interface ChatdUseChatOptions {
  chatd?: {
    /** Follow runs started elsewhere and transcripts that moved on. Default true. */
    follow?: boolean;
    /** Reload the transcript after an answer ends. Default true. */
    reloadAfterFinish?: boolean;
  };
}

/**
 * @ai-sdk/react's useChat; with a ChatdChatTransport (as `transport`, or in `chat`) it
 * follows the chat, reloads the transcript after an answer, resumes at mount and leaves
 * the run going when the component goes away. With any other transport it is exactly
 * @ai-sdk/react's useChat.
 */
export function useChat<M extends UIMessage = UIMessage>(
  options: UseChatOptions<M> & ChatdUseChatOptions = {},
): UseChatHelpers<M> {
  const { chatd: opts = {}, ...sdkOptions } = options;
  const transport = chatdTransportOf(sdkOptions);
  const chatKey: unknown = 'chat' in sdkOptions ? sdkOptions.chat : sdkOptions.id;
  const idRef = useRef<string | undefined>(undefined);
  const ref = useRef<UseChatHelpers<M> | null>(null);

  // Declared before @ai-sdk/react's useChat so that its cleanup runs first: React runs a
  // component's effect cleanups in order, and useChat's stops the Chat it made.
  useEffect(() => {
    const id = idRef.current;
    return () => {
      if (transport && id !== undefined) transport.detach(id);
    };
  }, [transport, chatKey]);

  let finalOptions: UseChatOptions<M> = sdkOptions;
  if (transport && !('chat' in sdkOptions)) {
    const userFinish = sdkOptions.onFinish;
    finalOptions = {
      ...sdkOptions,
      onFinish: (arg) => {
        userFinish?.(arg);
        if (arg.isAbort || arg.isDisconnect || arg.isError || opts.reloadAfterFinish === false) return;
        const id = idRef.current;
        if (id !== undefined) void reloadWhenIdle(transport, id, ref);
      },
    };
  }
  const helpers = useSDKChat<M>({ ...finalOptions, resume: sdkOptions.resume ?? (transport ? true : false) });
  idRef.current = helpers.id;
  ref.current = helpers;

  const follow = transport !== undefined && opts.follow !== false;
  useEffect(() => {
    if (!follow || !transport) return undefined;
    return followChatdChat<M>(transport, helpers.id, {
      resumeStream: () => ref.current?.resumeStream(),
      setMessages: (m) => ref.current?.setMessages(m),
    });
  }, [follow, transport, helpers.id]);

  return helpers;
}

/** The ChatdChatTransport useChat is given, if it is one. */
function chatdTransportOf<M extends UIMessage>(options: UseChatOptions<M>): ChatdChatTransport<M> | undefined {
  const t: unknown = 'chat' in options ? (options.chat as unknown as { transport?: unknown }).transport : options.transport;
  return t instanceof ChatdChatTransport ? (t as ChatdChatTransport<M>) : undefined;
}

/** Loads the transcript and shows it if nothing streams and it differs from what is shown. */
async function reloadWhenIdle<M extends UIMessage>(
  transport: ChatdChatTransport<M>,
  id: string,
  ref: { current: UseChatHelpers<M> | null },
): Promise<void> {
  const r = await loadChatdChat<M>(transport.apiURL, id, {
    headers: () => transport.resolvedHeaders(),
    fetch: (u, i) => transport.doFetch(String(u), i),
  });
  const chat = ref.current;
  if (!r.ok || !chat || chat.id !== id || chat.status !== 'ready' || transport.isStreaming(id)) return;
  if (JSON.stringify(r.messages) !== JSON.stringify(chat.messages)) chat.setMessages(r.messages);
}
