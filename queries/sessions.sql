-- name: SessionGet :one
SELECT * FROM sessions WHERE id = @id;

-- name: SessionSetSandbox :execrows
-- A new sandbox (or none): used now, running. A deleted session takes none: its
-- sandbox would outlive it.
-- node ("" for none) is the node whose provider made it: sandboxes are per node.
UPDATE sessions SET sandbox_id = @sandbox_id, sandbox_used_at = @used_at,
    sandbox_paused_at = NULL, sandbox_killed_at = NULL, sandbox_node = NULLIF(@node::text, '')
WHERE id = @id AND deleted_at IS NULL;

-- name: SessionSandboxOf :one
-- The session's sandbox and the node that made it.
SELECT COALESCE(sandbox_id::text, '')::text AS sandbox_id, COALESCE(sandbox_node, '')::text AS sandbox_node,
    sandbox_used_at, sandbox_killed_at
FROM sessions WHERE id = @id;

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

-- name: SessionSandboxKill :one
-- The janitor's kill: the sandbox, paused since before kill_before, is forgotten, so
-- the session's next tool call creates a new one, and its workspace is released: its
-- retention counts from now. It returns how many sessions it changed (0 or 1).
WITH killed AS (
    UPDATE sessions SET sandbox_id = NULL, sandbox_paused_at = NULL, sandbox_used_at = NULL,
        sandbox_killed_at = @killed_at
    WHERE id = @id AND sandbox_id = @sandbox_id::text AND sandbox_paused_at <= @kill_before
    RETURNING id
), released AS (
    UPDATE workspaces SET released_at = @killed_at
    WHERE sandbox_id = @sandbox_id::text AND released_at IS NULL AND EXISTS (SELECT FROM killed)
)
SELECT count(*) FROM killed;

-- name: SessionSandboxesIdle :many
-- Running sandboxes unused since idle_before, the longest idle first.
-- Only node's own ("" for every node's): a node's janitor acts on its own sandboxes.
SELECT id, sandbox_id::text AS sandbox_id FROM sessions
WHERE sandbox_id IS NOT NULL AND sandbox_paused_at IS NULL AND sandbox_used_at <= @idle_before
    AND (@node::text = '' OR sandbox_node = @node::text)
ORDER BY sandbox_used_at
LIMIT @max;

-- name: SessionSandboxesPaused :many
-- Sandboxes paused since before paused_before, the longest paused first.
SELECT id, sandbox_id::text AS sandbox_id FROM sessions
WHERE sandbox_id IS NOT NULL AND sandbox_paused_at IS NOT NULL AND sandbox_paused_at <= @paused_before
    AND (@node::text = '' OR sandbox_node = @node::text)
ORDER BY sandbox_paused_at
LIMIT @max;

-- name: SessionInsert :one
-- Creates the session unless it exists; either way returns the stored row, so two
-- callers racing to create one session both see the same owner. DO UPDATE (a no-op) is
-- what makes RETURNING give the existing row: with DO NOTHING a caller that waited on a
-- concurrent insert would get no row at all. Only called for sessions not yet seen.
-- The session's lease row (free) is created with it: every session has one, which the
-- fenced writes lock and SessionOpen acquires.
WITH s AS (
    INSERT INTO sessions (id, owner, title, created_at, updated_at)
    VALUES (@id, @owner, @title, @created_at, @created_at)
    ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id
    RETURNING *
), lease AS (
    INSERT INTO session_leases (session_id) SELECT s.id FROM s
    ON CONFLICT (session_id) DO NOTHING
)
SELECT * FROM s;

-- name: SessionsList :many
-- A page of owner's conversation list: their live sessions that have a run, most
-- recently active first, after the cursor (after_at, after_id; NULL for the first page).
-- It reads sessions_list_idx from the cursor on and never touches another user's rows;
-- each session's preview and latest run are looked up by that session's own indexes
-- (messages by position, runs_session_started_idx). The latest run is the active one
-- when any is: a session has one active run at most, and it is its newest (a continued
-- run was the newest; a retry is a new one). The preview is cut to 4× its length
-- here so that Go can collapse its white space and cut it by characters.
SELECT s.id, s.title, s.created_at, COALESCE(s.active_at, s.created_at)::timestamptz AS active_at,
    COALESCE(p.content, '')::text AS preview,
    COALESCE(l.id, '00000000-0000-0000-0000-000000000000')::uuid AS latest_run_id,
    COALESCE(l.status, '')::text AS latest_run_status,
    COALESCE(l.context_tokens, 0)::bigint AS context_tokens,
    COALESCE(l.context_window, 0)::bigint AS context_window,
    COALESCE(l.progress_step, 0)::int AS progress_step,
    COALESCE(l.progress_of, 0)::int AS progress_of,
    COALESCE(l.progress_label, '')::text AS progress_label
FROM sessions s
LEFT JOIN LATERAL (
    SELECT left(m.content, 4 * @preview_chars::int) AS content FROM messages m
    WHERE m.session_id = s.id AND m.role IN ('user', 'assistant') AND m.kind = 'text' AND m.content <> ''
    ORDER BY m.position DESC
    LIMIT 1
) p ON true
LEFT JOIN LATERAL (
    SELECT r.id, r.status, r.context_tokens, r.context_window, r.progress_step, r.progress_of, r.progress_label FROM runs r
    WHERE r.session_id = s.id
    ORDER BY r.started_at DESC, r.id DESC
    LIMIT 1
) l ON true
WHERE s.owner = @owner AND s.deleted_at IS NULL AND s.active_at IS NOT NULL
    AND (s.active_at, s.id) < (COALESCE(sqlc.narg(after_at)::timestamptz, 'infinity'),
                               COALESCE(sqlc.narg(after_id)::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
ORDER BY s.active_at DESC, s.id DESC
LIMIT @max_rows;

-- name: SessionSummaryGet :one
-- One of owner's live sessions as SessionsList shows it (also one with no run yet).
SELECT s.id, s.title, s.created_at, COALESCE(s.active_at, s.created_at)::timestamptz AS active_at,
    COALESCE(p.content, '')::text AS preview,
    COALESCE(l.id, '00000000-0000-0000-0000-000000000000')::uuid AS latest_run_id,
    COALESCE(l.status, '')::text AS latest_run_status,
    COALESCE(l.context_tokens, 0)::bigint AS context_tokens,
    COALESCE(l.context_window, 0)::bigint AS context_window,
    COALESCE(l.progress_step, 0)::int AS progress_step,
    COALESCE(l.progress_of, 0)::int AS progress_of,
    COALESCE(l.progress_label, '')::text AS progress_label
FROM sessions s
LEFT JOIN LATERAL (
    SELECT left(m.content, 4 * @preview_chars::int) AS content FROM messages m
    WHERE m.session_id = s.id AND m.role IN ('user', 'assistant') AND m.kind = 'text' AND m.content <> ''
    ORDER BY m.position DESC
    LIMIT 1
) p ON true
LEFT JOIN LATERAL (
    SELECT r.id, r.status, r.context_tokens, r.context_window, r.progress_step, r.progress_of, r.progress_label FROM runs r
    WHERE r.session_id = s.id
    ORDER BY r.started_at DESC, r.id DESC
    LIMIT 1
) l ON true
WHERE s.id = @id AND s.owner = @owner AND s.deleted_at IS NULL;

-- name: SessionRename :execrows
-- A person's title for one of their live sessions. It does not make the session active:
-- the list keeps its place.
UPDATE sessions SET title = @title WHERE id = @id AND owner = @owner AND deleted_at IS NULL;

-- name: SessionTombstone :execrows
-- The first step of deleting a session: it becomes a tombstone, which keeps its id from
-- being used again and what it held (title, sandbox) forgotten. Its row lock, held until
-- the deletion commits, makes a concurrent RunStart wait and then find it deleted.
UPDATE sessions
SET deleted_at = @deleted_at, title = '', sandbox_id = NULL, sandbox_used_at = NULL,
    sandbox_paused_at = NULL, sandbox_killed_at = NULL
WHERE id = @id AND owner = @owner AND deleted_at IS NULL;

-- name: SessionForClientID :one
-- The session of owner's chat client_id (the AI SDK's chat id), created with id when it
-- has none yet; either way the stored one. DO UPDATE (a no-op) returns the existing row.
-- A new session's lease row is created with it, as in SessionInsert.
WITH s AS (
    INSERT INTO sessions (id, owner, title, created_at, updated_at, client_id)
    VALUES (@id, @owner, '', @created_at, @created_at, @client_id::text)
    ON CONFLICT (owner, client_id) WHERE client_id IS NOT NULL DO UPDATE SET client_id = EXCLUDED.client_id
    RETURNING id, deleted_at
), lease AS (
    INSERT INTO session_leases (session_id) SELECT s.id FROM s
    ON CONFLICT (session_id) DO NOTHING
)
SELECT s.id, s.deleted_at FROM s;

-- name: SessionByClientID :one
-- The session of owner's chat client_id, if any.
SELECT id, deleted_at FROM sessions WHERE owner = @owner AND client_id = @client_id::text;

-- name: SessionsOwnerLock :exec
-- Serializes, until the transaction ends, the creation of owner's sessions by every node:
-- the count that follows is then the count the insert adds to.
SELECT pg_advisory_xact_lock(hashtextextended('chatd.sessions/' || @owner::text, 0));

-- name: SessionsOwnerLive :one
-- How many live (not deleted) sessions owner has (sessions_owner_live_idx).
SELECT count(*) FROM sessions WHERE owner = @owner AND deleted_at IS NULL;
