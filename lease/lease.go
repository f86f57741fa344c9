// Package lease keeps a node's session leases: several chatd nodes share one database,
// and each session is owned by the one node holding its lease (store.Lease). The
// Renewer extends every lease the node holds in one statement per interval and stops
// the actors whose lease another node took; the Rescuer finds sessions whose run no
// live node drives (their node died or shut down) and takes them up, so a node's death
// costs its runs a few seconds, not their end.
package lease

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/store"
)

// Holder is what runs the sessions of this node: the hub.
type Holder interface {
	// Held returns the sessions whose actors hold a lease here, with its token.
	Held() map[uuid.UUID]int64
	// Lost stops the actors of sessions whose lease this node no longer holds: each
	// only if it still holds the token given (an actor that acquired anew is left).
	Lost(ctx context.Context, lost map[uuid.UUID]int64)
	// Rescue takes up session id, whose run no live node drives: it acquires the
	// session's lease and continues (or ends) the run. An error wrapping
	// conversation.ErrElsewhere means another node took it first.
	Rescue(ctx context.Context, id uuid.UUID) error
}

// Store is what the services need of the database.
type Store interface {
	// Leases expire by the database's clock: nothing here passes a time of this node's.
	LeaseRenew(ctx context.Context, node string, held map[uuid.UUID]int64, ttl time.Duration) ([]store.HeldLease, error)
	SessionsToRescue(ctx context.Context, own string, waiting bool, limit int) ([]uuid.UUID, error)
}

// Config configures the services of one node.
type Config struct {
	Store  Store
	Holder Holder
	// Node returns this node's id, as its actors acquire leases with ("" while it is
	// not known yet: nothing is renewed or rescued then).
	Node func() string
	// TTL is a lease's life: renewals and rescue passes come every TTL/3 (a renewal
	// that failed is tried again sooner, see Renewer).
	TTL time.Duration
	// Clock times the services' intervals; it never judges a lease's expiry, which is
	// the database's.
	Clock  clockwork.Clock
	Logger zerolog.Logger
	// Metrics counts what the services do; nil counts into metrics nobody exposes.
	Metrics *Metrics
	// RescueBatch bounds the sessions one rescue pass takes up (default 50); a full
	// pass is followed at once by another.
	RescueBatch int
	// RescueWaiting takes up runs waiting for a person too: when runs are not continued
	// (CHATD_RECOVER=interrupt) the rescue ends them, and nothing else would.
	RescueWaiting bool
	// Answered, when set, is called after a renewal that succeeds where the ones before
	// it failed: the database answers again. chatd retries its queued writes then
	// (journal.Writer.Kick) rather than after their backoff.
	Answered func()
	// Rescued, when set, is told the sessions each rescue pass took up (for tests).
	Rescued func(ids []uuid.UUID)
}

func (c *Config) defaults() {
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.RescueBatch <= 0 {
		c.RescueBatch = 50
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
}
