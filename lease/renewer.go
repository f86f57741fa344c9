package lease

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/service"
)

// Renewer is the service that keeps this node's leases: every TTL/3 it extends all of
// them in one statement, and stops the actors whose lease is another node's now (a
// node that was paused or cut off past the TTL finds out here, if its writes have not
// been refused first). Start it before the hub, so it renews while the hub's actors
// stop (and give their leases back) at shutdown.
//
// A renewal that fails (the database does not answer) stops no actor, however long the
// failures last: each is logged, with how long renewals have failed, and counted
// (chatd_lease_renewal_failures_total). The actors go on, and every write they make
// carries their lease's token: if another node took a session meanwhile, the first
// write that reaches the database is refused and stops that actor, and the first
// renewal that succeeds names every lease taken, whose actors it stops, and extends the
// others (a lease that expired but that nobody took is still this node's). Stopping
// every actor instead would throw away what they had not stored yet, for sessions that
// nobody took. After a failure the next renewal comes sooner than TTL/3 (retryInterval),
// so that when the database answers again this node renews what it holds before the
// other nodes' rescue passes, every TTL/3, find those leases expired.
type Renewer struct {
	cfg  Config
	loop service.Loop
	// failingSince is when the renewals began to fail; zero while they succeed.
	failingSince time.Time
}

// NewRenewer returns an unstarted renewer.
func NewRenewer(cfg Config) *Renewer {
	cfg.defaults()
	return &Renewer{cfg: cfg}
}

// Start starts the renewals: one at once, then every TTL/3, and every retryInterval
// while they fail.
func (r *Renewer) Start(context.Context) error {
	return r.loop.Start(func(stop <-chan struct{}) {
		for {
			next := r.cfg.TTL / 3
			if !r.Renew(context.Background()) {
				next = r.retryInterval()
			}
			t := r.cfg.Clock.NewTimer(next)
			select {
			case <-t.Chan():
			case <-stop:
				t.Stop()
				return
			}
		}
	})
}

// retryInterval is how soon a renewal that failed is tried again: within a second, and
// always well before the next rescue pass of another node (TTL/3), but not so often
// that a short TTL has this node hammer a database that does not answer.
func (r *Renewer) retryInterval() time.Duration {
	return min(time.Second, r.cfg.TTL/6)
}

// Stop stops the renewals. The actors give their leases back as they stop (the hub's
// shutdown, before this); one whose release failed expires a TTL after its last renewal.
// Nothing else is released: a process that restarted on this node's address may hold
// the same node's leases already.
func (r *Renewer) Stop(ctx context.Context) error { return r.loop.Stop(ctx) }

// Renew makes one renewal, and reports whether the database answered: the running
// service calls it every TTL/3, and sooner after a failure. Leases another node took
// are reported to the holder (Holder.Lost); a failure is logged and counted, and
// reported to nobody.
func (r *Renewer) Renew(ctx context.Context) bool {
	node := r.cfg.Node()
	if node == "" {
		return true
	}
	held := r.cfg.Holder.Held()
	rctx, cancel := context.WithTimeout(ctx, r.cfg.TTL/3)
	renewed, err := r.cfg.Store.LeaseRenew(rctx, node, held, r.cfg.TTL)
	cancel()
	now := r.cfg.Clock.Now()
	if err != nil {
		if r.failingSince.IsZero() {
			r.failingSince = now
		}
		r.cfg.Metrics.renewalFailures.Inc()
		r.cfg.Logger.Error().Err(err).Dur("failing_for", now.Sub(r.failingSince)).Int("sessions", len(held)).
			Msg("could not renew this node's session leases; the actors go on, their writes fenced")
		return false
	}
	answered := !r.failingSince.IsZero()
	if answered {
		r.cfg.Logger.Warn().Dur("failed_for", now.Sub(r.failingSince)).Msg("renewing this node's session leases again")
		r.failingSince = time.Time{}
	}
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
		// Telling the actors has its own time: the renewal's may be spent.
		lctx, lcancel := context.WithTimeout(context.Background(), r.cfg.TTL/3)
		defer lcancel()
		r.cfg.Logger.Warn().Int("sessions", len(lost)).Msg("leases taken over by other nodes: stopping their actors here")
		r.cfg.Holder.Lost(lctx, lost)
	}
	if answered && r.cfg.Answered != nil {
		r.cfg.Answered() // after the actors whose sessions were taken have let go
	}
	return true
}
