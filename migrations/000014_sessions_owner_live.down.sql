DROP INDEX IF EXISTS sessions_owner_live_idx;
