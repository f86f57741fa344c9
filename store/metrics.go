package store

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// OtherStatement labels statements that carry no sqlc name (transaction control,
// migrations, ad hoc SQL), and names beyond maxStatementNames.
const OtherStatement = "other"

// maxStatementNames bounds the statement label: sqlc's names are a fixed set, but the
// tracer sees whatever SQL runs on the pool, so a name it has not seen is admitted only
// while there is room.
const maxStatementNames = 64

// Metrics measures every statement run on a pool: its latency and its errors, by the
// name sqlc gives it. It is a pgx.QueryTracer; install it as the pool's
// ConnConfig.Tracer. chatd sends no batches and no COPY, so those are not traced.
type Metrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec

	mu    sync.RWMutex
	stmts map[string]*statementMetrics
}

type statementMetrics struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

var _ pgx.QueryTracer = (*Metrics)(nil)

// NewMetrics returns the database metrics, registered with reg unless it is nil:
// chatd_db_statement_duration_seconds and chatd_db_statement_errors_total, both by
// statement.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "chatd_db_statement_duration_seconds",
			Help: "Time from sending a database statement to reading its last row, by sqlc query name (\"other\" for statements without one).",
			// Statements on a local server take well under a millisecond; the top buckets
			// are for a database in trouble (the actor gives up after 10s).
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"statement"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_db_statement_errors_total",
			Help: "Database statements that failed, by sqlc query name (\"other\" for statements without one).",
		}, []string{"statement"}),
		stmts: make(map[string]*statementMetrics),
	}
	m.stmts[OtherStatement] = m.resolve(OtherStatement)
	if reg != nil {
		reg.MustRegister(m.duration, m.errors)
	}
	return m
}

func (m *Metrics) resolve(name string) *statementMetrics {
	return &statementMetrics{duration: m.duration.WithLabelValues(name), errors: m.errors.WithLabelValues(name)}
}

// statement returns the metrics of the statement sql, which sqlc starts with
// "-- name: MessageInsert :exec".
func (m *Metrics) statement(sql string) *statementMetrics {
	name := StatementName(sql)
	m.mu.RLock()
	s := m.stmts[name]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.stmts[name]; s != nil {
		return s
	}
	if len(m.stmts) >= maxStatementNames {
		return m.stmts[OtherStatement]
	}
	name = strings.Clone(name) // not a slice of the SQL kept alive by the map
	s = m.resolve(name)
	m.stmts[name] = s
	return s
}

// StatementName returns the sqlc query name a statement starts with ("-- name: RunStart
// :exec"), or OtherStatement when it has none. Names are Go identifiers of at most 64
// bytes; anything else is OtherStatement, so the label cannot carry arbitrary SQL.
func StatementName(sql string) string {
	const prefix = "-- name: "
	if !strings.HasPrefix(sql, prefix) {
		return OtherStatement
	}
	rest := sql[len(prefix):]
	end := strings.IndexAny(rest, " \t\r\n")
	if end < 0 {
		end = len(rest)
	}
	name := rest[:end]
	if name == "" || len(name) > 64 {
		return OtherStatement
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return OtherStatement
		}
	}
	return name
}

type traceKey struct{}

type trace struct {
	start time.Time
	stmt  *statementMetrics
}

// TraceQueryStart implements pgx.QueryTracer.
func (m *Metrics) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, trace{start: time.Now(), stmt: m.statement(data.SQL)})
}

// TraceBatchStart implements pgx.BatchTracer: each statement of a batch is counted like
// one sent alone, its duration from the batch's start to its own result.
func (m *Metrics) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, trace{start: time.Now()})
}

// TraceBatchQuery implements pgx.BatchTracer.
func (m *Metrics) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	t, ok := ctx.Value(traceKey{}).(trace)
	if !ok {
		return
	}
	stmt := m.statement(data.SQL)
	stmt.duration.Observe(time.Since(t.start).Seconds())
	if data.Err != nil {
		stmt.errors.Inc()
	}
}

// TraceBatchEnd implements pgx.BatchTracer.
func (m *Metrics) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TraceQueryEnd implements pgx.QueryTracer.
func (m *Metrics) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	t, ok := ctx.Value(traceKey{}).(trace)
	if !ok {
		return
	}
	t.stmt.duration.Observe(time.Since(t.start).Seconds())
	if data.Err != nil {
		t.stmt.errors.Inc()
	}
}
