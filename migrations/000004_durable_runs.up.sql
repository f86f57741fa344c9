-- Durable runs: a run can be continued from its stored transcript by any process.

-- A tool call that was running when its process died: its effects are unknown.
ALTER TABLE messages DROP CONSTRAINT messages_tool_status_check;
ALTER TABLE messages ADD CONSTRAINT messages_tool_status_check CHECK (tool_status IN
    ('running', 'awaiting_approval', 'ok', 'error', 'denied', 'cancelled', 'interrupted'));

-- How many times the run was continued after its process died (a crash loop ends it).
ALTER TABLE runs ADD COLUMN recoveries integer NOT NULL DEFAULT 0;
-- When a person chose to keep an interrupted, failed or cancelled run as it is.
ALTER TABLE runs ADD COLUMN dismissed_at timestamptz;
-- The requestIds of the chat.resumes that continued the run: their idempotency keys.
ALTER TABLE runs ADD COLUMN resume_request_ids text[] NOT NULL DEFAULT '{}';

-- chat.resume's retry: a new run answers the user message of the run it retries, whose
-- answer stays in the transcript but is left out of the model's context.
ALTER TABLE runs ADD COLUMN retry_of uuid REFERENCES runs (id);
ALTER TABLE runs ADD COLUMN superseded_by uuid REFERENCES runs (id);
