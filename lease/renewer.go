package lease

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Renewer is the service that keeps this node's leases: every TTL/3 it extends all of
// them in one statement, and stops the actors whose lease is another node's now (a
// node that was paused or cut off past the TTL finds out here, if its writes have not
// been refused first). When renewals keep failing for a whole TTL it can no longer
// know what it holds, and stops every actor. Start it before the hub, so it renews
// while the hub's actors stop (and give their leases back) at shutdown.
type Renewer struct {
	cfg    Config
	loop   loop
	lastOK time.Time
}

// NewRenewer returns an unstarted renewer.
func NewRenewer(cfg Config) *Renewer {
	cfg.defaults()
	return &Renewer{cfg: cfg}
}

// Start starts the renewals.
func (r *Renewer) Start(context.Context) error {
	r.lastOK = r.cfg.Clock.Now()
	return r.loop.start(func(stop <-chan struct{}) {
		every(r.cfg.Clock, r.cfg.TTL/3, stop, func() { r.Renew(context.Background()) })
	})
}

// Stop stops the renewals. The actors give their leases back as they stop (the hub's
// shutdown, before this); one whose release failed expires a TTL after its last renewal.
// Nothing else is released: a process that restarted on this node's address may hold
// the same node's leases already.
func (r *Renewer) Stop(ctx context.Context) error { return r.loop.halt(ctx) }

// Renew makes one renewal: the running service calls it every TTL/3.
func (r *Renewer) Renew(ctx context.Context) {
	node := r.cfg.Node()
	if node == "" {
		return
	}
	held := r.cfg.Holder.Held()
	now := r.cfg.Clock.Now()
	rctx, cancel := context.WithTimeout(ctx, r.cfg.TTL/3)
	renewed, err := r.cfg.Store.LeaseRenew(rctx, node, held, r.cfg.TTL)
	cancel()
	// Telling the actors has its own time: the renewal's may be spent.
	lctx, lcancel := context.WithTimeout(context.Background(), r.cfg.TTL/3)
	defer lcancel()
	if err != nil {
		r.cfg.Logger.Error().Err(err).Msg("could not renew this node's session leases")
		if now.Sub(r.lastOK) >= r.cfg.TTL && len(held) > 0 {
			// Some may have expired and been taken: the actors stop rather than work on
			// sessions that may be another node's (their writes would be refused).
			r.cfg.Logger.Warn().Int("sessions", len(held)).Msg("stopping every actor: the leases could not be renewed for a whole TTL")
			r.cfg.Holder.Lost(lctx, held)
		}
		return
	}
	r.lastOK = now
	tokens := make(map[uuid.UUID]int64, len(renewed))
	for _, h := range renewed {
		tokens[h.SessionID] = h.Token
	}
	lost := map[uuid.UUID]int64{}
	for id, token := range held {
		if token != 0 && tokens[id] != token {
			lost[id] = token
		}
	}
	if len(lost) > 0 {
		r.cfg.Logger.Warn().Int("sessions", len(lost)).Msg("leases taken over by other nodes: stopping their actors here")
		r.cfg.Holder.Lost(lctx, lost)
	}
}
