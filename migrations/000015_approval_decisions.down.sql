DROP TABLE IF EXISTS approval_rules;
ALTER TABLE messages DROP COLUMN IF EXISTS tool_decision;
