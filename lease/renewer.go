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
// know what it holds, and stops every actor. Stop gives back every lease the node still
// holds, so a rolling restart moves sessions without waiting for the TTL: start it
// before the hub, so it stops after it.
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

// Stop stops the renewals and releases every lease the node holds.
func (r *Renewer) Stop(ctx context.Context) error {
	if err := r.loop.halt(ctx); err != nil {
		return err
	}
	node := r.cfg.Node()
	if node == "" {
		return nil
	}
	n, err := r.cfg.Store.LeaseReleaseAll(ctx, node)
	if err != nil {
		return err
	}
	if n > 0 {
		r.cfg.Logger.Info().Int64("leases", n).Msg("released this node's session leases")
	}
	return nil
}

// Renew makes one renewal: the running service calls it every TTL/3.
func (r *Renewer) Renew(ctx context.Context) {
	node := r.cfg.Node()
	if node == "" {
		return
	}
	held := r.cfg.Holder.Held()
	now := r.cfg.Clock.Now()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.TTL/3)
	defer cancel()
	renewed, err := r.cfg.Store.LeaseRenew(ctx, node, now, r.cfg.TTL)
	if err != nil {
		r.cfg.Logger.Error().Err(err).Msg("could not renew this node's session leases")
		if now.Sub(r.lastOK) >= r.cfg.TTL && len(held) > 0 {
			// Some may have expired and been taken: the actors stop rather than work on
			// sessions that may be another node's (their writes would be refused).
			ids := make([]uuid.UUID, 0, len(held))
			for id := range held {
				ids = append(ids, id)
			}
			r.cfg.Logger.Warn().Int("sessions", len(ids)).Msg("stopping every actor: the leases could not be renewed for a whole TTL")
			r.cfg.Holder.Lost(ctx, ids)
		}
		return
	}
	r.lastOK = now
	tokens := make(map[uuid.UUID]int64, len(renewed))
	for _, h := range renewed {
		tokens[h.SessionID] = h.Token
	}
	var lost []uuid.UUID
	for id, token := range held {
		if token != 0 && tokens[id] != token {
			lost = append(lost, id)
		}
	}
	if len(lost) > 0 {
		r.cfg.Logger.Warn().Int("sessions", len(lost)).Msg("leases taken over by other nodes: stopping their actors here")
		r.cfg.Holder.Lost(ctx, lost)
	}
}
