package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

func TestStatementName(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"-- name: MessageInsert :exec\nINSERT INTO messages": "MessageInsert",
		"-- name: RunGet :one\nSELECT 1":                     "RunGet",
		"-- name: RunGet\nSELECT 1":                          "RunGet",
		"-- name: RunGet":                                    "RunGet",
		"-- name: Run_2 :one":                                "Run_2",
		"begin":                                              "other",
		"":                                                   "other",
		"SELECT 1 -- name: RunGet :one":                      "other",
		"-- name:  RunGet :one":                              "other",
		"-- name: 2Run :one":                                 "other",
		"-- name: chat.Run-Get :one":                         "other",
		"-- name: Rün :one":                                  "other",
		"-- name: " + string(make([]byte, 65)):               "other",
		"-- name: A234567890123456789012345678901234567890123456789012345678901234 :one":  "A234567890123456789012345678901234567890123456789012345678901234",
		"-- name: A2345678901234567890123456789012345678901234567890123456789012345 :one": "other",
	} {
		require.Equal(t, want, store.StatementName(sql), "%q", sql)
	}
}

// Every statement on the pool is timed under its sqlc name, statements without one under
// "other", and failed ones are counted; a row that is not found is not a failure.
func TestMetricsTimeEveryStatement(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := store.NewMetrics(reg)
	s := storetest.New(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = m })
	ctx := context.Background()
	b := bundle{ctx: ctx, now: chat.Timestamp(time.Now())}
	var err error
	b.session, err = s.SessionCreate(ctx, chat.Session{ID: uuid.New(), Owner: "alice", CreatedAt: b.now})
	require.NoError(t, err)
	run, user := startRun(t, s, b, "r1", 1)
	// The same request again breaks a unique constraint: a statement error.
	err = s.RunStart(ctx, run, user, 0)
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.SessionGet(ctx, uuid.New())
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.Pool().Exec(ctx, "SELECT 1")
	require.NoError(t, err)

	counts, errs := statementCounts(t, reg)
	require.Equal(t, map[string]uint64{"SessionInsert": 1, "RunStart": 2, "SessionGet": 1, "other": 1}, counts)
	require.Equal(t, map[string]float64{"SessionInsert": 0, "RunStart": 1, "SessionGet": 0, "other": 0}, errs,
		"the conflict is an error; not found is an answer")
	for name := range counts {
		require.True(t, name == "other" || store.StatementName("-- name: "+name) == name, name)
	}
}

// The statement label cannot grow without bound, whatever SQL runs on the pool.
func TestMetricsBoundTheStatementLabel(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := store.NewMetrics(reg)
	ctx := context.Background()
	for i := range 500 {
		c := m.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: fmt.Sprintf("-- name: Q%d :one\nSELECT 1", i)})
		m.TraceQueryEnd(c, nil, pgx.TraceQueryEndData{Err: errors.New("boom")})
	}
	counts, errs := statementCounts(t, reg)
	require.LessOrEqual(t, len(counts), 64)
	var total uint64
	for _, n := range counts {
		total += n
	}
	require.EqualValues(t, 500, total, "every statement is counted, under its name or other")
	require.Greater(t, counts["other"], uint64(400))
	require.EqualValues(t, counts["other"], errs["other"])

	// A nil registry gives working metrics that are not exposed.
	n := store.NewMetrics(nil)
	n.TraceQueryEnd(n.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "begin"}), nil, pgx.TraceQueryEndData{})
}

// statementCounts returns the duration histogram's count and the error count of each
// statement label.
func statementCounts(t *testing.T, reg *prometheus.Registry) (counts map[string]uint64, errs map[string]float64) {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	counts, errs = map[string]uint64{}, map[string]float64{}
	label := func(m *dto.Metric) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == "statement" {
				return l.GetValue()
			}
		}
		t.Fatalf("a series without the statement label: %v", m)
		return ""
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "chatd_db_statement_duration_seconds":
				counts[label(m)] = m.GetHistogram().GetSampleCount()
			case "chatd_db_statement_errors_total":
				errs[label(m)] = m.GetCounter().GetValue()
			}
		}
	}
	return counts, errs
}
