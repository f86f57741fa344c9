-- An assistant message is either text or the model's reasoning ("thinking"), each its own
-- segment.
ALTER TABLE messages ADD COLUMN kind text NOT NULL DEFAULT 'text'
    CHECK (kind IN ('text', 'reasoning'));

-- What a provider needs back with a message and clients do not: a reasoning block's
-- signature, a redacted reasoning block's data.
ALTER TABLE messages ADD COLUMN provider_data jsonb;

-- How full the model's context window is: the input tokens of the run's latest model call,
-- and the window they count against.
ALTER TABLE runs ADD COLUMN context_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN context_window bigint NOT NULL DEFAULT 0;
