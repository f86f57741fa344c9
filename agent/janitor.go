package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
)

// Defaults for JanitorConfig's zero fields.
const (
	DefaultSandboxIdlePause   = 15 * time.Minute
	DefaultSandboxKillAfter   = 24 * time.Hour
	DefaultWorkspaceRetention = 7 * 24 * time.Hour
	DefaultJanitorInterval    = time.Minute
	DefaultJanitorBatch       = 100
)

// KeepWorkspaces as JanitorConfig.WorkspaceRetention keeps the workspaces of killed and
// replaced sandboxes for good. A deleted session's are removed all the same.
const KeepWorkspaces time.Duration = -1

// JanitorStore lists the sessions whose sandbox deadline has passed, and the workspaces
// due for removal (chatd: the sessions and workspaces tables, by their partial indexes).
type JanitorStore interface {
	// SessionSandboxesIdle lists up to limit running sandboxes last used no later than
	// before, the longest idle first.
	SessionSandboxesIdle(ctx context.Context, before time.Time, limit int) ([]chat.SessionSandbox, error)
	// SessionSandboxesPaused lists up to limit sandboxes paused since no later than
	// before, the longest paused first.
	SessionSandboxesPaused(ctx context.Context, before time.Time, limit int) ([]chat.SessionSandbox, error)
	// WorkspacesDue lists up to limit workspaces to remove, the longest released first:
	// the deleted sessions', and those whose sandbox stopped being their session's no
	// later than releasedBefore (nil for none of those). Never a live session's current
	// sandbox's.
	WorkspacesDue(ctx context.Context, releasedBefore *time.Time, limit int) ([]chat.Workspace, error)
}

// JanitorConfig configures a SandboxJanitor.
type JanitorConfig struct {
	// Sandboxes acts on the sandboxes, and knows which have a tool call running. Required.
	Sandboxes *Sandboxes
	// Store finds the due deadlines. Required.
	Store JanitorStore
	// IdlePause is how long a running sandbox may go without a tool call before it is
	// paused; KillAfter how long a paused one lives before it is killed.
	IdlePause time.Duration
	KillAfter time.Duration
	// WorkspaceRetention is how long the workspace of a sandbox that stopped being its
	// session's (the janitor killed it, or the session got another: the old one was lost,
	// or made by another node) is kept before a pass removes it; KeepWorkspaces (any
	// negative duration) keeps them for good. A deleted session's workspaces are removed
	// at the next pass whatever it says.
	WorkspaceRetention time.Duration
	// Interval is the time between passes; a deadline is enforced at most this late.
	Interval time.Duration
	// Batch bounds the sandboxes of each kind (and the workspaces) one pass acts on; a
	// pass that reaches it is followed at once by another.
	Batch int
	// Clock drives the passes and stamps the stored times. Defaults to the real clock.
	Clock  clockwork.Clock
	Logger zerolog.Logger
	// Swept, when set, is called after each pass of the running service (tests wait on
	// it; it must not block).
	Swept func(JanitorPass, error)
}

// JanitorPass counts what one pass did.
type JanitorPass struct {
	Paused, Killed int
	// Removed counts the workspaces removed.
	Removed int
	// Skipped were due but left alone: a tool call ran, or the sandbox was used,
	// resumed or replaced in the meantime.
	Skipped int
}

// SandboxJanitor is the service that enforces the sandbox deadlines stored with each
// session: it pauses a sandbox unused for IdlePause and kills one paused for KillAfter
// (Sandboxes.Get then gives the session a new one, and the run's transcript says so). It
// removes the workspace of a sandbox that stopped being its session's once
// WorkspaceRetention has passed, and a deleted session's at once. It works from the
// database alone, so the deadlines hold after a restart and while no actor or agent
// holds the session (a run parked waiting for approval). It acts only on the sandboxes
// of its store (chatd: this node's), and never on a session with a tool call running in
// this process.
type SandboxJanitor struct {
	cfg JanitorConfig
	log zerolog.Logger

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// NewJanitor returns an unstarted janitor.
func NewJanitor(cfg JanitorConfig) (*SandboxJanitor, error) {
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.IdlePause == 0 {
		cfg.IdlePause = DefaultSandboxIdlePause
	}
	if cfg.KillAfter == 0 {
		cfg.KillAfter = DefaultSandboxKillAfter
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultJanitorInterval
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultJanitorBatch
	}
	switch {
	case cfg.Sandboxes == nil || cfg.Store == nil:
		return nil, errors.New("janitor config: Sandboxes and Store are required")
	case cfg.IdlePause < 0 || cfg.KillAfter < 0 || cfg.Interval < 0 || cfg.Batch < 0:
		return nil, errors.New("janitor config: durations and Batch must be positive")
	}
	if cfg.WorkspaceRetention == 0 {
		cfg.WorkspaceRetention = DefaultWorkspaceRetention
	}
	return &SandboxJanitor{cfg: cfg, log: cfg.Logger.With().Str("component", "sandbox_janitor").Logger()}, nil
}

// Start starts the passes: one at once (deadlines may have passed while chatd was
// down), then one every Interval.
func (j *SandboxJanitor) Start(context.Context) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.done != nil {
		return errors.New("sandbox janitor: already started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	j.stop, j.done = cancel, make(chan struct{})
	ticker := j.cfg.Clock.NewTicker(j.cfg.Interval)
	go func() {
		defer close(j.done)
		defer ticker.Stop()
		for {
			j.pass(ctx)
			select {
			case <-ticker.Chan():
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// Stop stops the passes and waits for the one under way, or until ctx ends.
func (j *SandboxJanitor) Stop(ctx context.Context) error {
	j.mu.Lock()
	stop, done := j.stop, j.done
	j.mu.Unlock()
	if done == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pass sweeps until nothing due is left (a full batch may hide more), and reports.
func (j *SandboxJanitor) pass(ctx context.Context) {
	var total JanitorPass
	var err error
	for ctx.Err() == nil {
		var p JanitorPass
		var full bool
		p, full, err = j.sweep(ctx)
		total.Paused += p.Paused
		total.Killed += p.Killed
		total.Removed += p.Removed
		total.Skipped += p.Skipped
		if err != nil || !full || p.Paused+p.Killed+p.Removed == 0 {
			break
		}
	}
	switch {
	case err != nil && ctx.Err() == nil:
		j.log.Error().Err(err).Int("paused", total.Paused).Int("killed", total.Killed).Int("workspaces_removed", total.Removed).Msg("sandbox janitor pass failed")
	case total.Paused+total.Killed+total.Removed > 0:
		j.log.Info().Int("paused", total.Paused).Int("killed", total.Killed).Int("workspaces_removed", total.Removed).Int("skipped", total.Skipped).
			Msg("sandbox janitor paused idle and killed long-paused sandboxes, and removed the workspaces due")
	}
	if j.cfg.Swept != nil && ctx.Err() == nil {
		j.cfg.Swept(total, err)
	}
}

// Sweep makes one pass: it pauses every due idle sandbox, kills every due paused one and
// removes every workspace due (up to Batch of each), as of the clock's now. The running
// service calls it every Interval; it is exported for a caller that wants a pass at once.
func (j *SandboxJanitor) Sweep(ctx context.Context) (JanitorPass, error) {
	p, _, err := j.sweep(ctx)
	return p, err
}

func (j *SandboxJanitor) sweep(ctx context.Context) (p JanitorPass, full bool, err error) {
	now := j.cfg.Clock.Now()
	// Kill first: a sandbox this pass pauses is not due for a kill anyway.
	killBefore := now.Add(-j.cfg.KillAfter)
	paused, err := j.cfg.Store.SessionSandboxesPaused(ctx, killBefore, j.cfg.Batch)
	if err != nil {
		return p, false, err
	}
	var errs []error
	for _, s := range paused {
		ok, err := j.cfg.Sandboxes.killPaused(ctx, s.SessionID, s.SandboxID, killBefore)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			p.Killed++
		} else if err == nil {
			p.Skipped++
		}
	}
	idleBefore := now.Add(-j.cfg.IdlePause)
	idle, err := j.cfg.Store.SessionSandboxesIdle(ctx, idleBefore, j.cfg.Batch)
	if err != nil {
		return p, false, errors.Join(append(errs, err)...)
	}
	for _, s := range idle {
		ok, err := j.cfg.Sandboxes.pauseIdle(ctx, s.SessionID, s.SandboxID, idleBefore)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			p.Paused++
		} else if err == nil {
			p.Skipped++
		}
	}
	// Last: a sandbox this pass killed has its retention still ahead, unless that is
	// shorter than the time between passes.
	var releasedBefore *time.Time
	if j.cfg.WorkspaceRetention >= 0 {
		t := now.Add(-j.cfg.WorkspaceRetention)
		releasedBefore = &t
	}
	due, err := j.cfg.Store.WorkspacesDue(ctx, releasedBefore, j.cfg.Batch)
	if err != nil {
		return p, false, errors.Join(append(errs, err)...)
	}
	for _, w := range due {
		ok, err := j.cfg.Sandboxes.removeWorkspace(ctx, w)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			p.Removed++
			reason := removedRetention
			if w.SessionDeleted {
				reason = removedDeleted
			}
			j.log.Info().Str("session_id", w.SessionID.String()).Str("sandbox_id", w.SandboxID).Str("reason", reason).
				Msg("removed a sandbox's workspace")
		} else if err == nil {
			p.Skipped++
		}
	}
	full = len(paused) == j.cfg.Batch || len(idle) == j.cfg.Batch || len(due) == j.cfg.Batch
	return p, full, errors.Join(errs...)
}
