ALTER TABLE runs ADD COLUMN superseded_by uuid REFERENCES runs (id);
ALTER TABLE sessions DROP COLUMN active_leaf;
DROP INDEX messages_parent_idx;
ALTER TABLE messages DROP COLUMN parent_id;
