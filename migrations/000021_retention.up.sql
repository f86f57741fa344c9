-- Retention (docs/retention.md). details_pruned_at is when the janitor removed an ended
-- run's details (its error message, tool output past the kept size, stream-log
-- remnants): a run is pruned once. The indexes serve the janitor's scans.
ALTER TABLE runs ADD COLUMN details_pruned_at timestamptz;
CREATE INDEX runs_prune_idx ON runs (ended_at) WHERE ended_at IS NOT NULL AND details_pruned_at IS NULL;
CREATE INDEX sessions_idle_idx ON sessions ((COALESCE(active_at, created_at))) WHERE deleted_at IS NULL;
