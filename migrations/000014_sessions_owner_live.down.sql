DROP INDEX CONCURRENTLY IF EXISTS sessions_owner_live_idx;
