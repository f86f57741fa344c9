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
