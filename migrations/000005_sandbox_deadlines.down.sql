DROP INDEX sessions_sandbox_paused;
DROP INDEX sessions_sandbox_idle;
ALTER TABLE sessions DROP COLUMN sandbox_killed_at;
ALTER TABLE sessions DROP COLUMN sandbox_paused_at;
ALTER TABLE sessions DROP COLUMN sandbox_used_at;
