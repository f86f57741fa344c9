DROP TABLE queued_messages;
UPDATE runs SET cancel_reason = 'user' WHERE cancel_reason = 'new_message';
ALTER TABLE runs DROP CONSTRAINT runs_cancel_reason_check;
ALTER TABLE runs ADD CONSTRAINT runs_cancel_reason_check
    CHECK (cancel_reason IN ('user', 'abandoned', 'shutdown'));
