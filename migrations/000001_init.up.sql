-- Sessions are conversations. owner is the authenticated user id ('' when auth is off).
CREATE TABLE sessions (
    id         uuid        PRIMARY KEY,
    owner      text        NOT NULL DEFAULT '',
    title      text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);

-- A run is one user message and everything the agent produced for it.
CREATE TABLE runs (
    id               uuid        PRIMARY KEY,
    session_id       uuid        NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    request_id       text        NOT NULL,
    status           text        NOT NULL CHECK (status IN
                         ('running', 'awaiting_approval', 'paused', 'done', 'error', 'cancelled', 'interrupted')),
    error_code       text,
    error_message    text,
    started_at       timestamptz NOT NULL,
    ended_at         timestamptz,
    last_activity_at timestamptz NOT NULL,
    input_tokens     bigint      NOT NULL DEFAULT 0,
    output_tokens    bigint      NOT NULL DEFAULT 0,
    model            text        NOT NULL DEFAULT '',
    -- The idempotency key: one run per (session, requestId), ever.
    UNIQUE (session_id, request_id)
);

-- Start-up looks for runs a dead process left behind.
CREATE INDEX runs_unfinished_idx ON runs (status)
    WHERE status IN ('running', 'awaiting_approval', 'paused');

-- The transcript. position orders a session's messages; the actor that owns the session
-- hands positions out, the unique constraint catches anyone else.
CREATE TABLE messages (
    id            uuid        PRIMARY KEY,
    session_id    uuid        NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    run_id        uuid        REFERENCES runs (id) ON DELETE SET NULL,
    position      bigint      NOT NULL,
    role          text        NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    content       text        NOT NULL DEFAULT '',
    status        text        NOT NULL CHECK (status IN
                      ('complete', 'streaming', 'cancelled', 'error', 'interrupted')),
    error_code    text,
    error_message text,
    tool_call_id  text,
    tool_name     text,
    tool_input    jsonb,
    tool_output   text,
    tool_status   text CHECK (tool_status IN
                      ('running', 'awaiting_approval', 'ok', 'error', 'denied', 'cancelled')),
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    UNIQUE (session_id, position)
);

CREATE INDEX messages_run_idx ON messages (run_id);
