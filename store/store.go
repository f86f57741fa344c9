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
	// ErrSessionLimit is returned when a new session would take its owner past the limit
	// of live sessions the caller gave; nothing was written.
	ErrSessionLimit = errors.New("too many sessions")
	// ErrGone is returned when a row the write refers to is gone (SQLSTATE 23503, a
	// foreign key): a message of a run that was deleted with its session. Nothing was
	// written, and the write can never be made.
	ErrGone = errors.New("a row it refers to is gone")
	// ErrInvalid is returned when the database will never take the statement as it is:
	// a data exception (text with NUL or invalid UTF-8, a value out of range or too
	// long), a constraint it breaks, or a statement the schema does not know. Retrying
	// cannot help. The PostgreSQL error stays wrapped: SQLState names it.
	ErrInvalid = errors.New("refused for good by the database")
)

// Store reads and writes chatd's tables. Its methods are safe for concurrent use; a Store
// given to an InTx callback runs everything in that transaction.
type Store struct {
	pool *pgxpool.Pool
	db   queries.DBTX
	// w makes the actors' writes: grouped into batches (group.go), or db in InTx.
	w queries.DBTX
	q *queries.Queries
	// webhooks: a run's status change queues its webhook event (EnableWebhooks).
	webhooks bool
	// streamLog: StreamLogSync's parameters, reused from one interval to the next.
	streamLog *streamLogParams
	// tracer is the pool's query tracer, for the statements sent without pgx
	// (execParams); read once, as the pool's Config copies the whole configuration.
	tracer pgx.QueryTracer
}

// New returns a Store on pool. The caller keeps ownership of the pool and closes it.
func New(pool *pgxpool.Pool) *Store {
	s := &Store{pool: pool, db: pool, w: newGroupDB(pool), q: queries.New(), streamLog: new(streamLogParams)}
	if pool != nil {
		s.tracer = pool.Config().ConnConfig.Tracer
	}
	return s
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
		return fn(&Store{pool: s.pool, db: tx, w: tx, q: s.q, webhooks: s.webhooks, streamLog: s.streamLog, tracer: s.tracer})
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
	if !errors.As(err, &pgErr) {
		return err
	}
	switch {
	case pgErr.Code == "23505": // unique_violation
		return fmt.Errorf("%w (%s): %w", ErrConflict, pgErr.ConstraintName, err)
	case pgErr.Code == "23503": // foreign_key_violation
		return fmt.Errorf("%w: %w", ErrGone, err)
	case permanentSQLState(pgErr.Code):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

// permanentSQLState reports whether an error with this SQLSTATE will come again however
// often the statement is retried: data exceptions (class 22: invalid text such as NUL,
// values out of range or too long), integrity constraint violations (23), statements
// the schema or the server does not know or allow (42, 0A), and data corruption
// (XX001, XX002). Everything else (a lost connection, a serialization failure or
// deadlock, a shutdown, too many connections, a statement timeout) may pass.
func permanentSQLState(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "22", "23", "42", "0A":
		return true
	}
	return code == "XX001" || code == "XX002"
}

// Constraint returns the name of the constraint a PostgreSQL error err wraps is about
// ("" when none): which uniqueness rule an ErrConflict broke.
func Constraint(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.ConstraintName
	}
	return ""
}

// SQLState returns the SQLSTATE of the PostgreSQL error err wraps, "" when it wraps none
// (a connection that failed, a timeout).
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
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
