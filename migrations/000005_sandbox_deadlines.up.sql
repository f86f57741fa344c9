-- Sandbox deadlines: a session's sandbox is paused after it sat idle and killed after it
-- stayed paused, by the sandbox janitor, from these stored times, so the limits hold
-- across restarts and while no process holds the session.

-- When a tool call last started or ended on the sandbox (or it was created or resumed).
ALTER TABLE sessions ADD COLUMN sandbox_used_at timestamptz;
-- When the sandbox was paused; NULL while it runs.
ALTER TABLE sessions ADD COLUMN sandbox_paused_at timestamptz;
-- When the janitor killed the session's sandbox (and cleared sandbox_id), so the next
-- run can say why its sandbox is a new one; NULL once it has a new one.
ALTER TABLE sessions ADD COLUMN sandbox_killed_at timestamptz;

-- A sandbox in use before this migration counts as used now.
UPDATE sessions SET sandbox_used_at = now() WHERE sandbox_id IS NOT NULL;

-- The janitor's two scans: running sandboxes by last use, paused ones by pause time.
CREATE INDEX sessions_sandbox_idle ON sessions (sandbox_used_at)
    WHERE sandbox_id IS NOT NULL AND sandbox_paused_at IS NULL;
CREATE INDEX sessions_sandbox_paused ON sessions (sandbox_paused_at)
    WHERE sandbox_id IS NOT NULL AND sandbox_paused_at IS NOT NULL;
