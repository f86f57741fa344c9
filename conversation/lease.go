package conversation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/chatd/chatd/store"
)

// LeaseConfig makes a process one node of several on a database: each actor holds its
// session's lease while it runs (see store.Lease), and every write it makes is fenced by
// the lease's token.
type LeaseConfig struct {
	// Node returns this process's id among the nodes, and Addr where other nodes reach
	// it (host:port of its listener). Read at each acquisition: they may be known only
	// once the listener has started. A node that restarts under the same id takes its
	// sessions back at once instead of after their leases expire.
	Node func() string
	Addr func() string
	// TTL is how long a lease lasts unless renewed: a node that dies holds its sessions
	// this long at most.
	TTL time.Duration
}

// ErrElsewhere is the error of an intent on a session another node holds: the actor
// that got it has stopped. errors.As finds the *ElsewhereError, which says where.
var ErrElsewhere = errors.New("the session is held by another node")

// ElsewhereError names the node holding a session's lease.
type ElsewhereError struct {
	Lease store.Lease
}

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("the session is held by node %s at %s", e.Lease.Node, e.Lease.Addr)
}

func (e *ElsewhereError) Unwrap() error { return ErrElsewhere }

// LeaseToken returns the token of the lease the actor holds, 0 for none (yet). Safe from
// any goroutine.
func (a *Actor) LeaseToken() int64 { return a.leaseToken.Load() }

// LeaseLost tells the actor that its lease acquired with token is another node's now (a
// renewal did not find it): it stops as moved. An actor that holds another token, or has
// stopped, ignores it.
func (a *Actor) LeaseLost(ctx context.Context, token int64) {
	_, _ = call(ctx, a, func(r chan result[struct{}]) intent { return &leaseLostIntent{token, r} })
}

type leaseLostIntent struct {
	token int64
	reply chan result[struct{}]
}

// loadError is the error of an intent whose session could not be loaded: where the
// session is, when another node holds it (the actor then stops), else a storage error.
func (a *Actor) loadError(err error) error {
	if ee := (*ElsewhereError)(nil); errors.As(err, &ee) {
		a.moved("another node holds the session")
		return ee
	}
	return a.storageError("load the session", err)
}

// moved stops an actor that does not, or no longer, hold its session's lease: another
// node does, and any write from here would be refused. The run's goroutine is stopped
// without a write (the new holder continues the run from what is stored), the
// subscribers are let go with DropMoved (they reconnect, and reach the new holder), and
// writes still to be retried are dropped: the new holder's actor settles what they were
// about. Idempotent.
func (a *Actor) moved(why string) {
	if a.stopped {
		return
	}
	if a.run != nil {
		a.run.suspend()
		clear(a.run.approvals)
		a.countAs(a.run, "")
		a.run = nil
	}
	for sub := range a.subs {
		delete(a.subs, sub)
		sub.Dropped(DropMoved)
	}
	a.journal.q.Discard()
	a.journal.recent.forget()
	a.journal.setToken(0)
	a.logger().Warn().Str("why", why).Msg("stopping: the session's lease is another node's")
	a.cfg.Metrics.movedAway.Inc()
	a.evicted = true // the hub forgets it, as it does an idle one
	a.stopped = true
}

// Rescue takes up the session for a node whose run no live node drives (its node died
// or shut down): the actor acquires the session's lease (*ElsewhereError when another
// node has it) and continues the session's streaming run from its checkpoint, or, when
// runs are not continued (no SuspendOnStop), ends it interrupted.
func (a *Actor) Rescue(ctx context.Context) error {
	_, err := call(ctx, a, func(r chan result[struct{}]) intent { return &rescueIntent{r} })
	return err
}

type rescueIntent struct{ reply chan result[struct{}] }

func (a *Actor) rescue() error {
	if err := a.load(); err != nil {
		return a.loadError(err)
	}
	if a.session == nil || a.session.DeletedAt != nil || a.run != nil {
		return nil
	}
	if a.cfg.SuspendOnStop {
		if err := a.takeUpSuspended(); err != nil {
			return a.storageError("continue the session's run", err)
		}
		return nil
	}
	r, err := a.journal.runLatest()
	if errors.Is(err, store.ErrNotFound) || (err == nil && !r.Status.Active()) {
		return nil
	}
	if err != nil {
		return a.storageError("read the session's run", err)
	}
	// The segment that was open keeps the text its stream log holds.
	_, own, err := a.userMessageOf(r)
	if err != nil {
		return err
	}
	if _, err := a.seam(own); err != nil {
		return a.storageError("store the interrupted reply", err)
	}
	_, err = a.interrupt(r, "the server stopped during this run")
	return err
}
