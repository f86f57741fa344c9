-- name: RunStart :exec
-- Stores a run, its user message and the session's new updated_at in one statement, so
-- a run never exists without its user message (and the storage rule costs one round trip).
WITH touched AS (
    UPDATE sessions SET updated_at = @started_at WHERE sessions.id = @session_id
), new_run AS (
    INSERT INTO runs (id, session_id, request_id, status, started_at, last_activity_at, model)
    VALUES (@run_id, @session_id, @request_id, 'running', @started_at, @started_at, @model)
)
INSERT INTO messages (id, session_id, run_id, position, role, content, status, created_at, updated_at)
VALUES (@message_id, @session_id, @run_id::uuid, @position, 'user', @content, 'complete', @message_created_at, @message_created_at);

-- name: RunGetByRequest :one
SELECT * FROM runs WHERE session_id = @session_id AND request_id = @request_id;

-- name: RunGet :one
SELECT * FROM runs WHERE id = @id;

-- name: RunUpdate :execrows
-- Writes a run only while it is in one of the statuses the writer expects, so a late
-- writer cannot rewrite a run that has moved on (ended, say). No row means stale or gone.
UPDATE runs
SET status = @status,
    error_code = @error_code,
    error_message = @error_message,
    ended_at = @ended_at,
    last_activity_at = @last_activity_at,
    input_tokens = @input_tokens,
    output_tokens = @output_tokens,
    context_tokens = @context_tokens,
    context_window = @context_window,
    cancel_reason = @cancel_reason,
    recoveries = @recoveries,
    dismissed_at = @dismissed_at,
    resume_request_ids = @resume_request_ids::text[],
    superseded_by = @superseded_by
WHERE id = @id AND status = ANY(@from_statuses::text[]);

-- name: RunsListUnfinished :many
SELECT * FROM runs
WHERE status IN ('running', 'awaiting_approval', 'paused')
ORDER BY started_at;

-- name: RunsInterruptUnfinished :many
-- Ends every run a dead process left unfinished. Only for start-up: a live process's runs
-- would be ended too.
UPDATE runs
SET status = 'interrupted',
    error_code = @error_code,
    error_message = @error_message,
    ended_at = @ended_at,
    last_activity_at = @ended_at
WHERE status IN ('running', 'awaiting_approval', 'paused')
RETURNING id;

-- name: RunLatest :one
-- The session's newest run.
SELECT * FROM runs WHERE session_id = @session_id ORDER BY started_at DESC, id DESC LIMIT 1;

-- name: RunInsertRetry :exec
-- Stores a run that answers the user message of the run it retries (it has none of its
-- own), and the session's new updated_at, in one statement.
WITH touched AS (
    UPDATE sessions SET updated_at = @started_at WHERE sessions.id = @session_id
)
INSERT INTO runs (id, session_id, request_id, status, started_at, last_activity_at, model, retry_of)
VALUES (@run_id, @session_id, @request_id, 'running', @started_at, @started_at, @model, @retry_of);
