package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// ErrFenced is returned by a write made under a fence (WithFence) that is no longer the
// session's lease token: another node acquired the session since. Nothing was written.
var ErrFenced = errors.New("fenced: the session's lease was taken over")

// Lease is who holds a session's lease: one node at a time runs a session's actor.
type Lease struct {
	// Node is the holder's id ("" when no node holds it) and Addr where other nodes reach
	// it, until ExpiresAt.
	Node      string
	Addr      string
	ExpiresAt time.Time
	// Token grows on every acquisition: the fence of the holder's writes.
	Token int64
}

// Live reports whether the lease is held at now.
func (l Lease) Live(now time.Time) bool { return l.Node != "" && now.Before(l.ExpiresAt) }

// HeldLease is one lease a renewal extended.
type HeldLease struct {
	SessionID uuid.UUID
	Token     int64
}

type fenceKey struct{}

// WithFence returns ctx for writes of one session's actor that hold its lease with token:
// each is refused with ErrFenced, and writes nothing, once the session's token is another
// (a node took the session over). Writes without a fence are not checked.
func WithFence(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, token)
}

func fenceOf(ctx context.Context) int64 {
	t, _ := ctx.Value(fenceKey{}).(int64)
	return t
}

// fenced tells, after a fenced write changed no row, whether the fence is why: the
// session's token is no longer ctx's. An error means it cannot tell (the caller reports
// a storage failure, never a deletion).
func (s *Store) fenced(ctx context.Context, sessionID uuid.UUID) (bool, error) {
	fence := fenceOf(ctx)
	if fence == 0 {
		return false, nil
	}
	l, err := s.q.LeaseGet(ctx, s.db, sessionID)
	if errors.Is(mapErr(err), ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check the session's lease: %w", mapErr(err))
	}
	return l.LeaseToken != fence, nil
}

// LeaseAcquire takes session id's lease for node (reached at addr) until now+ttl, unless
// another node holds a lease that has not expired at now. It returns the session and its
// lease: when Lease.Node is not node, another node holds it (nothing changed). It returns
// ErrNotFound for a session that does not exist.
func (s *Store) LeaseAcquire(ctx context.Context, id uuid.UUID, node, addr string, now time.Time, ttl time.Duration) (chat.Session, Lease, error) {
	exp := chat.Timestamp(now.Add(ttl))
	row, err := s.q.LeaseAcquire(ctx, s.db, queries.LeaseAcquireParams{
		ID: id, Node: &node, Addr: &addr, ExpiresAt: &exp, Now: ptr(chat.Timestamp(now)),
	})
	if err == nil {
		return sessionFromRow(row), leaseOf(row.LeaseNode, row.LeaseAddr, row.LeaseExpiresAt, row.LeaseToken), nil
	}
	if !errors.Is(mapErr(err), ErrNotFound) {
		return chat.Session{}, Lease{}, fmt.Errorf("acquire the lease of session %s: %w", id, mapErr(err))
	}
	l, err := s.LeaseGet(ctx, id)
	if err != nil {
		return chat.Session{}, Lease{}, err
	}
	return chat.Session{}, l, nil
}

// LeaseGet returns who holds session id's lease (Node "" for nobody), or ErrNotFound.
func (s *Store) LeaseGet(ctx context.Context, id uuid.UUID) (Lease, error) {
	row, err := s.q.LeaseGet(ctx, s.db, id)
	if err != nil {
		return Lease{}, fmt.Errorf("get the lease of session %s: %w", id, mapErr(err))
	}
	return leaseOf(row.LeaseNode, row.LeaseAddr, row.LeaseExpiresAt, row.LeaseToken), nil
}

// LeaseRenew extends the leases held (session → token) by node to now+ttl, in one
// statement, and returns those it extended: a held lease missing from them is another
// node's now.
func (s *Store) LeaseRenew(ctx context.Context, node string, held map[uuid.UUID]int64, now time.Time, ttl time.Duration) ([]HeldLease, error) {
	exp := chat.Timestamp(now.Add(ttl))
	p := queries.LeaseRenewParams{ExpiresAt: &exp, Node: &node, Ids: make([]uuid.UUID, 0, len(held)), Tokens: make([]int64, 0, len(held))}
	for id, token := range held {
		p.Ids = append(p.Ids, id)
		p.Tokens = append(p.Tokens, token)
	}
	rows, err := s.q.LeaseRenew(ctx, s.db, p)
	if err != nil {
		return nil, fmt.Errorf("renew the leases of node %s: %w", node, mapErr(err))
	}
	renewed := make([]HeldLease, len(rows))
	for i, r := range rows {
		renewed[i] = HeldLease{SessionID: r.ID, Token: r.LeaseToken}
	}
	return renewed, nil
}

// LeaseRelease gives session id's lease back, unless it was acquired again since token.
func (s *Store) LeaseRelease(ctx context.Context, id uuid.UUID, node string, token int64) error {
	if _, err := s.q.LeaseRelease(ctx, s.db, queries.LeaseReleaseParams{ID: id, Node: &node, Token: token}); err != nil {
		return fmt.Errorf("release the lease of session %s: %w", id, mapErr(err))
	}
	return nil
}

// LeaseReleaseAll gives back every lease node holds, and returns how many.
func (s *Store) LeaseReleaseAll(ctx context.Context, node string) (int64, error) {
	n, err := s.q.LeaseReleaseAll(ctx, s.db, &node)
	if err != nil {
		return 0, fmt.Errorf("release the leases of node %s: %w", node, mapErr(err))
	}
	return n, nil
}

// SessionsToRescue returns up to limit sessions with a streaming run and no lease live at
// now: their node died or shut down, and no agent drives the run. own ("" for none) adds
// the sessions whose lease names that node: a node starting again under its id finds
// those of its previous life.
// With waiting, runs waiting for a person count too (when runs are not continued, they
// are ended).
func (s *Store) SessionsToRescue(ctx context.Context, now time.Time, own string, waiting bool, limit int) ([]uuid.UUID, error) {
	ids, err := s.q.SessionsToRescue(ctx, s.db, queries.SessionsToRescueParams{Now: ptr(chat.Timestamp(now)), Own: own, Waiting: waiting, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("find sessions to rescue: %w", mapErr(err))
	}
	return ids, nil
}

func leaseOf(node, addr *string, exp *time.Time, token int64) Lease {
	l := Lease{Node: deref(node), Addr: deref(addr), Token: token}
	if exp != nil {
		l.ExpiresAt = exp.UTC()
	}
	return l
}
