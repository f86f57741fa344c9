-- A session's lease moves out of the session's row (000008) into a row of its own, so
-- that the lease's statements and the actors' writes take row locks that cannot wait
-- on each other in a cycle:
--
--   - every fenced write checks its token with FOR KEY SHARE on the lease row;
--   - a renewal is a plain UPDATE of expires_at, which takes FOR NO KEY UPDATE: it does
--     not conflict with FOR KEY SHARE, so renewals never wait for the actors' writes,
--     whose batches (store/group.go) hold their locks on many sessions until they
--     commit; with the lease in sessions, a batch's FOR SHARE and a renewal's UPDATE of
--     the same rows in another order deadlocked;
--   - an acquisition locks its one lease row FOR UPDATE, which does conflict with FOR
--     KEY SHARE: it waits for the fenced writes in flight, and every fenced write after
--     it sees the new token.
--
-- The writes that update the session's row (a run's start marks it active) no longer
-- meet the lease's statements at all.
CREATE TABLE session_leases (
    -- Every session has its row from its creation: the statements that create a
    -- session (SessionInsert, SessionForClientID) create it in the same statement.
    session_id uuid PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    -- The node holding the lease (CHATD_NODE_ID, by default its address) and where other nodes reach
    -- it (host:port of its listener), until expires_at, by the database's clock; all
    -- NULL when no node holds it.
    node text,
    addr text,
    expires_at timestamptz,
    -- The fencing token: it grows on every acquisition, and a write carries the token
    -- its actor acquired. A write whose token is not the session's current one is
    -- refused. A release leaves it as it is.
    token bigint NOT NULL DEFAULT 0
);

INSERT INTO session_leases (session_id, node, addr, expires_at, token)
SELECT id, lease_node, lease_addr, lease_expires_at, lease_token FROM sessions;

-- A node releases all its leases by node at shutdown, and a rescue pass looks for its
-- own previous life's; a renewal finds its rows by session id.
CREATE INDEX session_leases_node_idx ON session_leases (node) WHERE node IS NOT NULL;

DROP INDEX sessions_lease_node_idx;
ALTER TABLE sessions
    DROP COLUMN lease_node,
    DROP COLUMN lease_addr,
    DROP COLUMN lease_expires_at,
    DROP COLUMN lease_token;

-- The highest message position of a session (0 for none), read with a snapshot of its
-- own. A statement that acquires a lease may have waited for the previous holder's
-- fenced writes (FOR UPDATE above); its own snapshot, taken before the wait, does not
-- show what they stored, so a new holder reading the position there would reuse one.
-- A VOLATILE function takes a fresh snapshot for each query it runs (and one with a
-- FROM clause is never inlined), so called after the lock it sees those writes.
CREATE FUNCTION session_position_max(session_id uuid) RETURNS bigint
    LANGUAGE sql VOLATILE
    AS $$ SELECT COALESCE(max(m.position), 0)::bigint FROM messages m WHERE m.session_id = $1 $$;
