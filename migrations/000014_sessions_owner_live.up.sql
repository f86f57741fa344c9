-- One user's live sessions, counted when a new one would pass CHATD_MAX_SESSIONS_PER_USER:
-- an index-only count of the owner's rows, tombstones left out. Built CONCURRENTLY, so
-- that nodes still serving during a rolling upgrade can write sessions meanwhile (the
-- statement is alone in its file: CONCURRENTLY cannot run in a transaction).
CREATE INDEX CONCURRENTLY IF NOT EXISTS sessions_owner_live_idx ON sessions (owner) WHERE deleted_at IS NULL;
