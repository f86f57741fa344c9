-- name: ApprovalRuleInsert :execrows
-- Fenced like every write of an actor (messages.sql).
INSERT INTO approval_rules (id, session_id, tool, command, created_by, created_via, tool_call_id, created_at)
SELECT @id, @session_id, @tool, @command, @created_by, @created_via, @tool_call_id, @created_at
WHERE (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = @session_id AND f.token = @fence FOR KEY SHARE));

-- name: ApprovalRuleDelete :execrows
DELETE FROM approval_rules
WHERE approval_rules.id = @id AND approval_rules.session_id = @session_id
    AND (@fence::bigint = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = approval_rules.session_id AND f.token = @fence FOR KEY SHARE));

-- name: ApprovalRulesList :many
SELECT * FROM approval_rules WHERE session_id = @session_id ORDER BY created_at, id;
