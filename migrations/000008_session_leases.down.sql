ALTER TABLE sessions DROP COLUMN sandbox_node;
DROP INDEX sessions_lease_node_idx;
ALTER TABLE sessions DROP COLUMN lease_token;
ALTER TABLE sessions DROP COLUMN lease_expires_at;
ALTER TABLE sessions DROP COLUMN lease_addr;
ALTER TABLE sessions DROP COLUMN lease_node;
