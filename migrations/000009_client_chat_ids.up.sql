-- The AI SDK's useChat names its chats itself (POST /v1/aisdk/chat's id): that id maps to
-- one of the caller's sessions, created on first use and found again by it. Unique per
-- user, so nobody can take another user's chat id; a deleted session keeps it, so a chat
-- id is never handed a new empty session.
ALTER TABLE sessions ADD COLUMN client_id text;
CREATE UNIQUE INDEX sessions_client_id_idx ON sessions (owner, client_id) WHERE client_id IS NOT NULL;
