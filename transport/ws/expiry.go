package ws

import (
	"time"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
)

// A connection's token expires (transport.ExpiringAuthenticator): the server warns with
// auth.expiring shortly before, and closes with 4001 when it passes, unless auth.refresh
// brought a new token of the same user first.

// MaxExpiryWarning is how long before its token expires a connection is sent
// auth.expiring; a token that lives shorter is warned a third of its lifetime before.
const MaxExpiryWarning = time.Minute

var disconnectExpired = transport.Disconnect{Code: closeUnauthorized, Reason: "token expired"}

type wireAuthExpiring struct {
	Type      string    `json:"type"`
	ExpiresAt time.Time `json:"expiresAt"`
}

type wireAuthRefreshed struct {
	Type      string     `json:"type"`
	RequestID *string    `json:"requestId,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// armExpiry (re)starts the warning and close timers for a token expiring at exp (the zero
// time: never). Timers of an earlier token that fire late do nothing.
func (c *conn) armExpiry(exp time.Time) {
	c.expiryMu.Lock()
	defer c.expiryMu.Unlock()
	c.stopExpiryLocked()
	if c.expiryStopped || exp.IsZero() {
		return
	}
	c.expiryGen++
	gen := c.expiryGen
	left := exp.Sub(c.s.clock.Now())
	warnBefore := min(MaxExpiryWarning, left/3)
	current := func() bool {
		c.expiryMu.Lock()
		defer c.expiryMu.Unlock()
		return gen == c.expiryGen && !c.expiryStopped
	}
	c.expiryWarn = c.s.clock.AfterFunc(left-warnBefore, func() {
		if current() {
			c.reply(wireAuthExpiring{Type: frameAuthExpiring, ExpiresAt: exp.UTC()})
		}
	})
	c.expiryClose = c.s.clock.AfterFunc(left, func() {
		if current() {
			c.out.Close(disconnectExpired, true)
		}
	})
}

func (c *conn) stopExpiryLocked() {
	if c.expiryWarn != nil {
		c.expiryWarn.Stop()
		c.expiryClose.Stop()
		c.expiryWarn, c.expiryClose = nil, nil
	}
}

// stopExpiry stops the timers for good: the connection has ended.
func (c *conn) stopExpiry() {
	c.expiryMu.Lock()
	defer c.expiryMu.Unlock()
	c.expiryStopped = true
	c.stopExpiryLocked()
}

// refresh answers auth.refresh: a valid token of the connection's user replaces the old
// one (and its expiry); an invalid one is refused and the old one stays; one of another
// user closes the connection with 4001.
func (c *conn) refresh(f clientFrame) {
	if f.Token == "" {
		c.replyError(f.RequestID, conversation.CodeBadRequest, "auth.refresh needs a token")
		return
	}
	user, exp, err := transport.AuthenticateExpiry(c.ctx, c.s.cfg.Auth, c.req.request(), f.Token)
	if err != nil {
		c.logEvent(c.s.log.Debug()).Err(err).Msg("refused an auth.refresh token")
		c.replyError(f.RequestID, conversation.CodeUnauthorized, "unauthorized: the token was refused; the connection keeps its current one")
		return
	}
	if user != c.user {
		c.logEvent(c.s.log.Info()).Msg("closed a connection whose auth.refresh brought another user's token")
		c.replyError(f.RequestID, conversation.CodeUnauthorized, "unauthorized: the token is another user's")
		c.out.Close(disconnectUnauthorized, true)
		return
	}
	c.armExpiry(exp)
	c.token = f.Token
	r := wireAuthRefreshed{Type: frameAuthRefreshed, RequestID: f.RequestID}
	if !exp.IsZero() {
		e := exp.UTC()
		r.ExpiresAt = &e
	}
	c.reply(r)
}
