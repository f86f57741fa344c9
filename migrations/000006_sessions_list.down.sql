DROP INDEX runs_session_started_idx;
DROP INDEX sessions_list_idx;
ALTER TABLE sessions DROP COLUMN deleted_at;
ALTER TABLE sessions DROP COLUMN active_at;
