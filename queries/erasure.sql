-- name: OwnerLiveSessions :many
-- The owner's sessions that are not deleted.
SELECT id FROM sessions WHERE owner = @owner AND deleted_at IS NULL ORDER BY created_at;

-- name: EraseOwnerStreamLog :execrows
DELETE FROM stream_log WHERE message_id IN (
    SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id WHERE s.owner = @owner
);

-- name: EraseOwnerWebhooks :execrows
DELETE FROM webhook_outbox WHERE owner = @owner;

-- name: EraseOwnerRuns :execrows
-- Runs of the owner that no session of theirs holds any more.
DELETE FROM runs WHERE owner = @owner;

-- name: EraseOwnerSessions :execrows
-- Every session row of the owner, tombstones included, with (by cascade) their runs,
-- messages, leases, rules and queued messages. Their workspaces' rows stay until each
-- node's janitor has removed the directories they name (they hold no user data).
DELETE FROM sessions WHERE owner = @owner;
