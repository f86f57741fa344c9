// @chatd/ai-sdk: built from web/ai-sdk/src by web/ai-sdk/build.mjs; do not edit.

// src/react.ts
import { useEffect, useRef } from "react";
import { useChat as useSDKChat } from "@ai-sdk/react";
import { ChatdChatTransport, followChatdChat, loadChatdChat } from "./index.js";
function useChat(options = {}) {
  const { chatd: opts = {}, ...sdkOptions } = options;
  const transport = chatdTransportOf(sdkOptions);
  const chatKey = "chat" in sdkOptions ? sdkOptions.chat : sdkOptions.id;
  const idRef = useRef(void 0);
  const ref = useRef(null);
  useEffect(() => {
    const id = idRef.current;
    return () => {
      if (transport && id !== void 0) transport.detach(id);
    };
  }, [transport, chatKey]);
  let finalOptions = sdkOptions;
  if (transport && !("chat" in sdkOptions)) {
    const userFinish = sdkOptions.onFinish;
    finalOptions = {
      ...sdkOptions,
      onFinish: (arg) => {
        userFinish?.(arg);
        if (arg.isAbort || arg.isDisconnect || arg.isError || opts.reloadAfterFinish === false) return;
        const id = idRef.current;
        if (id !== void 0) void reloadWhenIdle(transport, id, ref);
      }
    };
  }
  const helpers = useSDKChat({ ...finalOptions, resume: sdkOptions.resume ?? (transport ? true : false) });
  idRef.current = helpers.id;
  ref.current = helpers;
  const follow = transport !== void 0 && opts.follow !== false;
  useEffect(() => {
    if (!follow || !transport) return void 0;
    return followChatdChat(transport, helpers.id, {
      resumeStream: () => ref.current?.resumeStream(),
      setMessages: (m) => ref.current?.setMessages(m)
    });
  }, [follow, transport, helpers.id]);
  return helpers;
}
function chatdTransportOf(options) {
  const t = "chat" in options ? options.chat.transport : options.transport;
  return t instanceof ChatdChatTransport ? t : void 0;
}
async function reloadWhenIdle(transport, id, ref) {
  const r = await loadChatdChat(transport.apiURL, id, {
    headers: () => transport.resolvedHeaders(),
    fetch: (u, i) => transport.doFetch(String(u), i)
  });
  const chat = ref.current;
  if (!r.ok || !chat || chat.id !== id || chat.status !== "ready" || transport.isStreaming(id)) return;
  if (JSON.stringify(r.messages) !== JSON.stringify(chat.messages)) chat.setMessages(r.messages);
}
export {
  useChat
};
