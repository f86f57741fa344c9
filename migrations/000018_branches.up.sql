-- Branches: messages form a tree. parent_id is the message before this one on its branch
-- (NULL for the first message of a branch that starts the conversation); an edited
-- question is a sibling of the original, a regenerated answer a sibling of the old one.
ALTER TABLE messages ADD COLUMN parent_id uuid;
CREATE INDEX messages_parent_idx ON messages (session_id, parent_id, position);

-- The session's active path is the active leaf's ancestors and the leaf itself: what its
-- tabs show and what its next message answers. NULL for a session with no message.
ALTER TABLE sessions ADD COLUMN active_leaf uuid;

-- A linear transcript becomes one path. A retry's answer hangs under the user message
-- it answers, beside the answer it replaced; what came after a retried run follows the
-- retry.
WITH info AS (
    SELECT m.id, m.session_id, m.position, m.run_id, r.retry_of,
        m.position = min(m.position) OVER (PARTITION BY m.run_id) AS first_of_run
    FROM messages m
    LEFT JOIN runs r ON r.id = m.run_id
)
UPDATE messages m SET parent_id = CASE
    WHEN i.run_id IS NOT NULL AND NOT i.first_of_run THEN
        (SELECT p.id FROM messages p
         WHERE p.run_id = i.run_id AND p.position < i.position
         ORDER BY p.position DESC LIMIT 1)
    WHEN i.retry_of IS NOT NULL THEN
        -- the user message of the newest run before it that is not a retry
        (SELECT p.id FROM messages p JOIN runs pr ON pr.id = p.run_id
         WHERE p.session_id = i.session_id AND p.position < i.position
           AND p.role = 'user' AND pr.retry_of IS NULL
           AND p.position = (SELECT min(q.position) FROM messages q WHERE q.run_id = p.run_id)
         ORDER BY p.position DESC LIMIT 1)
    ELSE
        (SELECT p.id FROM messages p LEFT JOIN runs pr ON pr.id = p.run_id
         WHERE p.session_id = i.session_id AND p.position < i.position AND pr.superseded_by IS NULL
         ORDER BY p.position DESC LIMIT 1)
END
FROM info i
WHERE i.id = m.id;

UPDATE sessions s SET active_leaf = (
    SELECT m.id FROM messages m LEFT JOIN runs r ON r.id = m.run_id
    WHERE m.session_id = s.id AND r.superseded_by IS NULL
    ORDER BY m.position DESC LIMIT 1);

-- Superseded answers are now older branches.
ALTER TABLE runs DROP COLUMN superseded_by;
