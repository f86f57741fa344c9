-- A message sent mid-run with the interrupt policy cancels the active run: its
-- cancel_reason says so (new_message).
ALTER TABLE runs DROP CONSTRAINT runs_cancel_reason_check;
ALTER TABLE runs ADD CONSTRAINT runs_cancel_reason_check
    CHECK (cancel_reason IN ('user', 'abandoned', 'shutdown', 'new_message'));

-- Messages sent with the queue policy wait here, in order, until the run before them
-- ends; each then starts its run (and its row goes) under its own request id.
CREATE TABLE queued_messages (
    session_id uuid        NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    request_id text        NOT NULL,
    content    text        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, request_id)
);
