-- name: WorkspaceRecord :exec
-- The session has a new sandbox, sandbox_id ('' for none), made by node: every other
-- workspace of the session still in use is released now, and the new one is recorded.
-- Run after SessionSetSandbox in its transaction: the session's row lock, which that
-- took, makes this statement see every workspace that a concurrent one recorded.
WITH released AS (
    UPDATE workspaces SET released_at = @now
    WHERE session_id = @session_id AND released_at IS NULL AND sandbox_id <> @sandbox_id::text
)
INSERT INTO workspaces (sandbox_id, node, session_id, created_at)
SELECT @sandbox_id::text, @node::text, @session_id, @now
WHERE @sandbox_id::text <> ''
ON CONFLICT (sandbox_id) DO NOTHING;

-- name: WorkspacesReleaseDeleted :exec
-- The session is deleted: all its workspaces go, whatever the retention. Run after
-- SessionTombstone in its transaction (the row lock again: a sandbox recorded
-- concurrently is seen, and none can be recorded after).
UPDATE workspaces SET released_at = COALESCE(released_at, @deleted_at), deleted = true
WHERE session_id = @session_id;

-- name: WorkspacesDue :many
-- Up to max workspaces of node's sandboxes ('' for every node's) to remove, the longest
-- released first: those of deleted sessions, and those released no later than
-- released_before (NULL: none of those, the retention is off). A sandbox still its live
-- session's is never one, whatever its row says.
SELECT w.sandbox_id, w.session_id, w.deleted FROM workspaces w
WHERE w.released_at IS NOT NULL
    AND (w.deleted OR w.released_at <= sqlc.narg(released_before)::timestamptz)
    AND (@node::text = '' OR w.node = @node::text OR w.node = '')
    AND NOT EXISTS (
        SELECT FROM sessions s
        WHERE s.id = w.session_id AND s.sandbox_id = w.sandbox_id AND s.deleted_at IS NULL
    )
ORDER BY w.released_at
LIMIT @max;

-- name: WorkspacesOfDeletedSession :many
-- The workspaces of the deleted session that node's sandboxes ('' for every node's) had
-- and that are not removed yet.
SELECT sandbox_id FROM workspaces
WHERE session_id = @session_id AND deleted
    AND (@node::text = '' OR node = @node::text OR node = '')
ORDER BY created_at;

-- name: WorkspaceDelete :execrows
-- The workspace is removed: its record goes. Only a released one's.
DELETE FROM workspaces WHERE sandbox_id = @sandbox_id AND released_at IS NOT NULL;

-- name: SessionWorkspaceNewest :one
-- The session's newest workspace that is not removed and not its deleted session's: its
-- sandbox's now, or the last one it had.
SELECT sandbox_id, node FROM workspaces
WHERE session_id = @session_id AND NOT deleted
ORDER BY created_at DESC, sandbox_id DESC LIMIT 1;
