-- name: SessionGet :one
SELECT * FROM sessions WHERE id = @id;

-- name: SessionInsert :one
-- Creates the session unless it exists; either way returns the stored row, so two
-- callers racing to create one session both see the same owner.
WITH inserted AS (
    INSERT INTO sessions (id, owner, title, created_at, updated_at)
    VALUES (@id, @owner, @title, @created_at, @created_at)
    ON CONFLICT (id) DO NOTHING
    RETURNING *
)
SELECT * FROM inserted
UNION ALL
SELECT * FROM sessions WHERE id = @id AND NOT EXISTS (SELECT 1 FROM inserted);
