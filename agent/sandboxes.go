package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/agent/sandbox"
)

// SandboxStore keeps each session's sandbox id and the times its deadlines count from
// (chatd: the sessions table). The store package implements it; the agent never sees the
// database itself.
type SandboxStore interface {
	SessionSandbox(ctx context.Context, sessionID uuid.UUID) (string, error)
	// SessionSetSandbox records a new sandbox ("" for none), used at now and running.
	SessionSetSandbox(ctx context.Context, sessionID uuid.UUID, sandboxID string, now time.Time) error
	// SessionSandboxKilledAt is when the janitor killed the session's last sandbox; nil
	// when it did not, or the session has a new one.
	SessionSandboxKilledAt(ctx context.Context, sessionID uuid.UUID) (*time.Time, error)
	// SessionSandboxUsed records that the session's sandbox runs and was used at now.
	SessionSandboxUsed(ctx context.Context, sessionID uuid.UUID, now time.Time) error
	// SessionSandboxPaused records that sandboxID was paused at now, unless it already was.
	SessionSandboxPaused(ctx context.Context, sessionID uuid.UUID, sandboxID string, now time.Time) error
	// SessionSandboxPauseIdle records the janitor's pause of sandboxID at now, only when it
	// runs and was last used no later than idleBefore; it reports whether it did.
	SessionSandboxPauseIdle(ctx context.Context, sessionID uuid.UUID, sandboxID string, idleBefore, now time.Time) (bool, error)
	// SessionSandboxKilled forgets sandboxID, killed at now, only when it has been paused
	// since no later than pausedBefore; it reports whether it did.
	SessionSandboxKilled(ctx context.Context, sessionID uuid.UUID, sandboxID string, pausedBefore, now time.Time) (bool, error)
}

// Sandboxes gives each session one sandbox, reused by its runs: the id is stored with the
// session, and a session whose sandbox was killed gets a new one when it next needs one.
// It stores when each sandbox was last used and when it was paused: the deadlines the
// SandboxJanitor enforces. It counts the tool calls running in this process per session,
// and the janitor leaves a sandbox with one running alone.
type Sandboxes struct {
	provider sandbox.Provider
	store    SandboxStore
	clock    clockwork.Clock

	mu      sync.Mutex
	locks   map[uuid.UUID]*sessionLock
	running map[uuid.UUID]int // tool calls running, per session
	// gets counts Get calls per session while calls run, so a call's end records use
	// only when the call used the sandbox: a tool that needs none (current_time) costs
	// no statement.
	gets map[uuid.UUID]uint64
}

// sessionLock serializes the sandbox operations of one session: two tool calls of one
// step must not both find "no sandbox yet" and create two.
type sessionLock struct {
	mu   sync.Mutex
	refs int
}

func (s *Sandboxes) lock(sessionID uuid.UUID) (unlock func()) {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = make(map[uuid.UUID]*sessionLock)
	}
	l := s.locks[sessionID]
	if l == nil {
		l = &sessionLock{}
		s.locks[sessionID] = l
	}
	l.refs++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, sessionID)
		}
		s.mu.Unlock()
	}
}

// NewSandboxes returns session sandboxes from provider, their ids and deadlines kept in
// store, timed by clock (nil for the real one).
func NewSandboxes(provider sandbox.Provider, store SandboxStore, clock clockwork.Clock) *Sandboxes {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Sandboxes{provider: provider, store: store, clock: clock, running: map[uuid.UUID]int{}, gets: map[uuid.UUID]uint64{}}
}

// Replacement says why Get made a new sandbox where the session had one.
type Replacement int

const (
	// NotReplaced: the sandbox is the session's existing one, or its first.
	NotReplaced Replacement = iota
	// ReplacedIdle: the janitor killed the session's sandbox after it sat paused.
	ReplacedIdle
	// ReplacedLost: the stored sandbox was gone (killed, or lost with its machine).
	ReplacedLost
)

// Notice is what the transcript says of the replacement, "" for NotReplaced.
func (r Replacement) Notice() string {
	switch r {
	case ReplacedIdle:
		return "The previous sandbox was stopped after it sat idle; this is a new one: files from before are gone."
	case ReplacedLost:
		return "The previous sandbox was lost; this is a new one: files from before are gone."
	}
	return ""
}

// Get returns the session's sandbox, resumed if it was paused, or a new one; the
// Replacement says whether the new one replaces one the session had. Using it counts
// as using the sandbox: its idle time starts again.
func (s *Sandboxes) Get(ctx context.Context, sessionID uuid.UUID) (sandbox.Sandbox, Replacement, error) {
	defer s.lock(sessionID)()
	s.mu.Lock()
	if s.running[sessionID] > 0 {
		s.gets[sessionID]++
	}
	s.mu.Unlock()
	id, err := s.store.SessionSandbox(ctx, sessionID)
	if err != nil {
		return nil, NotReplaced, fmt.Errorf("look up the session's sandbox: %w", err)
	}
	replaced := NotReplaced
	if id != "" {
		sb, err := s.provider.Connect(ctx, id)
		if err == nil {
			if err := s.store.SessionSandboxUsed(ctx, sessionID, s.clock.Now()); err != nil {
				return nil, NotReplaced, fmt.Errorf("mark the session's sandbox used: %w", err)
			}
			return sb, NotReplaced, nil
		}
		if !errors.Is(err, sandbox.ErrGone) {
			return nil, NotReplaced, fmt.Errorf("connect to sandbox %s: %w", id, err)
		}
		replaced = ReplacedLost
	} else {
		killed, err := s.store.SessionSandboxKilledAt(ctx, sessionID)
		if err != nil {
			return nil, NotReplaced, fmt.Errorf("look up the session's sandbox: %w", err)
		}
		if killed != nil {
			replaced = ReplacedIdle
		}
	}
	sb, err := s.provider.Create(ctx)
	if err != nil {
		return nil, NotReplaced, fmt.Errorf("create a sandbox: %w", err)
	}
	if err := s.store.SessionSetSandbox(ctx, sessionID, sb.ID(), s.clock.Now()); err != nil {
		_ = s.provider.Kill(context.WithoutCancel(ctx), sb.ID())
		return nil, NotReplaced, fmt.Errorf("store the session's sandbox: %w", err)
	}
	return sb, replaced, nil
}

// Begin counts a tool call running for the session until the returned end is called:
// the janitor never pauses a sandbox with a call running. end records the sandbox as
// used then, when the call used it, so its idle time counts from the end of the call.
func (s *Sandboxes) Begin(sessionID uuid.UUID) (end func(context.Context) error) {
	s.mu.Lock()
	s.running[sessionID]++
	start := s.gets[sessionID]
	s.mu.Unlock()
	var once sync.Once
	return func(ctx context.Context) error {
		var err error
		once.Do(func() {
			s.mu.Lock()
			used := s.gets[sessionID] != start
			if s.running[sessionID]--; s.running[sessionID] <= 0 {
				delete(s.running, sessionID)
				delete(s.gets, sessionID)
			}
			s.mu.Unlock()
			if used {
				err = s.store.SessionSandboxUsed(ctx, sessionID, s.clock.Now())
			}
		})
		return err
	}
}

// busy reports whether a tool call of the session runs in this process.
func (s *Sandboxes) busy(sessionID uuid.UUID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[sessionID] > 0
}

// Pause pauses the session's sandbox, if it has a live one, and records when: the
// janitor kills it SandboxKillAfter later unless something resumes it.
func (s *Sandboxes) Pause(ctx context.Context, sessionID uuid.UUID) error {
	return s.each(ctx, sessionID, func(ctx context.Context, id string) error {
		if err := s.provider.Pause(ctx, id); err != nil {
			return err
		}
		return s.store.SessionSandboxPaused(ctx, sessionID, id, s.clock.Now())
	})
}

// Resume resumes the session's sandbox, if it has a live one: it runs, and its idle
// time starts again.
func (s *Sandboxes) Resume(ctx context.Context, sessionID uuid.UUID) error {
	return s.each(ctx, sessionID, func(ctx context.Context, id string) error {
		if _, err := s.provider.Connect(ctx, id); err != nil {
			return err
		}
		return s.store.SessionSandboxUsed(ctx, sessionID, s.clock.Now())
	})
}

// Kill kills the session's sandbox. Its next use creates a new one.
func (s *Sandboxes) Kill(ctx context.Context, sessionID uuid.UUID) error {
	return s.each(ctx, sessionID, s.provider.Kill)
}

func (s *Sandboxes) each(ctx context.Context, sessionID uuid.UUID, do func(context.Context, string) error) error {
	defer s.lock(sessionID)()
	id, err := s.store.SessionSandbox(ctx, sessionID)
	if err != nil || id == "" {
		return err
	}
	if err := do(ctx, id); err != nil && !errors.Is(err, sandbox.ErrGone) {
		return err
	}
	return nil
}

// pauseIdle is the janitor's pause of sandboxID, unused since idleBefore. It does
// nothing, and reports false, when a tool call of the session runs in this process or
// the stored sandbox changed or was used since.
func (s *Sandboxes) pauseIdle(ctx context.Context, sessionID uuid.UUID, sandboxID string, idleBefore time.Time) (bool, error) {
	defer s.lock(sessionID)()
	if s.busy(sessionID) {
		return false, nil
	}
	// Recorded first: a sandbox whose record says running is never frozen.
	ok, err := s.store.SessionSandboxPauseIdle(ctx, sessionID, sandboxID, idleBefore, s.clock.Now())
	if err != nil || !ok {
		return false, err
	}
	if err := s.provider.Pause(ctx, sandboxID); err != nil && !errors.Is(err, sandbox.ErrGone) {
		// Not paused: a provider that cannot stop every process leaves them running. The
		// record says so again, as if used now, so that it is not killed as paused
		// KillAfter from now and a later pass tries again once it sat idle IdlePause.
		if uerr := s.store.SessionSandboxUsed(ctx, sessionID, s.clock.Now()); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return false, fmt.Errorf("pause sandbox %s: %w", sandboxID, err)
	}
	return true, nil
}

// killPaused is the janitor's kill of sandboxID, paused since pausedBefore: the sandbox
// ends and the session forgets it. It does nothing, and reports false, when a tool call
// of the session runs in this process or the stored sandbox changed or was resumed.
func (s *Sandboxes) killPaused(ctx context.Context, sessionID uuid.UUID, sandboxID string, pausedBefore time.Time) (bool, error) {
	defer s.lock(sessionID)()
	if s.busy(sessionID) {
		return false, nil
	}
	// Forgotten first: a session never names a sandbox that is gone because of us; a
	// kill that fails leaves a process the next start-up's sweep ends.
	ok, err := s.store.SessionSandboxKilled(ctx, sessionID, sandboxID, pausedBefore, s.clock.Now())
	if err != nil || !ok {
		return false, err
	}
	if err := s.provider.Kill(ctx, sandboxID); err != nil && !errors.Is(err, sandbox.ErrGone) {
		return true, fmt.Errorf("kill sandbox %s: %w", sandboxID, err)
	}
	return true, nil
}
