-- name: MessageInsert :one
-- Fenced (every write of an actor is): with a fence other than 0, nothing is written
-- unless it is the session's lease token. FOR KEY SHARE holds the lease row until the
-- write commits, so a takeover (FOR UPDATE) either comes before (and the write sees its
-- new token) or waits for it; a renewal (FOR NO KEY UPDATE) does neither (leases.sql).
-- A message under the session's active leaf becomes the leaf: the active path grows with
-- the run on it, and a run on another branch leaves it alone. stored counts the rows
-- inserted (0: fenced).
WITH ins AS (
    INSERT INTO messages (
        id, session_id, run_id, parent_id, position, role, kind, content, status,
        tool_call_id, tool_name, tool_input, tool_status, tool_decision, created_at, updated_at
    )
    SELECT @id, @session_id, @run_id, sqlc.narg(parent_id)::uuid, @position, @role, @kind, @content, @status,
        @tool_call_id, @tool_name, @tool_input, @tool_status, @tool_decision, @created_at, @created_at
    WHERE (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = @session_id AND f.token = @fence FOR KEY SHARE))
    RETURNING messages.id, messages.parent_id
), grown AS (
    UPDATE sessions SET active_leaf = ins.id
    FROM ins
    WHERE sessions.id = @session_id AND sessions.active_leaf IS NOT DISTINCT FROM ins.parent_id
    RETURNING 1
)
SELECT count(*)::bigint AS stored FROM ins;

-- name: MessageUpdate :execrows
-- Writes everything about a message that can change after it is inserted: an assistant
-- segment's content when it closes, a tool call's output and status when it ends. Only
-- while the message is in one of the statuses the writer expects: a late writer cannot
-- rewrite a message that has moved on. No row means stale or gone.
UPDATE messages
SET content = @content,
    status = @status,
    error_code = @error_code,
    error_message = @error_message,
    tool_output = @tool_output,
    tool_status = @tool_status,
    tool_decision = COALESCE(@tool_decision, messages.tool_decision),
    provider_data = @provider_data,
    updated_at = @updated_at
WHERE messages.id = @id AND messages.status = ANY(@from_statuses::text[])
    AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = messages.session_id AND f.token = @fence FOR KEY SHARE));

-- name: MessageGet :one
SELECT sqlc.embed(m), r.request_id
FROM messages m
LEFT JOIN runs r ON r.id = m.run_id
WHERE m.id = @id;

-- name: MessagesPathBefore :many
-- The newest messages of a branch below a position, newest first: the leaf's ancestors
-- and the leaf (the session's active leaf when leaf is NULL). A message of another
-- session is no leaf: nothing.
WITH RECURSIVE path AS (
    SELECT l.id, l.parent_id FROM messages l
    WHERE l.session_id = @session_id
        AND l.id = COALESCE(sqlc.narg(leaf)::uuid, (SELECT s.active_leaf FROM sessions s WHERE s.id = @session_id))
    UNION ALL
    SELECT p.id, p.parent_id FROM messages p JOIN path ON p.id = path.parent_id
    WHERE p.session_id = @session_id
)
SELECT sqlc.embed(m), r.request_id
FROM path
JOIN messages m ON m.id = path.id
LEFT JOIN runs r ON r.id = m.run_id
WHERE m.position < @before
ORDER BY m.position DESC
LIMIT @max_rows;

-- name: MessageSiblings :many
-- The children of the given parents (NULL among them: the session's first messages),
-- oldest first: the alternatives at each branch point, with how many each parent has.
SELECT m.id, m.parent_id
FROM messages m
WHERE m.session_id = @session_id
    AND (m.parent_id = ANY(@parents::uuid[]) OR (@roots::boolean AND m.parent_id IS NULL))
ORDER BY m.parent_id, m.position;

-- name: MessageLeaves :many
-- The session's leaves (messages nothing was written under), newest first: the ends of
-- its branches. Each has the ancestors the path query reads.
SELECT m.id FROM messages m
WHERE m.session_id = @session_id
    AND NOT EXISTS (SELECT 1 FROM messages c WHERE c.session_id = @session_id AND c.parent_id = m.id)
ORDER BY m.position DESC
LIMIT @max_rows;

-- name: MessageNewestBelow :one
-- The newest message of the subtree under (and including) a message: where the branch
-- through it was last written, the leaf that selecting it shows.
WITH RECURSIVE sub AS (
    SELECT m.id, m.position FROM messages m WHERE m.id = @id AND m.session_id = @session_id
    UNION ALL
    SELECT c.id, c.position FROM messages c JOIN sub ON c.parent_id = sub.id
    WHERE c.session_id = @session_id
)
SELECT id FROM sub ORDER BY position DESC LIMIT 1;

-- name: SessionSetLeaf :execrows
-- Makes leaf (a message of the session, or NULL) the session's active leaf. Fenced.
UPDATE sessions SET active_leaf = sqlc.narg(leaf)::uuid
WHERE sessions.id = @session_id AND sessions.deleted_at IS NULL
    AND (sqlc.narg(leaf)::uuid IS NULL OR EXISTS (SELECT 1 FROM messages m WHERE m.id = sqlc.narg(leaf)::uuid AND m.session_id = @session_id))
    AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = sessions.id AND f.token = @fence FOR KEY SHARE));

-- name: MessagesListByRun :many
SELECT sqlc.embed(m), r.request_id
FROM messages m
LEFT JOIN runs r ON r.id = m.run_id
WHERE m.run_id = @run_id
ORDER BY m.position;

-- name: MessagesSettleRuns :execrows
-- Ends what runs left in progress: rows still streaming (open segments, tool calls that
-- never ended) take the given status, and tool calls that never ended are cancelled.
-- Rows in except_ids are left alone: their writer still has their final state to store.
UPDATE messages
SET status = @status,
    tool_status = CASE WHEN tool_status IN ('running', 'awaiting_approval') THEN 'cancelled' ELSE tool_status END,
    updated_at = @updated_at
WHERE messages.run_id = ANY(@run_ids::uuid[]) AND messages.status = 'streaming'
  AND NOT (messages.id = ANY(COALESCE(@except_ids::uuid[], '{}')))
  AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = messages.session_id AND f.token = @fence FOR KEY SHARE));

-- name: MessageDeleteEmpty :one
-- Removes a segment a process opened and died in before any of its text was stored.
-- When it was the session's active leaf, its parent is.
WITH gone AS (
    DELETE FROM messages WHERE messages.id = @id AND messages.status = 'streaming' AND messages.content = '' AND messages.tool_call_id IS NULL
        AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = messages.session_id AND f.token = @fence FOR KEY SHARE))
    RETURNING messages.id, messages.session_id, messages.parent_id
), back AS (
    UPDATE sessions SET active_leaf = gone.parent_id
    FROM gone
    WHERE sessions.id = gone.session_id AND sessions.active_leaf = gone.id
    RETURNING 1
)
SELECT count(*)::bigint AS deleted FROM gone;

-- name: MessagesDeleteBySession :exec
DELETE FROM messages WHERE session_id = @session_id;
