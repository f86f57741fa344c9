-- name: WebhookClaim :many
-- Claims up to lim events due at now for this node until locked_until: one node sends
-- each at a time; a claim that expires (its node died mid-delivery) is claimed again.
UPDATE webhook_outbox SET locked_until = @locked_until, attempts = attempts + 1
WHERE id IN (
    SELECT w.id FROM webhook_outbox w
    WHERE w.delivered_at IS NULL AND w.failed_at IS NULL AND w.next_attempt_at <= @now
        AND (w.locked_until IS NULL OR w.locked_until <= @now)
    ORDER BY w.next_attempt_at, w.created_at
    LIMIT @lim
    FOR UPDATE SKIP LOCKED
)
RETURNING id, run_id, type, payload, attempts, created_at;

-- name: WebhookDelivered :exec
UPDATE webhook_outbox SET delivered_at = @at, locked_until = NULL, last_error = '' WHERE id = @id;

-- name: WebhookRetry :exec
-- A failed attempt: tried again at next, or, with give_up, never again.
UPDATE webhook_outbox
SET locked_until = NULL, last_error = @last_error, next_attempt_at = @next,
    failed_at = CASE WHEN @give_up::boolean THEN @at::timestamptz END
WHERE id = @id;

-- name: WebhookStats :one
SELECT
    count(*) FILTER (WHERE delivered_at IS NULL AND failed_at IS NULL)::bigint AS pending,
    count(*) FILTER (WHERE delivered_at IS NOT NULL)::bigint AS delivered,
    count(*) FILTER (WHERE failed_at IS NOT NULL)::bigint AS failed
FROM webhook_outbox;

-- name: WebhookRecent :many
-- The newest events not delivered (pending or given up), for the admin listener.
SELECT id, run_id, type, attempts, created_at, next_attempt_at, last_error, failed_at
FROM webhook_outbox WHERE delivered_at IS NULL
ORDER BY created_at DESC LIMIT @lim;
