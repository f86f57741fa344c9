package hub

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/conversation"
)

// ErrClosed is returned once Shutdown has begun.
var ErrClosed = errors.New("hub is shut down")

// shutdownParallelism bounds how many actors store their interrupted runs at once.
const shutdownParallelism = 16

// Hub finds or starts the actor of a session.
type Hub struct {
	cfg conversation.Config
	log zerolog.Logger

	metrics *Metrics // nil for none

	mu     sync.Mutex
	actors map[uuid.UUID]*conversation.Actor
	// deleting holds the sessions being deleted (Sessions.Delete); each channel is closed
	// when its deletion is over. No actor is started for them meanwhile.
	deleting map[uuid.UUID]chan struct{}
	closed   bool
}

// New returns a hub whose actors share cfg.
func New(cfg conversation.Config, log zerolog.Logger, opts ...Option) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RunCounts == nil {
		cfg.RunCounts = &conversation.RunCounts{} // one user's runs are in several sessions
	}
	h := &Hub{
		cfg:      cfg,
		log:      log.With().Str("component", "hub").Logger(),
		actors:   make(map[uuid.UUID]*conversation.Actor),
		deleting: make(map[uuid.UUID]chan struct{}),
	}
	for _, o := range opts {
		o(h)
	}
	h.countActors()
	return h, nil
}

// Hello subscribes req.Subscriber to session id, starting its actor if needed, and returns
// the actor for the connection's later commands. Errors are those of Actor.Hello, and
// ErrClosed. On an error the actor the hello reached is returned too (nil if none): when
// ctx ended, the hello may still have subscribed, and the caller should unsubscribe.
func (h *Hub) Hello(ctx context.Context, id uuid.UUID, req conversation.HelloRequest) (*conversation.Actor, conversation.HelloResult, error) {
	// An actor can stop between get and Hello (idle eviction); its replacement is a new
	// incarnation, so the retry cannot meet the same stopped actor again.
	for attempt := 0; ; attempt++ {
		a, err := h.get(ctx, id)
		if err != nil {
			return nil, conversation.HelloResult{}, err
		}
		res, err := a.Hello(ctx, req)
		if errors.Is(err, conversation.ErrStopped) && attempt < 8 {
			continue
		}
		return a, res, err
	}
}

// Continue continues a run of session id from its checkpoint (see Actor.Continue),
// starting the session's actor if needed. Errors are those of Actor.Continue, and
// ErrClosed.
func (h *Hub) Continue(ctx context.Context, id uuid.UUID, req conversation.ContinueRequest) (res conversation.SendResult, err error) {
	err = h.Do(ctx, id, func(a *conversation.Actor) (err error) {
		res, err = a.Continue(ctx, req)
		return err
	})
	return res, err
}

// get returns the actor of session id, starting one if needed. While the session is
// being deleted it waits for the deletion to end: an actor started meanwhile could load
// the session before its rows are gone and serve it afterwards. The actor started after
// a deletion loads the tombstone and refuses every hello.
func (h *Hub) get(ctx context.Context, id uuid.UUID) (*conversation.Actor, error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, ErrClosed
		}
		if done, ok := h.deleting[id]; ok {
			h.mu.Unlock()
			select {
			case <-done:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		a, ok := h.actors[id]
		if !ok {
			a = conversation.Start(h.cfg, id, h.forget)
			h.actors[id] = a
			h.countActors()
			h.log.Debug().Str("session_id", id.String()).Str("epoch", a.Epoch()).Msg("started conversation")
		}
		h.mu.Unlock()
		return a, nil
	}
}

// beginDelete marks session id as being deleted, once any other deletion of it is over,
// and returns its live actor (nil if none) and the function that ends the mark. The
// actor stays in the hub until it stops: it leaves as an evicted one does.
func (h *Hub) beginDelete(ctx context.Context, id uuid.UUID) (*conversation.Actor, func(), error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, nil, ErrClosed
		}
		if done, ok := h.deleting[id]; ok {
			h.mu.Unlock()
			select {
			case <-done:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		h.deleting[id] = done
		a := h.actors[id]
		h.mu.Unlock()
		return a, func() {
			h.mu.Lock()
			delete(h.deleting, id)
			h.mu.Unlock()
			close(done)
		}, nil
	}
}

// forget is called by an actor that is evicting itself, from its own goroutine. Removing
// it and stopping it under the lock means get never returns a stopped actor and never
// starts a second one while the first still takes intents.
func (h *Hub) forget(a *conversation.Actor, stop func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.actors[a.SessionID()] == a {
		delete(h.actors, a.SessionID())
		h.countActors()
	}
	stop()
}

func (h *Hub) now() time.Time {
	if h.cfg.Clock != nil {
		return h.cfg.Clock.Now()
	}
	return time.Now()
}

// Len returns the number of live actors.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.actors)
}

// Lookup returns the live actor of a session, if there is one.
func (h *Hub) Lookup(id uuid.UUID) (*conversation.Actor, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.actors[id]
	return a, ok
}

// Shutdown stops every actor (see conversation.Actor.Stop): active runs are left for the
// next process (suspended) or, without SuspendOnStop, ended interrupted, what the actors
// queued is stored within ctx, and subscribers are dropped with
// conversation.DropShutdown. It returns when all actors and their run goroutines are
// gone, or ctx ends. New hellos fail with ErrClosed from the start.
func (h *Hub) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	h.closed = true
	actors := make([]*conversation.Actor, 0, len(h.actors))
	for _, a := range h.actors {
		actors = append(actors, a)
	}
	clear(h.actors)
	h.countActors()
	h.mu.Unlock()

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, shutdownParallelism)
	)
	for _, a := range actors {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := a.Stop(ctx)
			if err == nil {
				err = a.Wait(ctx)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shut down conversations: %w", err)
	}
	return nil
}

// Held returns the sessions whose actors hold a lease on this node, with its token (see
// lease.Holder).
func (h *Hub) Held() map[uuid.UUID]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	held := make(map[uuid.UUID]int64, len(h.actors))
	for id, a := range h.actors {
		if t := a.LeaseToken(); t != 0 {
			held[id] = t
		}
	}
	return held
}

// Lost stops the actors of sessions whose lease (with the token given) another node
// holds now: their clients are closed with 4010 and reconnect to the holder. An actor
// that holds another token (it acquired anew meanwhile) is left alone.
func (h *Hub) Lost(ctx context.Context, lost map[uuid.UUID]int64) {
	for id, token := range lost {
		if a, ok := h.Lookup(id); ok {
			a.LeaseLost(ctx, token)
		}
	}
}

// Rescue takes up session id, whose run no live node drives (see Actor.Rescue).
func (h *Hub) Rescue(ctx context.Context, id uuid.UUID) error {
	return h.Do(ctx, id, func(a *conversation.Actor) error { return a.Rescue(ctx) })
}

// Do calls f with session id's actor, starting it if needed, and again with a new one
// when the actor stopped meanwhile (idle eviction): for commands of callers that reach
// a session without subscribing to it (the HTTP APIs). f's errors are returned as they
// are; conversation.ErrStopped after a few tries, and ErrClosed.
func (h *Hub) Do(ctx context.Context, id uuid.UUID, f func(*conversation.Actor) error) error {
	for attempt := 0; ; attempt++ {
		a, err := h.get(ctx, id)
		if err != nil {
			return err
		}
		err = f(a)
		if errors.Is(err, conversation.ErrStopped) && attempt < 8 {
			continue
		}
		return err
	}
}
