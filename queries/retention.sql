-- name: RetentionPruneRuns :many
-- Marks up to lim ended runs whose details are due as pruned (done runs ended before
-- done_before, the others before failed_before), keeping their error's code but not its
-- message, and returns them. Runs another janitor holds are skipped.
WITH due AS (
    SELECT r.id FROM runs r
    WHERE r.ended_at IS NOT NULL AND r.details_pruned_at IS NULL
        AND ((r.status = 'done' AND r.ended_at < @done_before)
            OR (r.status IN ('error', 'interrupted', 'cancelled') AND r.ended_at < @failed_before))
    ORDER BY r.ended_at
    LIMIT @lim
    FOR UPDATE SKIP LOCKED
)
UPDATE runs SET details_pruned_at = @now,
    error_message = CASE WHEN runs.error_code IS NULL THEN runs.error_message END
FROM due WHERE runs.id = due.id
RETURNING runs.id;

-- name: RetentionTrimToolOutput :execrows
-- Cuts the tool output of the runs' tool messages past keep characters, with a note of
-- how much went.
UPDATE messages SET tool_output = left(tool_output, @keep::int) || E'\n[' || (length(tool_output) - @keep::int)::text || ' more characters removed after the retention period]'
WHERE run_id = ANY(@runs::uuid[]) AND role = 'tool' AND length(tool_output) > @keep::int;

-- name: RetentionMessageErrors :exec
-- Drops the error messages of the runs' messages (their codes stay).
UPDATE messages SET error_message = NULL
WHERE run_id = ANY(@runs::uuid[]) AND error_code IS NOT NULL AND error_message IS NOT NULL;

-- name: RetentionStreamLog :execrows
-- Deletes what the stream log still holds of the runs' messages.
DELETE FROM stream_log WHERE message_id IN (SELECT id FROM messages WHERE run_id = ANY(@runs::uuid[]));

-- name: RetentionIdleSessions :many
-- Up to lim live sessions with no activity since before and no active run.
SELECT s.id, s.owner FROM sessions s
WHERE s.deleted_at IS NULL AND COALESCE(s.active_at, s.created_at) < @before
    AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.session_id = s.id AND r.status IN ('running', 'awaiting_approval', 'paused'))
ORDER BY COALESCE(s.active_at, s.created_at)
LIMIT @lim;

-- name: RetentionWebhooks :execrows
-- Deletes up to lim webhook events delivered before delivered_before or given up
-- before failed_before.
DELETE FROM webhook_outbox WHERE id IN (
    SELECT w.id FROM webhook_outbox w
    WHERE (w.delivered_at IS NOT NULL AND w.delivered_at < @delivered_before)
        OR (w.failed_at IS NOT NULL AND w.failed_at < @failed_before)
    LIMIT @lim
    FOR UPDATE SKIP LOCKED
);
