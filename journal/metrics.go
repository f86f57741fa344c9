package journal

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what the writers of a process do. Share one among them.
type Metrics struct {
	depth    atomic.Int64
	mu       sync.Mutex
	nonEmpty map[*Queue]struct{}

	failures *prometheus.CounterVec // by failure and SQLSTATE
	refused  map[string]prometheus.Counter
	fenced   prometheus.Counter

	streamStatements prometheus.Counter
	streamChunks     prometheus.Counter
	streamBytes      prometheus.Counter
	streamFailures   prometheus.Counter
}

// NewMetrics returns the writers' metrics, registered with reg unless it is nil:
// chatd_journal_queued_writes, chatd_journal_oldest_write_seconds,
// chatd_journal_write_failures_total{failure,sqlstate}, chatd_writes_refused_total{table},
// chatd_fenced_writes_total, chatd_stream_log_statements_total,
// chatd_stream_log_chunks_total, chatd_stream_log_bytes_total and
// chatd_stream_log_failures_total.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{nonEmpty: make(map[*Queue]struct{})}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatd_journal_queued_writes",
		Help: "Writes the conversations of this node have queued and the database has not taken yet (being stored, or waiting for a retry).",
	}, func() float64 { return float64(m.depth.Load()) })
	oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatd_journal_oldest_write_seconds",
		Help: "Age of the oldest queued write of this node: how far the database is behind what clients were told (0 when nothing is queued).",
	}, m.oldestAge)
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_journal_write_failures_total",
		Help: "Writes the database did not take, by failure (transient: kept and retried; refused: the row had moved on; permanent: given up; gone: the session was deleted; fenced: another node holds the session) and SQLSTATE (empty when the database did not answer).",
	}, []string{"failure", "sqlstate"})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_writes_refused_total",
		Help: "Updates the database refused because the row was no longer in a state they may be written from (a run that had ended, a message that was no longer streaming), or was gone, by table. Nothing was written.",
	}, []string{"table"})
	m.refused = map[string]prometheus.Counter{
		"runs":     refused.WithLabelValues("runs"),
		"messages": refused.WithLabelValues("messages"),
		"settle":   refused.WithLabelValues("settle"),
	}
	m.fenced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_fenced_writes_total",
		Help: "Writes the database refused because the session's lease had been taken over by another node. Nothing was written.",
	})
	m.streamStatements = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_stream_log_statements_total",
		Help: "Statements that stored an interval of the stream log (the text sessions are streaming), one per CHATD_STREAM_SYNC at most.",
	})
	m.streamChunks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_stream_log_chunks_total",
		Help: "Chunks of streaming text the stream log stored: one per streaming message and interval.",
	})
	m.streamBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_stream_log_bytes_total",
		Help: "Bytes of streaming text the stream log stored.",
	})
	m.streamFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_stream_log_failures_total",
		Help: "Intervals of the stream log the database did not take (kept and tried again at the next).",
	})
	if reg != nil {
		reg.MustRegister(depth, oldest, m.failures, refused, m.fenced, m.streamStatements, m.streamChunks, m.streamBytes, m.streamFailures)
	}
	return m
}

// discardMetrics stands in for a Config without Metrics.
var discardMetrics = sync.OnceValue(func() *Metrics { return NewMetrics(nil) })

func (m *Metrics) failure(f Failure, sqlstate string) {
	m.failures.WithLabelValues(f.String(), sqlstate).Inc()
}

// queued records that q holds writes (on) or no longer does.
func (m *Metrics) queued(q *Queue, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if on {
		m.nonEmpty[q] = struct{}{}
	} else {
		delete(m.nonEmpty, q)
	}
}

func (m *Metrics) oldestAge() float64 {
	m.mu.Lock()
	qs := make([]*Queue, 0, len(m.nonEmpty))
	for q := range m.nonEmpty {
		qs = append(qs, q)
	}
	m.mu.Unlock()
	var age time.Duration
	for _, q := range qs {
		if at, ok := q.oldest(); ok {
			age = max(age, q.w.clock.Since(at))
		}
	}
	return age.Seconds()
}
