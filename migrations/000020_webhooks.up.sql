-- Webhooks' outbox: an event (a run that completed, failed, was cancelled or waits for a
-- person) is inserted by the statement that stores the run's new status, so an event
-- exists exactly when its state change does; the delivery service sends it at least
-- once. id is the event's webhook-id (kept on redelivery); payload the whole body sent.
-- A node claims a row by setting locked_until (FOR UPDATE SKIP LOCKED): one node sends
-- each at a time, and a node that dies mid-delivery leaves it to another once the claim
-- expires.
CREATE TABLE webhook_outbox (
    id uuid PRIMARY KEY,
    owner text NOT NULL,
    session_id uuid NOT NULL,
    run_id uuid NOT NULL,
    type text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    locked_until timestamptz,
    last_error text NOT NULL DEFAULT '',
    delivered_at timestamptz,
    failed_at timestamptz
);
CREATE INDEX webhook_outbox_due_idx ON webhook_outbox (next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
CREATE INDEX webhook_outbox_owner_idx ON webhook_outbox (owner);
CREATE INDEX webhook_outbox_session_idx ON webhook_outbox (session_id);
