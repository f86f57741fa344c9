-- Every sandbox a session has had, until its workspace is removed. sessions.sandbox_id
-- names only the session's current sandbox: one the janitor killed, or one replaced
-- (lost, or made by another node before the session moved), was forgotten there, and
-- its workspace stayed on disk for good. A row here outlives that, so the node that
-- made the sandbox can remove its workspace: after the retention once the sandbox is
-- no longer its session's, at once when the session is deleted.
CREATE TABLE workspaces (
    -- The provider's id of the sandbox (its directory's name under CHATD_SANDBOX_DIR).
    sandbox_id text PRIMARY KEY,
    -- The node whose provider made it, '' for none known (any node's, as for
    -- sessions.sandbox_node): only that node can reach the workspace.
    node text NOT NULL DEFAULT '',
    -- No foreign key: the row must outlast whatever happens to the session's row, until
    -- the directory is gone.
    session_id uuid NOT NULL,
    created_at timestamptz NOT NULL,
    -- When the sandbox stopped being its session's (the janitor killed it, another
    -- replaced it, or the session was deleted); NULL while it is the session's. The
    -- retention counts from here.
    released_at timestamptz,
    -- The session was deleted: the workspace goes at once, whatever the retention.
    deleted boolean NOT NULL DEFAULT false
);

-- A session's workspaces: released when it gets a new sandbox or is deleted.
CREATE INDEX workspaces_session_idx ON workspaces (session_id);
-- The janitor's scan for workspaces due for removal.
CREATE INDEX workspaces_released_idx ON workspaces (released_at) WHERE released_at IS NOT NULL;

-- The sandboxes sessions have now. Those forgotten before this migration are not known.
INSERT INTO workspaces (sandbox_id, node, session_id, created_at)
SELECT sandbox_id, COALESCE(sandbox_node, ''), id, COALESCE(sandbox_used_at, updated_at)
FROM sessions WHERE sandbox_id IS NOT NULL AND deleted_at IS NULL
ON CONFLICT (sandbox_id) DO NOTHING;
