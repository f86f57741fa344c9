-- Who decided a tool call's approval, when, and through which transport (or the rule that
-- approved it, or its expiry): {"approved", "by", "at", "via", "ruleId"}. NULL for calls
-- that needed no approval and for those decided before this column.
ALTER TABLE messages ADD COLUMN IF NOT EXISTS tool_decision jsonb;

-- "Allow for this conversation": a session's standing approvals. A later call of tool
-- (of a shell tool: whose command's first word is command) runs without asking.
CREATE TABLE IF NOT EXISTS approval_rules (
    id           uuid        PRIMARY KEY,
    session_id   uuid        NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    tool         text        NOT NULL,
    command      text,
    created_by   text        NOT NULL,
    created_via  text        NOT NULL,
    tool_call_id text        NOT NULL,
    created_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS approval_rules_session_idx ON approval_rules (session_id, created_at);
