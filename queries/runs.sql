-- name: RunStart :one
-- Stores a run and its user message, and marks the session active (and titles it from
-- its first message, unless a person named it) with the message as its active leaf
-- (a new message, or an edit, is what its tabs show next), in one statement: a run never exists
-- without its user message, and the storage rule costs one round trip. A deleted session
-- takes neither (stored 0): a process that still holds it cannot bring it back. Neither
-- does a session whose owner has max_active runs active already (0: no limit); active is
-- how many they had. Exact when the caller holds the owner's RunOwnerLock: this
-- statement's snapshot cannot see a start that commits while it runs.
WITH active AS (
    SELECT count(*) AS n FROM runs
    WHERE @max_active::int > 0
        AND runs.owner = (SELECT s.owner FROM sessions s WHERE s.id = @session_id)
        AND runs.status IN ('running', 'awaiting_approval', 'paused')
), touched AS (
    UPDATE sessions
    SET updated_at = @started_at, active_at = @started_at,
        title = CASE WHEN sessions.title = '' THEN @title::text ELSE sessions.title END,
        active_leaf = @message_id::uuid
    WHERE sessions.id = @session_id AND sessions.deleted_at IS NULL
        AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = sessions.id AND f.token = @fence FOR KEY SHARE))
        AND (@max_active::int <= 0 OR (SELECT n FROM active) < @max_active::int)
    RETURNING sessions.id, sessions.owner
), new_run AS (
    INSERT INTO runs (id, session_id, owner, request_id, status, started_at, last_activity_at, model)
    SELECT @run_id::uuid, touched.id, touched.owner, @request_id::text, 'running', @started_at, @started_at, @model::text
    FROM touched
), new_message AS (
    INSERT INTO messages (id, session_id, run_id, parent_id, position, role, content, status, created_at, updated_at)
    SELECT @message_id::uuid, touched.id, @run_id::uuid, sqlc.narg(parent_id)::uuid, @position::bigint, 'user', @content::text, 'complete',
        @message_created_at::timestamptz, @message_created_at::timestamptz
    FROM touched
    RETURNING 1
)
SELECT (SELECT count(*) FROM new_message)::bigint AS stored, (SELECT n FROM active)::bigint AS active;

-- name: RunOwnerLock :exec
-- Serializes the run starts of the session's owner, on every process, until the
-- transaction ends: the limit's count (RunStart, RunInsertRetry, RunContinue) then sees
-- every start before it. Another owner whose key collides only waits its turn.
SELECT pg_advisory_xact_lock(hashtextextended('chatd.runs.' || owner, 0))
FROM sessions WHERE id = @session_id;

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
    progress_step = @progress_step,
    progress_of = @progress_of,
    progress_label = @progress_label,
    agent_state = sqlc.narg(agent_state)::jsonb,
    cancel_reason = @cancel_reason,
    recoveries = @recoveries,
    dismissed_at = @dismissed_at,
    resume_request_ids = @resume_request_ids::text[]
WHERE runs.id = @id AND runs.status = ANY(@from_statuses::text[])
    AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = runs.session_id AND f.token = @fence FOR KEY SHARE));

-- name: RunUpdateEvent :one
-- RunUpdate that also queues a webhook event (webhook_outbox) in the same statement,
-- when the write changes the run's status: a run's change and its event are stored
-- together or not at all, and a status written again queues nothing.
WITH old AS (
    SELECT r.status FROM runs r WHERE r.id = @id
), updated AS (
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
        progress_step = @progress_step,
        progress_of = @progress_of,
        progress_label = @progress_label,
        agent_state = sqlc.narg(agent_state)::jsonb,
        cancel_reason = @cancel_reason,
        recoveries = @recoveries,
        dismissed_at = @dismissed_at,
        resume_request_ids = @resume_request_ids::text[]
    WHERE runs.id = @id AND runs.status = ANY(@from_statuses::text[])
        AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = runs.session_id AND f.token = @fence FOR KEY SHARE))
    RETURNING runs.id, runs.session_id, runs.owner, runs.status
), event AS (
    INSERT INTO webhook_outbox (id, owner, session_id, run_id, type, payload, created_at, next_attempt_at)
    SELECT @event_id::uuid, u.owner, u.session_id, u.id, @event_type::text, @event_payload::jsonb, @event_at::timestamptz, @event_at::timestamptz
    FROM updated u, old
    WHERE old.status IS DISTINCT FROM u.status
    RETURNING 1
)
SELECT count(*)::bigint AS n FROM updated;

-- name: RunLatest :one
-- The session's newest run.
SELECT * FROM runs WHERE session_id = @session_id ORDER BY started_at DESC, id DESC LIMIT 1;

-- name: SessionAgentState :one
-- The state an agent last reported in the session: its newest run's that has one.
SELECT agent_state FROM runs
WHERE session_id = @session_id AND agent_state IS NOT NULL
ORDER BY started_at DESC, id DESC LIMIT 1;

-- name: RunInsertRetry :one
-- Stores a run that answers the user message of the run it retries (it has none of its
-- own: its answer is a new branch under that message, which becomes the session's
-- active leaf), and marks the session active, in one statement; nothing for a deleted
-- session, or past the owner's limit of active runs (see RunStart).
WITH active AS (
    SELECT count(*) AS n FROM runs
    WHERE @max_active::int > 0
        AND runs.owner = (SELECT s.owner FROM sessions s WHERE s.id = @session_id)
        AND runs.status IN ('running', 'awaiting_approval', 'paused')
), touched AS (
    UPDATE sessions SET updated_at = @started_at, active_at = @started_at, active_leaf = @leaf::uuid
    WHERE sessions.id = @session_id AND sessions.deleted_at IS NULL
        AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = sessions.id AND f.token = @fence FOR KEY SHARE))
        AND (@max_active::int <= 0 OR (SELECT n FROM active) < @max_active::int)
    RETURNING sessions.id, sessions.owner
), new_run AS (
    INSERT INTO runs (id, session_id, owner, request_id, status, started_at, last_activity_at, model, retry_of)
    SELECT @run_id::uuid, touched.id, touched.owner, @request_id::text, 'running', @started_at, @started_at, @model::text,
        sqlc.narg(retry_of)::uuid
    FROM touched
    RETURNING 1
)
SELECT (SELECT count(*) FROM new_run)::bigint AS stored, (SELECT n FROM active)::bigint AS active;

-- name: RunContinue :one
-- RunUpdate for a run a person continued (chat.resume): the session is marked active in
-- the same statement, so the conversation list shows it first at no extra round trip.
-- moved counts the sessions marked, which is the runs moved (0: stale or gone, or the
-- owner has max_active runs active already, which active counts; see RunStart).
WITH active AS (
    SELECT count(*) AS n FROM runs
    WHERE @max_active::int > 0
        AND runs.owner = (SELECT r.owner FROM runs r WHERE r.id = @id)
        AND runs.status IN ('running', 'awaiting_approval', 'paused')
), moved AS (
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
        progress_step = @progress_step,
        progress_of = @progress_of,
        progress_label = @progress_label,
        agent_state = sqlc.narg(agent_state)::jsonb,
        cancel_reason = @cancel_reason,
        recoveries = @recoveries,
        dismissed_at = @dismissed_at,
        resume_request_ids = @resume_request_ids::text[]
    WHERE runs.id = @id AND runs.status = ANY(@from_statuses::text[])
        AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = runs.session_id AND f.token = @fence FOR KEY SHARE))
        AND (@max_active::int <= 0 OR (SELECT n FROM active) < @max_active::int)
    RETURNING runs.session_id, runs.last_activity_at
), marked AS (
    UPDATE sessions SET active_at = moved.last_activity_at
    FROM moved WHERE sessions.id = moved.session_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM marked)::bigint AS moved, (SELECT n FROM active)::bigint AS active;

-- name: RunsLockBySession :exec
-- Deleting a session locks its runs first: a message a process inserts for one of them
-- meanwhile either committed before (and is deleted with the rest) or waits and then
-- finds its run gone.
SELECT id FROM runs WHERE session_id = @session_id FOR UPDATE;

-- name: RunsDeleteBySession :exec
DELETE FROM runs WHERE session_id = @session_id;

-- name: RunsPage :many
-- A page of the session's runs, newest first, of the given statuses (none: all), before
-- the cursor (started_at, id) when one is given.
SELECT * FROM runs
WHERE session_id = @session_id
    AND (cardinality(@statuses::text[]) = 0 OR status = ANY(@statuses::text[]))
    AND (NOT @paged::boolean OR (started_at, id) < (@before_started::timestamptz, @before_id::uuid))
ORDER BY started_at DESC, id DESC
LIMIT @lim;
