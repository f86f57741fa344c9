-- One user's live sessions, counted when a new one would pass CHATD_MAX_SESSIONS_PER_USER:
-- an index-only count of the owner's rows, tombstones left out.
CREATE INDEX sessions_owner_live_idx ON sessions (owner) WHERE deleted_at IS NULL;
