package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// seedHistory gives n new sessions of chatd's database at dbURL a finished conversation
// of turns turns each, as chatd would have stored it: one run per turn, its user message
// (200 bytes) and its answer (1,800 bytes), a chain of parents, the last answer the
// active leaf, and its lease row; about 60 KiB of text for 30 turns. It returns the sessions' ids. Written
// in one statement, not through chatd: the idle scenario measures what chatd holds for
// such sessions, not how it stores them.
func seedHistory(ctx context.Context, dbURL string, n, turns int) ([]string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the idle scenario's database: %w", err)
	}
	defer conn.Close(ctx)
	const seed = `
WITH ids AS (
    SELECT gen_random_uuid() AS id FROM generate_series(1, $1)
), s AS (
    INSERT INTO sessions (id, owner, title, created_at, updated_at, active_at, active_leaf)
    SELECT id, '', 'a long conversation', now(), now(), now(), md5(id::text || 'msg' || (2 * $2))::uuid FROM ids
    RETURNING id
), l AS (
    INSERT INTO session_leases (session_id) SELECT id FROM s
), t AS (
    SELECT s.id AS sid, g AS turn, md5(s.id::text || 'run' || g)::uuid AS run
    FROM s, generate_series(1, $2) g
), r AS (
    INSERT INTO runs (id, session_id, owner, request_id, status, started_at, ended_at, last_activity_at, model)
    SELECT run, sid, '', 'turn-' || turn, 'done', now(), now(), now(), 'synth' FROM t
), m AS (
    INSERT INTO messages (id, session_id, run_id, parent_id, position, role, content, status, created_at, updated_at)
    SELECT md5(sid::text || 'msg' || (2 * turn - 1 + k))::uuid, sid, run,
        CASE WHEN 2 * turn - 2 + k = 0 THEN NULL ELSE md5(sid::text || 'msg' || (2 * turn - 2 + k))::uuid END,
        2 * turn - 1 + k,
        CASE WHEN k = 0 THEN 'user' ELSE 'assistant' END,
        CASE WHEN k = 0 THEN repeat('How does this part work? ', 8) ELSE repeat('Here is how it works, step by step. ', 50) END,
        'complete', now(), now()
    FROM t, generate_series(0, 1) k
)
SELECT id::text FROM s`
	rows, err := conn.Query(ctx, seed, n, turns)
	if err != nil {
		return nil, fmt.Errorf("seed the histories: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("seed the histories: %w", err)
	}
	return ids, nil
}
