DROP INDEX sessions_idle_idx;
DROP INDEX runs_prune_idx;
ALTER TABLE runs DROP COLUMN details_pruned_at;
