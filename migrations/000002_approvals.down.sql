ALTER TABLE runs DROP COLUMN cancel_reason;
ALTER TABLE sessions DROP COLUMN sandbox_id;
