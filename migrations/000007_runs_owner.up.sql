-- Concurrent runs per user (CHATD_MAX_RUNS_PER_USER): the statement that starts a run
-- counts its user's active runs, across every session and process.

-- A run's owner is its session's. Copied onto the run so that the count reads one
-- user's active runs by index instead of joining every session they have.
ALTER TABLE runs ADD COLUMN owner text NOT NULL DEFAULT '';
UPDATE runs r SET owner = s.owner FROM sessions s WHERE s.id = r.session_id;
ALTER TABLE runs ALTER COLUMN owner DROP DEFAULT;

-- One user's active runs: small, whatever the table's size.
CREATE INDEX runs_owner_active_idx ON runs (owner)
    WHERE status IN ('running', 'awaiting_approval', 'paused');
