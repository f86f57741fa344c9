DROP INDEX sessions_client_id_idx;
ALTER TABLE sessions DROP COLUMN client_id;
