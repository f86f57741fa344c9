-- name: SessionGet :one
SELECT * FROM sessions WHERE id = @id;

-- name: SessionSetSandbox :execrows
-- A new sandbox (or none): used now, running.
UPDATE sessions SET sandbox_id = @sandbox_id, sandbox_used_at = @used_at,
    sandbox_paused_at = NULL, sandbox_killed_at = NULL
WHERE id = @id;

-- name: SessionSandboxKilledAt :one
-- When the janitor last killed the session's sandbox; NULL when it did not, or when the
-- session has a sandbox again.
SELECT sandbox_killed_at FROM sessions WHERE id = @id;

-- name: SessionSandboxUsed :execrows
-- The session's sandbox was used (a tool call started or ended on it, or it was
-- resumed): it runs, and its idle time counts from now.
UPDATE sessions SET sandbox_used_at = @used_at, sandbox_paused_at = NULL
WHERE id = @id AND sandbox_id IS NOT NULL;

-- name: SessionSandboxPause :execrows
-- Records that sandbox_id was paused at paused_at, unless it already was (a pause
-- earlier than this one counts).
UPDATE sessions SET sandbox_paused_at = @paused_at
WHERE id = @id AND sandbox_id = @sandbox_id AND sandbox_paused_at IS NULL;

-- name: SessionSandboxPauseIdle :execrows
-- The janitor's pause: only when the sandbox is still the same, running and unused
-- since idle_before (a tool call that came in between keeps it running).
UPDATE sessions SET sandbox_paused_at = @paused_at
WHERE id = @id AND sandbox_id = @sandbox_id AND sandbox_paused_at IS NULL
    AND sandbox_used_at <= @idle_before;

-- name: SessionSandboxKill :execrows
-- The janitor's kill: the sandbox, paused since before kill_before, is forgotten, so
-- the session's next tool call creates a new one.
UPDATE sessions SET sandbox_id = NULL, sandbox_paused_at = NULL, sandbox_used_at = NULL,
    sandbox_killed_at = @killed_at
WHERE id = @id AND sandbox_id = @sandbox_id AND sandbox_paused_at <= @kill_before;

-- name: SessionSandboxesIdle :many
-- Running sandboxes unused since idle_before, the longest idle first.
SELECT id, sandbox_id::text AS sandbox_id FROM sessions
WHERE sandbox_id IS NOT NULL AND sandbox_paused_at IS NULL AND sandbox_used_at <= @idle_before
ORDER BY sandbox_used_at
LIMIT @max;

-- name: SessionSandboxesPaused :many
-- Sandboxes paused since before paused_before, the longest paused first.
SELECT id, sandbox_id::text AS sandbox_id FROM sessions
WHERE sandbox_id IS NOT NULL AND sandbox_paused_at IS NOT NULL AND sandbox_paused_at <= @paused_before
ORDER BY sandbox_paused_at
LIMIT @max;

-- name: SessionInsert :one
-- Creates the session unless it exists; either way returns the stored row, so two
-- callers racing to create one session both see the same owner. DO UPDATE (a no-op) is
-- what makes RETURNING give the existing row: with DO NOTHING a caller that waited on a
-- concurrent insert would get no row at all. Only called for sessions not yet seen.
INSERT INTO sessions (id, owner, title, created_at, updated_at)
VALUES (@id, @owner, @title, @created_at, @created_at)
ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id
RETURNING *;
