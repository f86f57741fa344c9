import { type UseChatHelpers, type UseChatOptions } from '@ai-sdk/react';
import type { UIMessage } from 'ai';
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
export declare function useChat<M extends UIMessage = UIMessage>(options?: UseChatOptions<M> & ChatdUseChatOptions): UseChatHelpers<M>;
