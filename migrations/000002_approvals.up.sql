-- The session's sandbox, reused by its later runs (issue: agent runs).
ALTER TABLE sessions ADD COLUMN sandbox_id text;

-- Why a run was cancelled or interrupted: by a user, abandoned with nobody watching, or
-- by a server shutdown. NULL for runs that ended otherwise (or died with the process).
ALTER TABLE runs ADD COLUMN cancel_reason text
    CHECK (cancel_reason IN ('user', 'abandoned', 'shutdown'));
