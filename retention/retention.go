// Package retention is chatd's janitor for data with an end (docs/retention.md): the
// details of ended runs (their error messages, tool output past a kept size, stream-log
// remnants) after a time that depends on how they ended, webhook events once delivered or
// given up, and, when configured, sessions idle for long, as a whole. Every node runs
// it; each pass works in bounded batches, each its own short transaction that skips rows
// another node's janitor holds, so no pass takes a long lock and two nodes never do the
// same work twice.
package retention

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/service"
	"github.com/chatd/chatd/store"
)

// Defaults of Config.
const (
	DefaultDone       = 7 * 24 * time.Hour
	DefaultFailed     = 30 * 24 * time.Hour
	DefaultToolOutput = 4096
	DefaultInterval   = 10 * time.Minute
	DefaultBatch      = 500
)

// Store is what the janitor needs of the database. *store.Store implements it.
type Store interface {
	RetentionPruneRuns(ctx context.Context, now, doneBefore, failedBefore time.Time, keep, limit int) (store.Pruned, error)
	RetentionIdleSessions(ctx context.Context, before time.Time, limit int) ([]store.SessionRef, error)
	RetentionWebhooks(ctx context.Context, deliveredBefore, failedBefore time.Time, limit int) (int64, error)
}

// Config configures the janitor. A zero duration keeps that data for good.
type Config struct {
	Store Store
	// DeleteSession deletes an idle session for good, as DELETE /v1/sessions/{id} does
	// (its actor, connections, sandbox and workspaces with it). Required with Sessions.
	DeleteSession func(ctx context.Context, owner string, id uuid.UUID) error
	// Done is how long a run that ended done keeps its details (CHATD_RETAIN_DONE), and
	// a delivered webhook event its row.
	Done time.Duration
	// Failed is the same for runs that ended error, interrupted or cancelled
	// (CHATD_RETAIN_FAILED), and for webhook events given up.
	Failed time.Duration
	// ToolOutput is how many characters of a tool call's output outlive its run's
	// details (CHATD_RETAIN_TOOL_OUTPUT).
	ToolOutput int
	// Sessions deletes sessions idle this long, with no active run (CHATD_RETAIN_SESSIONS).
	Sessions time.Duration
	// Interval is the time between passes; Batch the rows of one statement.
	Interval time.Duration
	Batch    int
	Clock    clockwork.Clock
	Logger   zerolog.Logger
	Registry prometheus.Registerer
}

// Counts is what one pass removed.
type Counts struct {
	RunDetails, ToolOutputs, StreamChunks, Sessions, WebhookEvents int64
}

// Janitor applies the retention.
type Janitor struct {
	cfg     Config
	log     zerolog.Logger
	deleted *prometheus.CounterVec
	loop    service.Loop
}

// New returns a janitor for cfg.
func New(cfg Config) *Janitor {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	j := &Janitor{cfg: cfg, log: cfg.Logger.With().Str("component", "retention").Logger(),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_retention_deleted_total",
			Help: "What this node's retention janitor removed: run_details (runs pruned), tool_outputs (cut), stream_chunks, sessions, webhook_events.",
		}, []string{"what"})}
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(j.deleted)
	}
	return j
}

// Start runs a pass at once, then one every Interval.
func (j *Janitor) Start(context.Context) error { return j.loop.Start(j.run) }

// Stop stops the passes; one under way ends at its next statement.
func (j *Janitor) Stop(ctx context.Context) error { return j.loop.Stop(ctx) }

func (j *Janitor) run(stop <-chan struct{}) {
	service.Every(stop, j.cfg.Clock, j.cfg.Interval, func(ctx context.Context) {
		c, err := j.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			j.log.Warn().Err(err).Msg("a retention pass failed; the next one tries again")
		}
		if c != (Counts{}) {
			j.log.Info().Int64("run_details", c.RunDetails).Int64("tool_outputs", c.ToolOutputs).Int64("stream_chunks", c.StreamChunks).
				Int64("sessions", c.Sessions).Int64("webhook_events", c.WebhookEvents).Msg("retention removed what was due")
		}
	})
}

// cutoff is now less d, or the zero time (nothing is older) when d is 0: kept for good.
func cutoff(now time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return now.Add(-d)
}

// Pass removes what is due now, batch by batch, and counts it. A session that cannot be
// deleted now is logged and left for the next pass.
func (j *Janitor) Pass(ctx context.Context) (Counts, error) {
	var c Counts
	now := j.cfg.Clock.Now()
	done, failed := cutoff(now, j.cfg.Done), cutoff(now, j.cfg.Failed)
	keep := j.cfg.ToolOutput
	if keep <= 0 {
		keep = DefaultToolOutput
	}
	for {
		p, err := j.cfg.Store.RetentionPruneRuns(ctx, now, done, failed, keep, j.cfg.Batch)
		if err != nil {
			return c, err
		}
		c.RunDetails += p.Runs
		c.ToolOutputs += p.ToolOutputs
		c.StreamChunks += p.StreamChunks
		j.count("run_details", p.Runs)
		j.count("tool_outputs", p.ToolOutputs)
		j.count("stream_chunks", p.StreamChunks)
		if p.Runs < int64(j.cfg.Batch) {
			break
		}
	}
	for {
		n, err := j.cfg.Store.RetentionWebhooks(ctx, done, failed, j.cfg.Batch)
		if err != nil {
			return c, err
		}
		c.WebhookEvents += n
		j.count("webhook_events", n)
		if n < int64(j.cfg.Batch) {
			break
		}
	}
	if j.cfg.Sessions > 0 && j.cfg.DeleteSession != nil {
		// One batch a pass: a session that cannot be deleted now would come back in the
		// next batch.
		idle, err := j.cfg.Store.RetentionIdleSessions(ctx, now.Add(-j.cfg.Sessions), j.cfg.Batch)
		if err != nil {
			return c, err
		}
		for _, s := range idle {
			if err := j.cfg.DeleteSession(ctx, s.Owner, s.ID); err != nil {
				if ctx.Err() != nil {
					return c, ctx.Err()
				}
				j.log.Warn().Err(err).Str("session_id", s.ID.String()).Msg("delete an idle session; the next pass tries again")
				continue
			}
			c.Sessions++
			j.count("sessions", 1)
		}
	}
	return c, nil
}

func (j *Janitor) count(what string, n int64) {
	if n > 0 {
		j.deleted.WithLabelValues(what).Add(float64(n))
	}
}
