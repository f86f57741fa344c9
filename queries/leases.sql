-- name: LeaseAcquire :one
-- Takes the session's lease for node, until expires_at, unless another node holds a
-- lease that has not expired at now. The token grows on every acquisition, so the
-- writes of whoever held it before are refused from now on. No row: another node holds
-- it, or the session does not exist (LeaseGet tells them apart).
UPDATE sessions
SET lease_node = @node, lease_addr = @addr, lease_expires_at = @expires_at,
    lease_token = lease_token + 1
WHERE id = @id AND (lease_node IS NULL OR lease_node = @node OR lease_expires_at <= @now)
RETURNING *;

-- name: LeaseGet :one
-- Who holds the session's lease, if anyone.
SELECT lease_node, lease_addr, lease_expires_at, lease_token FROM sessions WHERE id = @id;

-- name: LeaseRenew :many
-- Extends the leases node's actors hold (ids with their tokens), in one statement
-- whatever their number, and returns those it extended. A lease the node believes it
-- holds that is not among them was taken over. Only those: a lease whose actor is gone
-- (it stopped as moved, or its release failed) expires on its own.
UPDATE sessions SET lease_expires_at = @expires_at
WHERE lease_node = @node
    AND (id, lease_token) IN (SELECT unnest(@ids::uuid[]), unnest(@tokens::bigint[]))
RETURNING id, lease_token;

-- name: LeaseRelease :execrows
-- Gives one lease back (its actor stopped), unless another acquisition came since.
UPDATE sessions SET lease_node = NULL, lease_addr = NULL, lease_expires_at = NULL
WHERE id = @id AND lease_node = @node AND lease_token = @token;

-- name: LeaseReleaseAll :execrows
-- Gives back every lease node holds: a node that shuts down lets others take its
-- sessions at once instead of after the lease's time.
UPDATE sessions SET lease_node = NULL, lease_addr = NULL, lease_expires_at = NULL
WHERE lease_node = @node;

-- name: SessionsToRescue :many
-- Sessions with a run that streams (running: an agent must drive it) and no live lease:
-- their node died or shut down. Runs waiting for a person (awaiting_approval, paused)
-- wait on, and are taken up by the next hello, unless waiting is set (runs are not
-- continued: each is ended as interrupted instead). own, when not '', also names the node's
-- own leases: at its start-up, those of its previous life. The partial index of
-- unfinished runs keeps this to the runs in progress.
SELECT DISTINCT r.session_id FROM runs r JOIN sessions s ON s.id = r.session_id
WHERE (r.status = 'running' OR (@waiting::bool AND r.status IN ('awaiting_approval', 'paused')))
    AND s.deleted_at IS NULL
    AND (s.lease_node IS NULL OR s.lease_expires_at <= @now OR s.lease_node = @own::text)
LIMIT @max_rows;
