-- The conversation list (GET /v1/sessions) and deleting a session (DELETE /v1/sessions/{id}).

-- When the session's latest run started, or was continued by a person: the list's order
-- and its updatedAt. NULL until the first run, so a session a hello created and nobody
-- wrote to stays out of the list. Set by the statement that stores the run.
ALTER TABLE sessions ADD COLUMN active_at timestamptz;
-- Set when the session was deleted: its runs and messages are gone and this row stays as
-- a tombstone, so the id is never used again (a hello with it is refused).
ALTER TABLE sessions ADD COLUMN deleted_at timestamptz;

-- Sessions written to before this migration were last active at their last run start,
-- which updated_at holds.
UPDATE sessions s SET active_at = s.updated_at
WHERE EXISTS (SELECT 1 FROM runs r WHERE r.session_id = s.id);

-- Sessions written to before this migration are titled from their first user message,
-- as new ones are (chat.SessionTitle: white space collapsed, 80 characters, then "…").
UPDATE sessions s SET title = CASE WHEN char_length(f.t) > 80
        THEN rtrim(left(f.t, 80)) || '…' ELSE f.t END
FROM (SELECT DISTINCT ON (session_id) session_id,
             btrim(regexp_replace(content, '\s+', ' ', 'g')) AS t
      FROM messages WHERE role = 'user' ORDER BY session_id, position) f
WHERE s.id = f.session_id AND s.title = '' AND f.t <> '';

-- The list: one user's live sessions, most recently active first, read by keyset. It
-- never scans another user's rows.
CREATE INDEX sessions_list_idx ON sessions (owner, active_at DESC, id DESC)
    WHERE deleted_at IS NULL AND active_at IS NOT NULL;

-- A session's runs, newest first: the list's latest run of each session, and RunLatest.
CREATE INDEX runs_session_started_idx ON runs (session_id, started_at DESC, id DESC);
