DROP FUNCTION session_position_max(uuid);
ALTER TABLE sessions
    ADD COLUMN lease_node text,
    ADD COLUMN lease_addr text,
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN lease_token bigint NOT NULL DEFAULT 0;
UPDATE sessions s SET lease_node = l.node, lease_addr = l.addr, lease_expires_at = l.expires_at, lease_token = l.token
FROM session_leases l WHERE l.session_id = s.id;
CREATE INDEX sessions_lease_node_idx ON sessions (lease_node) WHERE lease_node IS NOT NULL;
DROP TABLE session_leases;
