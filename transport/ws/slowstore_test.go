package ws_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store"
)

// slowStore makes every call to the store it wraps wait first, as on a database far
// away or under load: for a delay (delayed), or until a test lets it go (storeGate).
type slowStore struct {
	conversation.Store
	wait func(ctx context.Context) error
}

// delayed waits d, or until ctx ends.
func delayed(d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// storeGate holds store calls while it is closed. It starts open.
type storeGate struct {
	mu      sync.Mutex
	closed  chan struct{} // nil while open; closed by open
	entered chan struct{} // signalled when a call starts waiting
}

func newStoreGate() *storeGate { return &storeGate{entered: make(chan struct{}, 1)} }

// hold makes the calls from now on wait until open.
func (g *storeGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

// open lets every waiting call and every later one through.
func (g *storeGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

// awaitEntered waits until a call is held at the gate.
func (g *storeGate) awaitEntered(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-ctx.Done():
		t.Fatal("no store call reached the gate")
	}
}

func (g *storeGate) wait(ctx context.Context) error {
	g.mu.Lock()
	ch := g.closed
	g.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s slowStore) SessionCreateLimited(ctx context.Context, sess chat.Session, max int) (chat.Session, error) {
	if err := s.wait(ctx); err != nil {
		return chat.Session{}, err
	}
	return s.Store.SessionCreateLimited(ctx, sess, max)
}

func (s slowStore) SessionOpen(ctx context.Context, id uuid.UUID, req store.OpenRequest) (store.Opened, error) {
	if err := s.wait(ctx); err != nil {
		return store.Opened{}, err
	}
	return s.Store.SessionOpen(ctx, id, req)
}

func (s slowStore) MessagesPath(ctx context.Context, id uuid.UUID, leaf *uuid.UUID, before int64, limit int) ([]chat.Message, bool, error) {
	if err := s.wait(ctx); err != nil {
		return nil, false, err
	}
	return s.Store.MessagesPath(ctx, id, leaf, before, limit)
}

func (s slowStore) MessagesByRun(ctx context.Context, runID uuid.UUID) ([]chat.Message, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.MessagesByRun(ctx, runID)
}

func (s slowStore) MessageInsert(ctx context.Context, m chat.Message) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.MessageInsert(ctx, m)
}

func (s slowStore) MessageUpdate(ctx context.Context, m chat.Message, from ...chat.MessageStatus) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.MessageUpdate(ctx, m, from...)
}

func (s slowStore) MessagesSettleRun(ctx context.Context, runID uuid.UUID, status chat.MessageStatus, now time.Time, except ...uuid.UUID) (int64, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.Store.MessagesSettleRun(ctx, runID, status, now, except...)
}

func (s slowStore) RunStartCounted(ctx context.Context, run chat.Run, user chat.Message, maxActive int) (int, error) {
	if err := s.wait(ctx); err != nil {
		return 0, err
	}
	return s.Store.RunStartCounted(ctx, run, user, maxActive)
}

func (s slowStore) RunByRequest(ctx context.Context, sessionID uuid.UUID, requestID string) (chat.Run, error) {
	if err := s.wait(ctx); err != nil {
		return chat.Run{}, err
	}
	return s.Store.RunByRequest(ctx, sessionID, requestID)
}

func (s slowStore) RunUpdate(ctx context.Context, run chat.Run, from ...chat.RunStatus) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.RunUpdate(ctx, run, from...)
}
