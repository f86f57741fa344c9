DROP INDEX runs_owner_active_idx;
ALTER TABLE runs DROP COLUMN owner;
