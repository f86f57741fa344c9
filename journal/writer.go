package journal

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/service"
	"github.com/chatd/chatd/store"
)

// DefaultStatementTimeout bounds each write, so a hung database cannot freeze a session
// forever.
const DefaultStatementTimeout = 10 * time.Second

// DefaultStreamSync is the stream log's interval unless told otherwise
// (CHATD_STREAM_SYNC).
const DefaultStreamSync = 50 * time.Millisecond

// The stream log's collection: chunks no streaming message needs, older than
// collectAfter, are removed every collectEvery by every node.
const (
	collectEvery = 10 * time.Minute
	collectAfter = 10 * time.Minute
)

// LogStore is what the stream log needs of the database. *store.Store implements it.
type LogStore interface {
	StreamLogSync(ctx context.Context, chunks []store.StreamChunk, done []uuid.UUID) error
	StreamLogCollect(ctx context.Context, olderThan time.Duration) (int64, error)
}

var _ LogStore = (*store.Store)(nil)

// Config configures a node's Writer.
type Config struct {
	// Clock times retries and the stream log. Defaults to the real clock.
	Clock  clockwork.Clock
	Logger zerolog.Logger
	// Metrics counts what the writer does; share one among the writers of a process.
	// nil counts into metrics nobody exposes.
	Metrics *Metrics
	// StatementTimeout bounds each write (DefaultStatementTimeout when 0).
	StatementTimeout time.Duration
	// StreamSync is the stream log's interval: the text sessions stream is stored every
	// StreamSync at most, in one statement for the node. 0 keeps no stream log.
	StreamSync time.Duration
	// Log stores the stream log; required with StreamSync.
	Log LogStore
}

// Writer is a node's persistence service: it opens the write queues of its sessions,
// retries their failed writes as soon as the database answers again, runs the stream
// log, and counts. Start and Stop run the stream log (a service; without StreamSync
// they do nothing).
type Writer struct {
	cfg     Config
	clock   clockwork.Clock
	metrics *Metrics

	mu     sync.Mutex
	halted map[*Queue]struct{} // queues waiting for a retry
	nHalt  atomic.Int32

	stream streamLog
	loop   service.Loop

	synced func(error) // tests: told of each interval's statement once it is accounted for
}

// NewWriter returns an unstarted writer.
func NewWriter(cfg Config) *Writer {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = discardMetrics()
	}
	if cfg.StatementTimeout <= 0 {
		cfg.StatementTimeout = DefaultStatementTimeout
	}
	if cfg.Log == nil {
		cfg.StreamSync = 0
	}
	w := &Writer{cfg: cfg, clock: cfg.Clock, metrics: cfg.Metrics, halted: make(map[*Queue]struct{})}
	w.stream.init()
	return w
}

// StreamSync returns the stream log's interval, 0 when there is none.
func (w *Writer) StreamSync() time.Duration { return w.cfg.StreamSync }

// Start runs the stream log, when there is one.
func (w *Writer) Start(context.Context) error {
	if w.cfg.StreamSync <= 0 {
		return nil
	}
	return w.loop.Start(w.run)
}

// Stop stores what the stream log holds and stops it (stop the conversations first:
// what they store as they stop removes their logs).
func (w *Writer) Stop(ctx context.Context) error { return w.loop.Stop(ctx) }

// halt records that q waits for a retry (on) or no longer does.
func (w *Writer) halt(q *Queue, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on {
		w.halted[q] = struct{}{}
	} else {
		delete(w.halted, q)
	}
	w.nHalt.Store(int32(len(w.halted)))
}

// Kick retries now every queue that waits for a retry: the database answers again (a
// lease renewal succeeded after failing). Safe from any goroutine.
func (w *Writer) Kick() { w.succeeded() }

// succeeded is told that a write of the node was stored: when others wait for a retry,
// the database answers again, and they are retried now rather than after their backoff.
func (w *Writer) succeeded() {
	if w.nHalt.Load() == 0 {
		return
	}
	w.mu.Lock()
	qs := make([]*Queue, 0, len(w.halted))
	for q := range w.halted {
		qs = append(qs, q)
	}
	w.mu.Unlock()
	for _, q := range qs {
		q.Flush()
	}
}

// failed counts and logs a write the database did not take. It runs on q's writer
// goroutine.
func (w *Writer) failed(q *Queue, wr Write, f Failure, err error) {
	state := store.SQLState(err)
	w.metrics.failure(f, state)
	log := q.log()
	ev := func(e *zerolog.Event) *zerolog.Event {
		e = e.Err(err).Str("table", wr.Table()).Str("id", wr.ID().String()).Str("statement", wr.statement())
		if state != "" {
			e = e.Str("sqlstate", state)
		}
		return e
	}
	switch f {
	case Refused:
		w.metrics.refused[wr.Table()].Inc()
		if errors.Is(err, store.ErrNotFound) {
			ev(log.Error()).Msg("a row to write is missing; giving up on it")
		} else {
			ev(log.Warn()).Msg("a write was refused: the row has moved on")
		}
	case Permanent:
		ev(log.Error()).Msg("the database will never take this write; giving up on it")
	case Gone:
		ev(log.Error()).Msg("a row the write refers to is gone (the session was deleted); giving up on it")
	case Fenced:
		if q.fencedOut.CompareAndSwap(false, true) {
			w.metrics.fenced.Inc()
			ev(log.Warn()).Msg("a write was refused by the lease's fence: another node holds the session")
		}
	case Transient:
		if wr.retried {
			ev(log.Debug()).Msg("a write failed again; it waits for its retry")
		} else {
			ev(log.Warn()).Msg("a write failed; it is kept and retried")
		}
	}
}
