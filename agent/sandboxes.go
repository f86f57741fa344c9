package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/chatd/chatd/agent/sandbox"
)

// SandboxStore keeps each session's sandbox id (chatd: the sessions table). The store
// package implements it; the agent never sees the database itself.
type SandboxStore interface {
	SessionSandbox(ctx context.Context, sessionID uuid.UUID) (string, error)
	SessionSetSandbox(ctx context.Context, sessionID uuid.UUID, sandboxID string) error
}

// Sandboxes gives each session one sandbox, reused by its runs: the id is stored with the
// session, and a session whose sandbox was killed gets a new one when it next needs one.
type Sandboxes struct {
	provider sandbox.Provider
	store    SandboxStore

	mu    sync.Mutex
	locks map[uuid.UUID]*sessionLock
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

// NewSandboxes returns session sandboxes from provider, their ids kept in store.
func NewSandboxes(provider sandbox.Provider, store SandboxStore) *Sandboxes {
	return &Sandboxes{provider: provider, store: store}
}

// Get returns the session's sandbox, resumed if it was paused, or a new one.
func (s *Sandboxes) Get(ctx context.Context, sessionID uuid.UUID) (sandbox.Sandbox, error) {
	defer s.lock(sessionID)()
	id, err := s.store.SessionSandbox(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("look up the session's sandbox: %w", err)
	}
	if id != "" {
		sb, err := s.provider.Connect(ctx, id)
		if err == nil {
			return sb, nil
		}
		if !errors.Is(err, sandbox.ErrGone) {
			return nil, fmt.Errorf("connect to sandbox %s: %w", id, err)
		}
	}
	sb, err := s.provider.Create(ctx)
	if err != nil {
		return nil, fmt.Errorf("create a sandbox: %w", err)
	}
	if err := s.store.SessionSetSandbox(ctx, sessionID, sb.ID()); err != nil {
		_ = s.provider.Kill(context.WithoutCancel(ctx), sb.ID())
		return nil, fmt.Errorf("store the session's sandbox: %w", err)
	}
	return sb, nil
}

// Pause pauses the session's sandbox, if it has a live one.
func (s *Sandboxes) Pause(ctx context.Context, sessionID uuid.UUID) error {
	return s.each(ctx, sessionID, s.provider.Pause)
}

// Resume resumes the session's sandbox, if it has a live one.
func (s *Sandboxes) Resume(ctx context.Context, sessionID uuid.UUID) error {
	return s.each(ctx, sessionID, func(ctx context.Context, id string) error {
		_, err := s.provider.Connect(ctx, id)
		return err
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
