-- Several chatd nodes on one database: each session is owned by one node at a time, by
-- a lease. Only the node holding a session's lease runs its actor, and every write the
-- actor makes is fenced by the lease's token, so a node that lost the lease (paused,
-- partitioned, slow) cannot write a row afterwards, whatever it believes.

-- The node holding the lease (CHATD_NODE_ID, by default its address) and where other nodes reach it
-- (host:port of its listener), until lease_expires_at; all NULL when no node holds it.
ALTER TABLE sessions ADD COLUMN lease_node text;
ALTER TABLE sessions ADD COLUMN lease_addr text;
ALTER TABLE sessions ADD COLUMN lease_expires_at timestamptz;
-- The fencing token: it grows on every acquisition, and a write carries the token its
-- actor acquired. A write whose token is not the session's current one is refused.
ALTER TABLE sessions ADD COLUMN lease_token bigint NOT NULL DEFAULT 0;

-- A node renews, and at shutdown releases, all its leases by node.
CREATE INDEX sessions_lease_node_idx ON sessions (lease_node) WHERE lease_node IS NOT NULL;

-- The node that created a session's sandbox: sandboxes are per node, and a node's
-- janitor acts only on its own.
ALTER TABLE sessions ADD COLUMN sandbox_node text;
