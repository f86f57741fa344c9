-- name: MessageInsert :execrows
-- Fenced (every write of an actor is): with a fence other than 0, nothing is written
-- unless it is the session's lease token. FOR KEY SHARE holds the lease row until the
-- write commits, so a takeover (FOR UPDATE) either comes before (and the write sees its
-- new token) or waits for it; a renewal (FOR NO KEY UPDATE) does neither (leases.sql).
INSERT INTO messages (
    id, session_id, run_id, position, role, kind, content, status,
    tool_call_id, tool_name, tool_input, tool_status, tool_decision, created_at, updated_at
)
SELECT @id, @session_id, @run_id, @position, @role, @kind, @content, @status,
    @tool_call_id, @tool_name, @tool_input, @tool_status, @tool_decision, @created_at, @created_at
WHERE (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = @session_id AND f.token = @fence FOR KEY SHARE));

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

-- name: MessagesListBefore :many
-- The newest messages of a session below a position, newest first, with whether their
-- run's answer was superseded by a retry.
SELECT sqlc.embed(m), r.request_id, (r.superseded_by IS NOT NULL)::boolean AS superseded
FROM messages m
LEFT JOIN runs r ON r.id = m.run_id
WHERE m.session_id = @session_id AND m.position < @before
ORDER BY m.position DESC
LIMIT @max_rows;

-- name: MessagesListByRun :many
SELECT sqlc.embed(m), r.request_id, (r.superseded_by IS NOT NULL)::boolean AS superseded
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

-- name: MessageDeleteEmpty :execrows
-- Removes a segment a process opened and died in before any of its text was stored.
DELETE FROM messages WHERE messages.id = @id AND messages.status = 'streaming' AND messages.content = '' AND messages.tool_call_id IS NULL
    AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = messages.session_id AND f.token = @fence FOR KEY SHARE));

-- name: MessagesDeleteBySession :exec
DELETE FROM messages WHERE session_id = @session_id;
