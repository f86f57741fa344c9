package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

var (
	// ErrNotFound is returned when the row asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict is returned when a write would break a uniqueness rule: a second run
	// for one (session, requestId), or a second message at one position.
	ErrConflict = errors.New("conflict")
	// ErrStale is returned when the row exists but is not in a state the write expected (a
	// later writer moved it on, e.g. the run already ended); nothing was written.
	ErrStale = errors.New("stale")
	// ErrRunLimit is returned when a run would start (or be continued) while its
	// session's owner has as many active runs as the limit the caller gave; nothing was
	// written.
	ErrRunLimit = errors.New("too many active runs")
)

// Store reads and writes chatd's tables. Its methods are safe for concurrent use; a Store
// given to an InTx callback runs everything in that transaction.
type Store struct {
	pool *pgxpool.Pool
	db   queries.DBTX
	// w makes the actors' writes: grouped into batches (group.go), or db in InTx.
	w queries.DBTX
	q *queries.Queries
}

// New returns a Store on pool. The caller keeps ownership of the pool and closes it.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, db: pool, w: newGroupDB(pool), q: queries.New()}
}

// Pool returns the pool the store uses, for tests and tools that need plain SQL.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// InTx runs fn in one transaction: committed when fn returns nil, rolled back otherwise.
// The Store passed to fn must not be used after fn returns.
func (s *Store) InTx(ctx context.Context, fn func(tx *Store) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return fn(&Store{pool: s.pool, db: tx, w: tx, q: s.q})
	})
}

// mapErr turns driver errors into the package's sentinels, keeping the original wrapped.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return fmt.Errorf("%w: %s", ErrConflict, pgErr.ConstraintName)
	}
	return err
}

// statusStrings is for the from_statuses parameter of guarded updates.
func statusStrings[S ~string](statuses []S) []string {
	out := make([]string, len(statuses))
	for i, st := range statuses {
		out[i] = string(st)
	}
	return out
}

// orList names the statuses a guarded update expected, for its ErrStale message.
func orList[S ~string](statuses []S) string {
	ss := statusStrings(statuses)
	if len(ss) == 1 {
		return ss[0]
	}
	return strings.Join(ss[:len(ss)-1], ", ") + " or " + ss[len(ss)-1]
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func errorInfo(code, message *string) *chat.ErrorInfo {
	if code == nil && message == nil {
		return nil
	}
	return &chat.ErrorInfo{Code: deref(code), Message: deref(message)}
}

func errorColumns(e *chat.ErrorInfo) (code, message *string) {
	if e == nil {
		return nil, nil
	}
	return ptr(e.Code), ptr(e.Message)
}

// utcPtr is for nullable timestamps: pgx scans them in time.Local, the domain keeps UTC.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	return ptr(t.UTC())
}
