-- A message sent mid-run with the interrupt policy cancels the active run: its
-- cancel_reason says so (new_message).
ALTER TABLE runs DROP CONSTRAINT runs_cancel_reason_check;
ALTER TABLE runs ADD CONSTRAINT runs_cancel_reason_check
    CHECK (cancel_reason IN ('user', 'abandoned', 'shutdown', 'new_message'));
