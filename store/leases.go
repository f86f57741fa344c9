package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// ErrFenced is returned by a write made under a fence (WithFence) that is no longer the
// session's lease token: another node acquired the session since. Nothing was written.
var ErrFenced = errors.New("fenced: the session's lease was taken over")

// Lease is who holds a session's lease: one node at a time runs a session's actor.
type Lease struct {
	// Node is the holder's id ("" when no node holds it) and Addr where other nodes reach
	// it, until ExpiresAt (by the database's clock).
	Node      string
	Addr      string
	ExpiresAt time.Time
	// Token grows on every acquisition: the fence of the holder's writes.
	Token int64
	// Live is whether Node held it when it was read, by the database's clock: the
	// nodes' own clocks never decide whether a lease has expired.
	Live bool
}

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
	return l.Token != fence, nil
}

// OpenRequest says how SessionOpen opens a session.
type OpenRequest struct {
	// Node, when not "", takes the session's lease for that node (reached at Addr) for
	// TTL, unless another node holds a live one, the session is deleted, or CheckOwner
	// is set and the session is not Owner's. "" only reads.
	Node string
	Addr string
	TTL  time.Duration
	// CheckOwner makes an acquisition depend on the session being Owner's: a hello for
	// another user's session takes nothing.
	Owner      string
	CheckOwner bool
	// RequestIDs asks for the request ids of the session's newest runs, at most this
	// many (0: none), unless CheckOwner finds it another owner's.
	RequestIDs int
}

// Opened is what SessionOpen found, and did.
type Opened struct {
	// Found is false when the session does not exist: nothing else is set.
	Found   bool
	Session chat.Session
	// MaxPosition is the highest message position used in the session, 0 for none,
	// read after the acquisition (so it counts every write of the previous holder).
	MaxPosition int64
	// Lease is the session's lease as it is now: this node's when Acquired.
	Lease Lease
	// Acquired is whether this call took the lease (the token grew). PrevNode is then
	// the node whose lease it replaced: "" when none held it, the caller's own node when
	// it held it already, another node when that node's lease had expired (a takeover).
	Acquired bool
	PrevNode string
	// LeafHasChildren says the session's active leaf has children: a branch was started
	// under it (a regeneration that wrote nothing yet, say).
	LeafHasChildren bool
	// RequestIDs are the request ids of the session's newest runs (OpenRequest.RequestIDs
	// of them), newest first.
	RequestIDs []string
}

// SessionOpen reads session id for an actor that opens it, in one statement whatever
// the outcome: whether it exists, its row, its highest message position, and, with
// req.Node, its lease, acquired unless another node holds a live one (by the database's
// clock), the session is a tombstone, or req.CheckOwner is set and its owner is not
// req.Owner. A session that does not exist is Found false, not an error.
//
// An acquisition waits for the fenced writes in flight under the previous token, and
// every fenced write after it is refused (ErrFenced); renewals are not held up by
// either (see queries/leases.sql).
func (s *Store) SessionOpen(ctx context.Context, id uuid.UUID, req OpenRequest) (Opened, error) {
	row, err := s.q.SessionOpen(ctx, s.db, queries.SessionOpenParams{
		ID: id, Node: req.Node, Addr: req.Addr, Ttl: interval(req.TTL),
		CheckOwner: req.CheckOwner, Owner: req.Owner, RequestIds: int32(max(req.RequestIDs, 0)),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Opened{}, nil
	}
	if err != nil {
		return Opened{}, fmt.Errorf("open session %s: %w", id, mapErr(err))
	}
	if !row.HasLease {
		// Every session is created with its lease row (SessionInsert); one without was
		// made behind the store's back, and no lease can be taken on it.
		return Opened{}, fmt.Errorf("open session %s: it has no lease row", id)
	}
	o := Opened{
		Found:           true,
		Session:         sessionFromRow(row.Session),
		MaxPosition:     row.MaxPosition,
		LeafHasChildren: row.LeafHasChildren,
		Lease:           Lease{Node: row.LeaseNode, Addr: row.LeaseAddr, Token: row.LeaseToken, Live: row.LeaseLive},
		Acquired:        row.Acquired,
		PrevNode:        row.PrevNode,
		RequestIDs:      row.RequestIds,
	}
	if row.LeaseExpiresAt != nil {
		o.Lease.ExpiresAt = row.LeaseExpiresAt.UTC()
	}
	return o, nil
}

// LeaseAcquire is SessionOpen for a caller that wants only the lease: it takes session
// id's lease for node (reached at addr) for ttl, unless another node holds a live one
// or the session is deleted. It returns the session and its lease: when Lease.Node is
// not node, nothing changed. It returns ErrNotFound for a session that does not exist.
func (s *Store) LeaseAcquire(ctx context.Context, id uuid.UUID, node, addr string, ttl time.Duration) (chat.Session, Lease, error) {
	o, err := s.SessionOpen(ctx, id, OpenRequest{Node: node, Addr: addr, TTL: ttl})
	if err != nil {
		return chat.Session{}, Lease{}, err
	}
	if !o.Found {
		return chat.Session{}, Lease{}, fmt.Errorf("acquire the lease of session %s: %w", id, ErrNotFound)
	}
	return o.Session, o.Lease, nil
}

// LeaseGet returns who holds session id's lease (Node "" for nobody), and whether it is
// live now by the database's clock, or ErrNotFound.
func (s *Store) LeaseGet(ctx context.Context, id uuid.UUID) (Lease, error) {
	row, err := s.q.LeaseGet(ctx, s.db, id)
	if err != nil {
		return Lease{}, fmt.Errorf("get the lease of session %s: %w", id, mapErr(err))
	}
	l := Lease{Node: deref(row.Node), Addr: deref(row.Addr), Token: row.Token, Live: row.Live}
	if row.ExpiresAt != nil {
		l.ExpiresAt = row.ExpiresAt.UTC()
	}
	return l, nil
}

// LeaseRenew extends the leases held (session → token) by node to ttl from now, by the
// database's clock, in one statement, and returns those it extended: a held lease
// missing from them is another node's now. It never waits for the actors' writes, nor
// they for it.
func (s *Store) LeaseRenew(ctx context.Context, node string, held map[uuid.UUID]int64, ttl time.Duration) ([]HeldLease, error) {
	p := queries.LeaseRenewParams{Ttl: interval(ttl), Node: node, Ids: make([]uuid.UUID, 0, len(held)), Tokens: make([]int64, 0, len(held))}
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
		renewed[i] = HeldLease{SessionID: r.SessionID, Token: r.Token}
	}
	return renewed, nil
}

// LeaseRelease gives session id's lease back, unless it was acquired again since token.
func (s *Store) LeaseRelease(ctx context.Context, id uuid.UUID, node string, token int64) error {
	if _, err := s.q.LeaseRelease(ctx, s.db, queries.LeaseReleaseParams{ID: id, Node: node, Token: token}); err != nil {
		return fmt.Errorf("release the lease of session %s: %w", id, mapErr(err))
	}
	return nil
}

// SessionsToRescue returns up to limit sessions with a streaming run and no live lease,
// by the database's clock: their node died or shut down, and no agent drives the run.
// own ("" for none) adds the sessions whose lease names that node: a node starting again
// under its id finds those of its previous life.
// With waiting, runs waiting for a person count too (when runs are not continued, they
// are ended).
func (s *Store) SessionsToRescue(ctx context.Context, own string, waiting bool, limit int) ([]uuid.UUID, error) {
	ids, err := s.q.SessionsToRescue(ctx, s.db, queries.SessionsToRescueParams{Own: own, Waiting: waiting, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("find sessions to rescue: %w", mapErr(err))
	}
	return ids, nil
}

// interval is d as a PostgreSQL interval.
func interval(d time.Duration) pgtype.Interval {
	return pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
}
