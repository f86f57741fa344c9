-- name: StreamLogSync :exec
-- One interval of a node's stream log, in one statement: the chunks of text its sessions
-- streamed since the last one, and the removal of the chunks of messages whose final
-- text is stored now. Each chunk is fenced like every write of its session's actor (a
-- fence of 0 is none, and the lock is that of every fenced write, see leases.sql): a node
-- that lost a session's lease adds nothing to its log. A chunk already there (a retry of
-- an interval whose answer was lost) is left as it is.
WITH done AS (
    DELETE FROM stream_log WHERE stream_log.message_id = ANY(@done::uuid[])
)
INSERT INTO stream_log (message_id, start_offset, text)
SELECT c.message_id, c.start_offset, c.text
FROM (
    SELECT unnest(@message_ids::uuid[]) AS message_id, unnest(@offsets::int[]) AS start_offset,
        unnest(@texts::text[]) AS text, unnest(@session_ids::uuid[]) AS session_id,
        unnest(@fences::bigint[]) AS fence
) c
WHERE c.fence = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = c.session_id AND f.token = c.fence FOR KEY SHARE)
ON CONFLICT (message_id, start_offset) DO NOTHING;

-- name: StreamLogRead :many
-- The logged chunks of messages, in order.
SELECT message_id, start_offset, text FROM stream_log
WHERE message_id = ANY(@message_ids::uuid[])
ORDER BY message_id, start_offset;

-- name: StreamLogDeleteBySession :exec
-- A deleted session's log, with its messages (before they are deleted).
DELETE FROM stream_log WHERE message_id IN (SELECT m.id FROM messages m WHERE m.session_id = @session_id);

-- name: StreamLogCollect :execrows
-- Chunks no message needs: their message is no longer streaming (its final text is
-- stored) or was never stored, and they are older than a run's rows can lag behind.
DELETE FROM stream_log s
WHERE s.logged_at < now() - make_interval(secs => @older_than::float8)
    AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = s.message_id AND m.status = 'streaming');
