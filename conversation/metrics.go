package conversation

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/internal/counter"
	"github.com/chatd/chatd/journal"
)

// Metrics counts what actors do. Every label is resolved here, once: the actor's hot
// path (publish) only increments counters. One Metrics is shared by all the actors of a
// process.
type Metrics struct {
	eventsPublished counter.Sharded // each actor adds to its own slot: see package counter
	ringEvictions   prometheus.Counter
	catchUpReplay   prometheus.Counter
	catchUpSnapshot prometheus.Counter
	runsActive      map[chat.RunStatus]prometheus.Gauge
	runDuration     map[chat.RunStatus]prometheus.Observer
	// Leases (Config.Lease): acquisitions, sessions taken from a node whose lease had
	// expired, and actors stopped because another node holds their session.
	leaseAcquired prometheus.Counter
	leaseTakeover prometheus.Counter
	movedAway     prometheus.Counter
	// released counts the actors that dropped the messages and replay ring they kept in
	// memory once quiet (Config.QuietRelease).
	released prometheus.Counter
	// memoryReturned counts the MemoryReturner's returns of memory to the system.
	memoryReturned prometheus.Counter
	// paceWindow is the Pacer's window of adaptive coalescing.
	paceWindow prometheus.Gauge
	// journal counts the writes (refused, fenced, failed) and the write queues.
	journal *journal.Metrics
}

// Journal returns the metrics of the journal service the actors write through: give it
// to the node's journal.Writer (journal.Config.Metrics).
func (m *Metrics) Journal() *journal.Metrics { return m.journal }

// activeStatuses are the statuses of a run that has not ended.
var activeStatuses = []chat.RunStatus{chat.RunRunning, chat.RunAwaitingApproval, chat.RunPaused}

// endStatuses are the statuses a run ends with.
var endStatuses = []chat.RunStatus{chat.RunDone, chat.RunError, chat.RunCancelled, chat.RunInterrupted}

// NewMetrics returns the actors' metrics, registered with reg unless it is nil:
// chatd_events_published_total, chatd_ring_evictions_total, chatd_catchups_total{kind},
// chatd_runs_active{status}, chatd_run_duration_seconds{status},
// chatd_lease_acquisitions_total{kind} and chatd_sessions_moved_total, and the journal's
// (journal.NewMetrics). Pass it to every actor in Config.Metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	evictions := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_ring_evictions_total",
		Help: "Events pushed out of the replay rings by newer ones; a client further behind is caught up with a snapshot.",
	})
	catchUps := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_catchups_total",
		Help: "Hellos answered, by how the subscriber was caught up: replay from the ring, or snapshot.",
	}, []string{"kind"})
	active := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chatd_runs_active",
		Help: "Runs that have not ended, by their current status.",
	}, []string{"status"})
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "chatd_run_duration_seconds",
		Help: "Time from a run's start to its end, by the status it ended with. A run that waited for an approval includes the wait.",
		// From a one-word answer to a run that waited for a person.
		Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600},
	}, []string{"status"})

	leases := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_lease_acquisitions_total",
		Help: "Session leases this node acquired, by kind: free (no node held it, or this one), takeover (another node's lease had expired).",
	}, []string{"kind"})
	moved := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_sessions_moved_total",
		Help: "Conversation actors stopped because another node holds their session (their clients are closed with 4010 and reconnect).",
	})
	released := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_conversation_memory_released_total",
		Help: "Times a quiet conversation dropped the newest messages and the replay ring it kept in memory (CHATD_QUIET_RELEASE); the next snapshot or run reads the messages again.",
	})
	memoryReturned := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chatd_memory_returned_total",
		Help: "Times the process collected and returned its free memory to the system after quiet conversations dropped at least 32 MiB of messages.",
	})
	paceWindow := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "chatd_coalesce_window_seconds",
		Help: "How long adaptive coalescing holds a session's text now: 0 while the process keeps up, up to 0.1 while its goroutines wait to run.",
	})
	m := &Metrics{
		paceWindow:      paceWindow,
		released:        released,
		memoryReturned:  memoryReturned,
		leaseAcquired:   leases.WithLabelValues("free"),
		leaseTakeover:   leases.WithLabelValues("takeover"),
		movedAway:       moved,
		ringEvictions:   evictions,
		catchUpReplay:   catchUps.WithLabelValues("replay"),
		catchUpSnapshot: catchUps.WithLabelValues("snapshot"),
		runsActive:      make(map[chat.RunStatus]prometheus.Gauge, len(activeStatuses)),
		runDuration:     make(map[chat.RunStatus]prometheus.Observer, len(endStatuses)),
		journal:         journal.NewMetrics(reg),
	}
	for _, s := range activeStatuses {
		m.runsActive[s] = active.WithLabelValues(string(s))
	}
	for _, s := range endStatuses {
		m.runDuration[s] = duration.WithLabelValues(string(s))
	}
	if reg != nil {
		events := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chatd_events_published_total",
			Help: "Sequenced events the conversation actors published.",
		}, func() float64 { return float64(m.eventsPublished.Load()) })
		reg.MustRegister(events, evictions, catchUps, active, duration, leases, moved, released, memoryReturned, paceWindow)
	}
	return m
}

// discardMetrics stands in for a Config without Metrics: the counting costs the same
// and nobody reads it.
var discardMetrics = sync.OnceValue(func() *Metrics { return NewMetrics(nil) })

// countActive moves run in chatd_runs_active from the status it was counted under to its
// current one (none once it has ended). Call it after every change of run.info.Status.
func (a *Actor) countActive(run *runState) {
	a.countAs(run, run.info.Status)
}

// countAs counts run in chatd_runs_active under status (none unless it is active): a
// suspended run keeps its stored status but is no longer this process's.
func (a *Actor) countAs(run *runState, now chat.RunStatus) {
	if !now.Active() {
		now = ""
	}
	if now == run.counted {
		return
	}
	if g := a.cfg.Metrics.runsActive[run.counted]; g != nil {
		g.Dec()
	}
	if g := a.cfg.Metrics.runsActive[now]; g != nil {
		g.Inc()
	}
	// The owner's count of active runs, for the next start's guess (runcount.go): up
	// when a run becomes active here, down only when it ends. A run suspended or moved
	// is still active in the database, so counting it down would let a start be
	// guessed safe that the database then refuses; counting a taken-up run twice only
	// makes the guess wait for the database.
	switch {
	case a.session == nil:
	case run.counted == "" && now != "":
		a.cfg.RunCounts.add(a.session.Owner, 1)
	case run.counted != "" && now == "" && !run.info.Status.Active():
		a.cfg.RunCounts.add(a.session.Owner, -1)
	}
	run.counted = now
}
