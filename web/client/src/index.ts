// @chatd/client: a client for chatd's WebSocket protocol v1 (docs/protocol.md) and its
// HTTP sessions API. See README.md.
export * from './protocol.js';
export {
  type ChatState,
  type ConnectionStatus,
  initialState,
  applyFrame,
  applyHistory,
  eventOrder,
  pendingApprovals,
  contextUsage,
  runProgress,
  branchOf,
  type BranchPosition,
} from './state.js';
export { ChatError } from './errors.js';
export {
  ChatClient,
  type ChatClientOptions,
  type TokenSource,
  type WebSocketLike,
  type WebSocketConstructor,
  type ClientEnvironment,
  type TraceEvent,
} from './client.js';
export {
  SessionsClient,
  type SessionsClientOptions,
  type SessionSummary,
  type SessionPage,
  type WorkspaceFile,
  type WorkspaceFileList,
  type HttpSend,
  type SendAnswer,
  type RunPage,
  type Erasure,
} from './sessions.js';
export { uuid4, isUuid, splitToolName } from './ids.js';
export { MemoryStorage, type StorageLike, type StoredSession, sessionKey } from './storage.js';
