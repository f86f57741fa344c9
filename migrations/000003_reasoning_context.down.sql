ALTER TABLE runs DROP COLUMN context_window;
ALTER TABLE runs DROP COLUMN context_tokens;
ALTER TABLE messages DROP COLUMN provider_data;
ALTER TABLE messages DROP COLUMN kind;
