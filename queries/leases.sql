-- name: SessionOpen :one
-- The session as an actor opens it, in one statement: its row, its highest message
-- position, whether its active leaf has children (a branch started under it), the request ids of its newest runs (request_ids of them, unless the session
-- is another owner's), and, when node is not '', its lease taken for node, unless another node
-- holds a live one, the session is a tombstone, or check_owner is set and the session
-- is another owner's; then nothing changes. No row: the session does not exist.
--
-- The acquisition locks the lease row FOR UPDATE before it updates it: a plain UPDATE
-- would take FOR NO KEY UPDATE, which does not wait for the fenced writes in flight
-- (FOR KEY SHARE). After the wait it re-reads the row (READ COMMITTED), so a lease
-- taken or renewed meanwhile is judged as it is now. The token grows on every
-- acquisition, so the writes of whoever held it before are refused from then on.
-- prev_node is the holder it replaced ('' when none). The position is read by
-- session_position_max after the acquisition (the joins come before the projection),
-- with a snapshot of its own, so it counts the writes the lock waited for.
--
-- Leases live in session_leases, one row per session (migration 000010). Their row
-- locks are chosen so that nothing here waits on an actor's writes in a cycle:
--
--   statement                         lock on the lease row   waits for
--   a fenced write (messages.sql,     FOR KEY SHARE           an acquisition in flight
--     runs.sql)
--   SessionOpen's acquisition         FOR UPDATE              fenced writes in flight
--   LeaseRenew, LeaseRelease          FOR NO KEY UPDATE       an acquisition in flight
--                                       (a plain UPDATE)
--
-- FOR KEY SHARE and FOR NO KEY UPDATE do not conflict: a renewal never waits for a
-- grouped batch of writes (store/group.go), which holds its locks on many sessions
-- until it commits, and a batch never waits for a renewal. An acquisition locks one
-- row, and holds no other lock while it waits, so it cannot close a cycle either.
-- Expiry is judged by the database's clock (now()), never a node's.
WITH locked AS (
    SELECT l.session_id, l.node FROM session_leases l
    JOIN sessions s ON s.id = l.session_id
    WHERE l.session_id = @id AND @node::text <> ''
        AND s.deleted_at IS NULL
        AND (NOT @check_owner::bool OR s.owner = @owner::text)
        AND (l.node IS NULL OR l.node = @node::text OR l.expires_at <= now())
    FOR UPDATE OF l
), taken AS (
    UPDATE session_leases l
    SET node = @node::text, addr = @addr::text, expires_at = now() + @ttl::interval, token = l.token + 1
    FROM locked WHERE l.session_id = locked.session_id
    RETURNING l.session_id, l.node, l.addr, l.expires_at, l.token, locked.node AS prev_node
)
SELECT sqlc.embed(s),
    (cur.session_id IS NOT NULL)::bool AS has_lease,
    (t.session_id IS NOT NULL)::bool AS acquired,
    COALESCE(t.prev_node, '')::text AS prev_node,
    COALESCE(t.node, cur.node, '')::text AS lease_node,
    COALESCE(t.addr, cur.addr, '')::text AS lease_addr,
    COALESCE(t.expires_at, cur.expires_at) AS lease_expires_at,
    COALESCE(t.token, cur.token, 0)::bigint AS lease_token,
    COALESCE(t.session_id IS NOT NULL OR (cur.node IS NOT NULL AND cur.expires_at > now()), false)::bool AS lease_live,
    session_position_max(s.id)::bigint AS max_position,
    EXISTS (SELECT 1 FROM messages c WHERE c.session_id = s.id
        AND (c.parent_id = s.active_leaf OR (s.active_leaf IS NULL AND c.parent_id IS NULL)))::bool AS leaf_has_children,
    (CASE WHEN @request_ids::int > 0 AND (NOT @check_owner::bool OR s.owner = @owner::text)
        THEN session_request_ids(s.id, @request_ids::int) ELSE '{}' END)::text[] AS request_ids
FROM sessions s
LEFT JOIN session_leases cur ON cur.session_id = s.id
LEFT JOIN taken t ON t.session_id = s.id
WHERE s.id = @id;

-- name: LeaseGet :one
-- Who holds the session's lease, if anyone, and whether it is live now.
SELECT node, addr, expires_at, token, (node IS NOT NULL AND expires_at > now())::bool AS live
FROM session_leases WHERE session_id = @id;

-- name: LeaseRenew :many
-- Extends the leases node's actors hold (ids with their tokens) to now + ttl, in one
-- statement whatever their number, and returns those it extended. A lease the node
-- believes it holds that is not among them was taken over. Only those: a lease whose
-- actor is gone (it stopped as moved, or its release failed) expires on its own. An
-- expired lease nobody took is extended too: its holder never stopped writing under it.
-- A plain UPDATE of a column that is no key: FOR NO KEY UPDATE, which the fenced
-- writes' FOR KEY SHARE does not wait for, nor it for them.
UPDATE session_leases SET expires_at = now() + @ttl::interval
WHERE node = @node::text
    AND (session_id, token) IN (SELECT unnest(@ids::uuid[]), unnest(@tokens::bigint[]))
RETURNING session_id, token;

-- name: LeaseRelease :execrows
-- Gives one lease back (its actor stopped), unless another acquisition came since. The
-- token stays: it only grows.
UPDATE session_leases SET node = NULL, addr = NULL, expires_at = NULL
WHERE session_id = @id AND node = @node::text AND token = @token;

-- name: SessionsToRescue :many
-- Sessions with a run that streams (running: an agent must drive it) and no live lease:
-- their node died or shut down. Runs waiting for a person (awaiting_approval, paused)
-- wait on, and are taken up by the next hello, unless waiting is set (runs are not
-- continued: each is ended as interrupted instead). own, when not '', also names the node's
-- own leases: at its start-up, those of its previous life. The partial index of
-- unfinished runs keeps this to the runs in progress.
SELECT DISTINCT r.session_id FROM runs r
JOIN sessions s ON s.id = r.session_id
JOIN session_leases l ON l.session_id = r.session_id
WHERE (r.status = 'running' OR (@waiting::bool AND r.status IN ('awaiting_approval', 'paused')))
    AND s.deleted_at IS NULL
    AND (l.node IS NULL OR l.expires_at <= now() OR l.node = @own::text)
LIMIT @max_rows;
