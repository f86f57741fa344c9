-- name: SessionGet :one
SELECT * FROM sessions WHERE id = @id;

-- name: SessionSetSandbox :execrows
UPDATE sessions SET sandbox_id = @sandbox_id WHERE id = @id;

-- name: SessionInsert :one
-- Creates the session unless it exists; either way returns the stored row, so two
-- callers racing to create one session both see the same owner. DO UPDATE (a no-op) is
-- what makes RETURNING give the existing row: with DO NOTHING a caller that waited on a
-- concurrent insert would get no row at all. Only called for sessions not yet seen.
INSERT INTO sessions (id, owner, title, created_at, updated_at)
VALUES (@id, @owner, @title, @created_at, @created_at)
ON CONFLICT (id) DO UPDATE SET id = EXCLUDED.id
RETURNING *;
