ALTER TABLE runs DROP COLUMN superseded_by;
ALTER TABLE runs DROP COLUMN retry_of;
ALTER TABLE runs DROP COLUMN resume_request_ids;
ALTER TABLE runs DROP COLUMN dismissed_at;
ALTER TABLE runs DROP COLUMN recoveries;
UPDATE messages SET tool_status = 'cancelled' WHERE tool_status = 'interrupted';
ALTER TABLE messages DROP CONSTRAINT messages_tool_status_check;
ALTER TABLE messages ADD CONSTRAINT messages_tool_status_check CHECK (tool_status IN
    ('running', 'awaiting_approval', 'ok', 'error', 'denied', 'cancelled'));
