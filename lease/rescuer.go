package lease

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/service"
)

// Rescuer is the service that takes up the runs no live node drives: a session with a
// streaming run whose lease expired (its node died) or was given back (its node shut
// down) is acquired by the first node whose pass finds it, and its run continues from
// its checkpoint, with no client needed. A pass runs at start-up and every TTL/3.
type Rescuer struct {
	cfg  Config
	loop service.Loop
	// passed is set after the first pass that knew the node's id: only that one takes
	// up the sessions whose lease names this node (its previous life's).
	passed bool
}

// NewRescuer returns an unstarted rescuer.
func NewRescuer(cfg Config) *Rescuer {
	cfg.defaults()
	return &Rescuer{cfg: cfg}
}

// Start makes a first pass, before it returns (start it before the listener, and what a
// dead life of this node left is taken up before any client is served), then one every
// TTL/3.
func (r *Rescuer) Start(ctx context.Context) error {
	r.Pass(ctx)
	return r.loop.Start(func(stop <-chan struct{}) {
		t := r.cfg.Clock.NewTicker(r.cfg.TTL / 3)
		defer t.Stop()
		for {
			select {
			case <-t.Chan():
				r.Pass(context.Background())
			case <-stop:
				return
			}
		}
	})
}

// Stop stops the passes, waiting for the one under way.
func (r *Rescuer) Stop(ctx context.Context) error { return r.loop.Stop(ctx) }

// Pass takes up every session to rescue it finds, and returns those it took.
func (r *Rescuer) Pass(ctx context.Context) []uuid.UUID {
	node := r.cfg.Node()
	if node == "" {
		return nil
	}
	own := ""
	if !r.passed {
		own = node
	}
	var took []uuid.UUID
	handled := map[uuid.UUID]bool{}
	for {
		ids, err := r.cfg.Store.SessionsToRescue(ctx, own, r.cfg.RescueWaiting, r.cfg.RescueBatch)
		if err != nil {
			r.cfg.Logger.Error().Err(err).Msg("could not look for runs to rescue")
			break
		}
		n := 0
		for _, id := range ids {
			if handled[id] {
				continue // taken up by this pass already (its lease names this node)
			}
			handled[id] = true
			err := r.cfg.Holder.Rescue(ctx, id)
			switch {
			case err == nil:
				took = append(took, id)
				n++
			case errors.Is(err, conversation.ErrElsewhere):
				// Another node took it first.
			default:
				r.cfg.Logger.Error().Err(err).Str("session_id", id.String()).Msg("could not take up a session whose node is gone")
			}
		}
		if len(ids) < r.cfg.RescueBatch || n == 0 {
			break
		}
	}
	r.passed = true
	if len(took) > 0 {
		r.cfg.Logger.Warn().Int("sessions", len(took)).Msg("took up runs whose node died or shut down")
	}
	if r.cfg.Rescued != nil {
		r.cfg.Rescued(took)
	}
	return took
}
