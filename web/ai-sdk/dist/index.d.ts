export { ChatdChatTransport, type ChatdChatTransportOptions, toChatdError } from './transport.js';
export { ChatdError, chatdErrorCode } from './errors.js';
export { loadChatdChat, type ChatdTree, type LoadChatdChatOptions, type LoadChatdChatResult } from './load.js';
export { followChatdChat, type FollowHandlers, type ChatdChatEvent } from './follow.js';
export { backoffDelay, type BackoffOptions } from './wake.js';
