package ws

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
)

// armHelloDeadline closes the connection with 4000 when no hello has been answered by
// the deadline, unless one arrived in time and is queued or being answered: that one
// decides.
func (c *conn) armHelloDeadline() {
	c.helloMu.Lock()
	defer c.helloMu.Unlock()
	c.armHelloDeadlineLocked()
}

// armHelloDeadlineLocked arms the deadline from now; a timer armed before it no longer
// counts. c.helloMu is held.
func (c *conn) armHelloDeadlineLocked() {
	c.helloGen++
	gen := c.helloGen
	c.helloTimer = c.s.clock.AfterFunc(c.s.cfg.HelloTimeout, func() {
		c.helloMu.Lock()
		defer c.helloMu.Unlock()
		if gen != c.helloGen {
			return // armed again meanwhile (a hello the server failed)
		}
		c.helloExpired = true
		if c.hellosPending == 0 && !c.helloed.Load() {
			c.out.Close(disconnectNoHello, true)
		}
	})
}

// stopHelloDeadline stops the deadline for good: the connection said hello, or ended.
func (c *conn) stopHelloDeadline() {
	c.helloMu.Lock()
	defer c.helloMu.Unlock()
	c.helloStopped = true
	c.helloTimer.Stop()
}

// helloArrived counts a hello the reader queued for the worker.
func (c *conn) helloArrived() {
	c.helloMu.Lock()
	c.hellosPending++
	c.helloMu.Unlock()
}

// helloSettled is called by the worker once a queued hello is answered (or dropped): if
// the deadline passed meanwhile and no hello has succeeded, the connection is closed.
func (c *conn) helloSettled() {
	c.helloMu.Lock()
	defer c.helloMu.Unlock()
	c.hellosPending--
	if c.helloed.Load() || c.helloStopped {
		return
	}
	if c.helloServerFailed {
		// The server failed this hello (its database was unavailable, say): the client did
		// nothing wrong and may say hello again, so it has the whole deadline again,
		// from this answer. A client that says nothing more is closed then.
		c.helloServerFailed = false
		c.helloExpired = false
		c.helloTimer.Stop()
		c.armHelloDeadlineLocked()
		return
	}
	// Past the deadline, the hello that arrived in time has decided: a connection that
	// queued more hellos behind one it got wrong does not get to hold the deadline off.
	if c.helloExpired {
		c.out.Close(disconnectNoHello, true)
	}
}

// hello binds the connection to a session: subscribes its outbox to the session's actor,
// which queues the snapshot or replay.
func (c *conn) hello(f clientFrame) {
	owner, expiresAt, err := transport.AuthenticateExpiry(c.ctx, c.s.cfg.Auth, c.req.request(), f.Token)
	if err != nil {
		c.logEvent(c.s.log.Debug()).Err(err).Msg("refused a hello's token")
		c.replyError(f.RequestID, conversation.CodeUnauthorized, "unauthorized")
		c.out.Close(disconnectUnauthorized, true)
		return
	}
	// The connection counts against its user from here: a hello that fails without
	// closing it lets go of the count (the client may say hello again, perhaps as
	// someone else).
	if !c.s.acquireUser(owner) {
		c.s.cfg.Metrics.RateLimited(transport.LimitUserConns)
		c.logEvent(c.s.log.Info()).Str("user", owner).Msg("refused a connection over its user's connection limit")
		c.replyError(f.RequestID, codeRateLimited, fmt.Sprintf("too many connections for this user (at most %d)", c.s.users.Max()))
		c.out.Close(disconnectUserConns, true)
		return
	}
	c.user, c.userCounted = owner, true
	c.token = f.Token
	ok := false
	defer func() {
		if !ok {
			c.s.releaseUser(owner)
			c.user, c.userCounted = "", false
		}
	}()
	// A new session's id is the server's, from crypto/rand (a v4 UUID: 122 random bits,
	// nothing to guess from); a client names only sessions that exist.
	id, create := uuid.UUID{}, false
	if f.SessionID != nil {
		id, err = uuid.Parse(*f.SessionID)
		if err != nil || id == uuid.Nil {
			c.helloFailure = conversation.CodeBadRequest
			c.replyError(f.RequestID, conversation.CodeBadRequest, "sessionId must be a UUID")
			return
		}
	} else {
		id, err = uuid.NewRandom()
		if err != nil {
			c.helloFailure, c.helloServerFailed = conversation.CodeInternal, true
			c.replyError(f.RequestID, conversation.CodeInternal, "could not generate a session id")
			return
		}
		create = true
	}
	if (f.Epoch != nil) != (f.LastSeq != nil) {
		// Half a position (the schema's dependentRequired): an epoch alone would have the
		// ring replayed from its start to a client that has none of the messages loaded
		// before it. Both, even an empty epoch, are a position.
		c.helloFailure = conversation.CodeBadRequest
		c.replyError(f.RequestID, conversation.CodeBadRequest, "epoch and lastSeq go together: send both (from the stream you followed) or neither")
		return
	}
	var lastSeq int64
	if f.LastSeq != nil {
		if *f.LastSeq < 0 {
			c.helloFailure = conversation.CodeBadRequest
			c.replyError(f.RequestID, conversation.CodeBadRequest, "lastSeq must not be negative")
			return
		}
		lastSeq = *f.LastSeq
	}
	req := conversation.HelloRequest{
		Owner:      owner,
		Create:     create,
		Epoch:      deref(f.Epoch),
		LastSeq:    lastSeq,
		Subscriber: c.out,
		Format:     Format,
		RequestID:  deref(f.RequestID),
	}
	actor, res, err := c.helloHere(id, req)
	if ee := (*conversation.ElsewhereError)(nil); errors.As(err, &ee) && c.s.cfg.Relay != nil && c.req.get(transport.RelayHeader) == "" {
		// Another node holds the session: relay the connection there. A relayed hello
		// is never relayed again (the holder changed meanwhile): the client reconnects.
		if ee.Lease.Addr != "" && c.startRelay(f, ee.Lease.Addr) {
			ok = true
			c.helloed.Store(true)
			c.stopHelloDeadline()
			c.logEvent(c.s.log.Debug()).Str("session_id", id.String()).Str("node", ee.Lease.Node).Str("node_addr", ee.Lease.Addr).Msg("hello relayed to the session's node")
			return
		}
		// Unreachable: it may have died or given the session back meanwhile. Once more
		// here, which acquires the session when its lease has expired.
		actor, res, err = c.helloHere(id, req)
	}
	if errors.Is(err, conversation.ErrElsewhere) {
		// Another node holds the session: the client reconnects, and reaches it.
		c.replyError(f.RequestID, codeMoved, "the session is held by another node; reconnect")
		c.out.Close(transport.DisconnectMoved, true)
		return
	}
	if errors.Is(err, conversation.ErrNotYours) || errors.Is(err, conversation.ErrNoSession) {
		c.replyError(f.RequestID, conversation.CodeNotFound, "session not found")
		c.out.Close(disconnectNotFound, true)
		return
	}
	if errors.Is(err, conversation.ErrDeleted) {
		// Its owner learns why; anyone else got ErrNotYours above.
		c.replyError(f.RequestID, conversation.CodeNotFound, "session deleted")
		c.out.Close(transport.DisconnectDeleted, true)
		return
	}
	if err != nil {
		c.helloFailure = replyCode(err)
		switch c.helloFailure {
		case conversation.CodeStorage, conversation.CodeInternal:
			c.helloServerFailed = true // see helloSettled
		}
		if c.helloFailure == conversation.CodeTooManySessions {
			c.s.cfg.Metrics.RateLimited(transport.LimitSessions)
		}
		c.replyErr(f.RequestID, err)
		return
	}
	ok = true
	c.actor = actor
	c.armExpiry(expiresAt)
	c.helloed.Store(true)
	c.stopHelloDeadline()
	c.logEvent(c.s.log.Debug()).Str("session_id", id.String()).Bool("resumed", res.Resumed).Int("replayed", res.Replayed).Int64("last_seq", res.LastSeq).Msg("hello")
}

// helloHere subscribes the connection to session id's actor on this node.
func (c *conn) helloHere(id uuid.UUID, req conversation.HelloRequest) (*conversation.Actor, conversation.HelloResult, error) {
	actor, res, err := c.s.cfg.Hub.Hello(c.ctx, id, req)
	if err != nil && actor != nil {
		// A hello whose ctx ended may have subscribed all the same; make sure it did not.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		actor.Unsubscribe(ctx, c.out)
		cancel()
	}
	return actor, res, err
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
