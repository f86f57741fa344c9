-- name: QueuedInsert :execrows
-- Fenced like every write of an actor (messages.sql). A request id already queued is
-- left as it is.
INSERT INTO queued_messages (session_id, request_id, content, created_at)
SELECT @session_id, @request_id, @content, @created_at
WHERE (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = @session_id AND f.token = @fence FOR KEY SHARE))
ON CONFLICT DO NOTHING;

-- name: QueuedDelete :execrows
DELETE FROM queued_messages
WHERE queued_messages.session_id = @session_id AND queued_messages.request_id = @request_id
    AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = queued_messages.session_id AND f.token = @fence FOR KEY SHARE));

-- name: QueuedList :many
SELECT * FROM queued_messages WHERE session_id = @session_id ORDER BY created_at, request_id;
