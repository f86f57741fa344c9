package ws_test

import (
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/auth/authtest"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

const (
	testIssuer   = "https://idp.test"
	testAudience = "chatd"
)

// authEnv is a chatd server whose connections authenticate with JWTs: an HMAC secret, or
// a local identity provider's JWK Set. Tokens are checked against the connections' fake
// clock.
type authEnv struct {
	*env
	idp *authtest.JWKS
	key authtest.Key
}

func newAuthEnv(t *testing.T, jwks bool) *authEnv {
	t.Helper()
	a := &authEnv{}
	if jwks {
		a.key = authtest.NewKey(t, "k1")
		a.idp = authtest.NewJWKS(t, a.key)
	}
	a.env = newEnv(t, envOptions{agent: script.New(script.Text("ok")), wsConfig: func(c *ws.Config) {
		cfg := auth.Config{Clock: c.Clock, Issuer: testIssuer, Audience: testAudience}
		if jwks {
			cfg.JWKSURL = a.idp.URL
		} else {
			cfg.Secret = authtest.Secret
		}
		j, err := auth.New(cfg)
		require.NoError(t, err)
		t.Cleanup(j.Close)
		c.Auth = j
		// No pings: the tests move the clock by minutes.
		c.PingInterval = 24 * time.Hour
		c.HelloTimeout = 24 * time.Hour
	}})
	return a
}

// claims are a good token's: user's, expiring after ttl on the connections' clock.
func (a *authEnv) claims(user string, ttl time.Duration) authtest.Claims {
	return authtest.Claims{Subject: user, Issuer: testIssuer, Audience: testAudience, ExpiresAt: a.WSClock.Now().Add(ttl)}
}

func (a *authEnv) token(t *testing.T, c authtest.Claims) string {
	if a.idp != nil {
		return a.key.RS256(t, c)
	}
	return authtest.HS256(t, authtest.Secret, c)
}

// connect dials and says hello to sessionID ("" for a new session) with token.
func (a *authEnv) connect(t *testing.T, token, sessionID string) *wstest.Client {
	t.Helper()
	c := a.dial()
	c.Token = token
	c.Hello(sessionID)
	roundTrip(t, c)
	return c
}

// roundTrip returns once the connection's worker has handled everything sent before: the
// reply to a command comes after those of the commands before it.
func roundTrip(t *testing.T, c *wstest.Client) {
	t.Helper()
	id := "sync-" + uuid.NewString()[:8]
	c.Send(map[string]any{"type": "history.fetch", "requestId": id})
	require.Equal(t, "history", c.ReadReply(id).Type)
}

// refused says hello with token and expects error unauthorized, then 4001.
func refused(t *testing.T, e *env, token string) {
	t.Helper()
	c := e.dial()
	h := map[string]any{"type": "hello", "requestId": "h1"}
	if token != "" {
		h["token"] = token
	}
	c.Send(h)
	f := c.Read()
	require.Equal(t, "error", f.Type, "%s", f.Raw)
	require.Equal(t, "unauthorized", f.Code)
	require.Equal(t, websocket.StatusCode(4001), c.ExpectClose())
}

// Every bad token is refused at hello with unauthorized and 4001; a good one is let in.
func TestAuthHelloMatrix(t *testing.T) {
	t.Parallel()
	a := newAuthEnv(t, true)
	now := a.WSClock.Now()
	with := func(edit func(*authtest.Claims)) authtest.Claims {
		c := a.claims("alice", time.Hour)
		edit(&c)
		return c
	}
	stranger := authtest.NewKey(t, "k1") // the kid of the real key, another key
	for name, token := range map[string]string{
		"no token":                             "",
		"bad signature":                        stranger.RS256(t, a.claims("alice", time.Hour)),
		"expired":                              a.key.RS256(t, with(func(c *authtest.Claims) { c.ExpiresAt = now.Add(-time.Second) })),
		"nbf in the future":                    a.key.RS256(t, with(func(c *authtest.Claims) { c.NotBefore = now.Add(time.Minute) })),
		"wrong aud":                            a.key.RS256(t, with(func(c *authtest.Claims) { c.Audience = "another-service" })),
		"wrong iss":                            a.key.RS256(t, with(func(c *authtest.Claims) { c.Issuer = "https://evil.test" })),
		"alg none":                             authtest.None(t, a.claims("alice", time.Hour)),
		"HS256 signed with the RSA public key": authtest.HS256(t, a.key.PublicPEM(t), a.claims("alice", time.Hour)),
	} {
		t.Run(name, func(t *testing.T) { refused(t, a.env, token) })
	}
	c := a.connect(t, a.key.RS256(t, a.claims("alice", time.Hour)), "")
	require.NotEmpty(t, c.State.SessionID)
}

// After the identity provider rotates its keys, a token naming the new kid verifies: the
// server fetches the set again on the unknown kid.
func TestAuthJWKSRotation(t *testing.T) {
	t.Parallel()
	a := newAuthEnv(t, true)
	a.connect(t, a.token(t, a.claims("alice", time.Hour)), "")

	k2 := authtest.NewKey(t, "k2")
	a.idp.SetKeys(k2)
	c := a.connect(t, k2.RS256(t, a.claims("alice", time.Hour)), "")
	require.NotEmpty(t, c.State.SessionID)
}

// A connection is warned before its token expires; auth.refresh with a new token of the
// same user keeps it open past the old expiry, until the new one expires.
func TestAuthRefreshKeepsTheConnection(t *testing.T) {
	t.Parallel()
	a := newAuthEnv(t, false)
	c := a.connect(t, a.token(t, a.claims("alice", 10*time.Minute)), "")

	a.WSClock.Advance(9*time.Minute - time.Second)
	roundTrip(t, c) // nothing before the warning time
	a.WSClock.Advance(time.Second)
	f := c.ReadType("auth.expiring")
	exp, err := time.Parse(time.RFC3339, f.ExpiresAt)
	require.NoError(t, err)
	require.WithinDuration(t, a.WSClock.Now().Add(time.Minute), exp, time.Second)

	c.Send(map[string]any{"type": "auth.refresh", "requestId": "a1", "token": a.token(t, a.claims("alice", time.Hour))})
	r := c.ReadReply("a1")
	require.Equal(t, "auth.refreshed", r.Type, "%s", r.Raw)
	require.NotEmpty(t, r.ExpiresAt)

	a.WSClock.Advance(5 * time.Minute) // well past the old expiry
	roundTrip(t, c)
	require.Equal(t, "ack", c.Chat("r1", "still here?").Type)

	// The new token expires in turn.
	a.WSClock.Advance(time.Hour)
	require.Equal(t, websocket.StatusCode(4001), c.ExpectClose())
}

// Without a refresh: auth.expiring, then 4001 when the token expires.
func TestAuthNoRefreshCloses(t *testing.T) {
	t.Parallel()
	a := newAuthEnv(t, false)
	// A short-lived token is warned a third of its lifetime before.
	c := a.connect(t, a.token(t, a.claims("alice", 90*time.Second)), "")
	a.WSClock.Advance(60 * time.Second)
	c.ReadType("auth.expiring")
	a.WSClock.Advance(29 * time.Second)
	roundTrip(t, c) // still open just before the expiry
	a.WSClock.Advance(time.Second)
	require.Equal(t, websocket.StatusCode(4001), c.ExpectClose())
}

// A refused refresh token changes nothing: the connection stays, on its old expiry.
func TestAuthInvalidRefreshKeepsTheOldExpiry(t *testing.T) {
	t.Parallel()
	a := newAuthEnv(t, false)
	c := a.connect(t, a.token(t, a.claims("alice", 10*time.Minute)), "")
	bad := authtest.HS256(t, []byte("not-the-secret-not-the-secret-not-the"), a.claims("alice", time.Hour))
	c.Send(map[string]any{"type": "auth.refresh", "requestId": "a1", "token": bad})
	r := c.ReadReply("a1")
	require.Equal(t, "error", r.Type)
	require.Equal(t, "unauthorized", r.Code)
	roundTrip(t, c) // still open

	a.WSClock.Advance(10 * time.Minute)
	require.Equal(t, websocket.StatusCode(4001), c.ExpectClose())
}

// A refresh with another user's token closes the connection.
func TestAuthRefreshAnotherUserCloses(t *testing.T) {
	t.Parallel()
	a := newAuthEnv(t, false)
	c := a.connect(t, a.token(t, a.claims("alice", 10*time.Minute)), "")
	c.Send(map[string]any{"type": "auth.refresh", "requestId": "a1", "token": a.token(t, a.claims("bob", time.Hour))})
	r := c.ReadReply("a1")
	require.Equal(t, "error", r.Type)
	require.Equal(t, "unauthorized", r.Code)
	require.Equal(t, websocket.StatusCode(4001), c.ExpectClose())
}

// Users are told apart by their tokens' sub: bob cannot open alice's session.
func TestAuthAnotherUsersSessionIsNotFound(t *testing.T) {
	t.Parallel()
	a := newAuthEnv(t, true)
	alice := a.connect(t, a.token(t, a.claims("alice", time.Hour)), "")
	require.Equal(t, "ack", alice.Chat("r1", "mine").Type)

	bob := a.dial()
	bob.Send(map[string]any{"type": "hello", "requestId": "h1", "sessionId": alice.State.SessionID, "token": a.token(t, a.claims("bob", time.Hour))})
	f := bob.Read()
	require.Equal(t, "error", f.Type)
	require.Equal(t, "not_found", f.Code)
	require.Equal(t, websocket.StatusCode(4004), bob.ExpectClose())

	// Alice herself, on another connection, gets in.
	again := a.connect(t, a.token(t, a.claims("alice", time.Hour)), alice.State.SessionID)
	require.Equal(t, alice.State.SessionID, again.State.SessionID)
}

// Only the server names a new session: a hello without sessionId gets a random (v4) id;
// a made-up id is refused as another user's session is, and no session is stored for
// it, so nobody can take an id before its session exists.
func TestHelloMadeUpSessionIDIsNotFound(t *testing.T) {
	t.Parallel()
	a := newAuthEnv(t, false)
	alice := a.connect(t, a.token(t, a.claims("alice", time.Hour)), "")
	id := uuid.MustParse(alice.State.SessionID)
	require.Equal(t, uuid.Version(4), id.Version(), "a new session's id is random")
	require.Equal(t, uuid.RFC4122, id.Variant())

	madeUp := uuid.NewString()
	c := a.dial()
	c.Send(map[string]any{"type": "hello", "requestId": "h1", "sessionId": madeUp, "token": a.token(t, a.claims("alice", time.Hour))})
	f := c.Read()
	require.Equal(t, "error", f.Type)
	require.Equal(t, "not_found", f.Code)
	require.Equal(t, "session not found", f.ErrorText)
	require.Equal(t, websocket.StatusCode(4004), c.ExpectClose())
	var n int
	require.NoError(t, a.store.Pool().QueryRow(t.Context(), "SELECT count(*) FROM sessions WHERE id = $1", madeUp).Scan(&n))
	require.Zero(t, n, "the refused hello stored nothing")
}
