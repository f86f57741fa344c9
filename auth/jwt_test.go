package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/auth/authtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func newJWT(t *testing.T, cfg auth.Config) *auth.JWT {
	t.Helper()
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewFakeClockAt(now)
	}
	j, err := auth.New(cfg)
	require.NoError(t, err)
	t.Cleanup(j.Close)
	return j
}

func good() authtest.Claims {
	return authtest.Claims{Subject: "alice", Issuer: "https://idp.test", Audience: "chatd", ExpiresAt: now.Add(time.Hour)}
}

func TestHMACMatrix(t *testing.T) {
	t.Parallel()
	j := newJWT(t, auth.Config{Secret: authtest.Secret, Issuer: "https://idp.test", Audience: "chatd"})
	user, exp, err := j.AuthenticateExpiry(context.Background(), nil, authtest.HS256(t, authtest.Secret, good()))
	require.NoError(t, err)
	require.Equal(t, "alice", user)
	require.True(t, exp.Equal(now.Add(time.Hour)), "expiry %s", exp)

	key := authtest.NewKey(t, "k1")
	with := func(edit func(*authtest.Claims)) authtest.Claims {
		c := good()
		edit(&c)
		return c
	}
	for name, token := range map[string]string{
		"no token":          "",
		"garbage":           "not.a.jwt",
		"bad signature":     authtest.HS256(t, []byte("another-secret-another-secret-another"), good()),
		"expired":           authtest.HS256(t, authtest.Secret, with(func(c *authtest.Claims) { c.ExpiresAt = now.Add(-time.Second) })),
		"no exp":            authtest.HS256(t, authtest.Secret, with(func(c *authtest.Claims) { c.ExpiresAt = time.Time{} })),
		"nbf in the future": authtest.HS256(t, authtest.Secret, with(func(c *authtest.Claims) { c.NotBefore = now.Add(time.Minute) })),
		"wrong aud":         authtest.HS256(t, authtest.Secret, with(func(c *authtest.Claims) { c.Audience = "other" })),
		"no aud":            authtest.HS256(t, authtest.Secret, with(func(c *authtest.Claims) { c.Audience = "" })),
		"wrong iss":         authtest.HS256(t, authtest.Secret, with(func(c *authtest.Claims) { c.Issuer = "https://evil.test" })),
		"no sub":            authtest.HS256(t, authtest.Secret, with(func(c *authtest.Claims) { c.Subject = "" })),
		"alg none":          authtest.None(t, good()),
		"RS256 on HMAC":     key.RS256(t, good()),
	} {
		t.Run(name, func(t *testing.T) {
			user, err := j.Authenticate(context.Background(), nil, token)
			require.ErrorIs(t, err, auth.ErrUnauthorized)
			require.Empty(t, user)
		})
	}
}

func TestJWKSMatrix(t *testing.T) {
	t.Parallel()
	k1 := authtest.NewKey(t, "k1")
	idp := authtest.NewJWKS(t, k1)
	j := newJWT(t, auth.Config{JWKSURL: idp.URL, Issuer: "https://idp.test", Audience: "chatd"})

	user, err := j.Authenticate(context.Background(), nil, k1.RS256(t, good()))
	require.NoError(t, err)
	require.Equal(t, "alice", user)

	stranger := authtest.NewKey(t, "k1") // the same kid, another key
	expired := good()
	expired.ExpiresAt = now.Add(-time.Minute)
	for name, token := range map[string]string{
		"bad signature": stranger.RS256(t, good()),
		"expired":       k1.RS256(t, expired),
		"alg none":      authtest.None(t, good()),
		// Algorithm confusion: HS256 with the public key as the secret.
		"HS256 with the public key": authtest.HS256(t, k1.PublicPEM(t), good()),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := j.Authenticate(context.Background(), nil, token)
			require.ErrorIs(t, err, auth.ErrUnauthorized)
		})
	}
}

// A token signed with a key the cached set does not hold makes the verifier fetch the
// set again: after the identity provider rotates its keys, tokens of the new key verify
// at once.
func TestJWKSRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := authtest.NewKey(t, "k1"), authtest.NewKey(t, "k2")
	idp := authtest.NewJWKS(t, k1)
	j := newJWT(t, auth.Config{JWKSURL: idp.URL})
	_, err := j.Authenticate(context.Background(), nil, k1.RS256(t, good()))
	require.NoError(t, err)
	fetches := idp.Fetches.Load()

	// Before the rotation, k2 is unknown even after a refetch.
	_, err = j.Authenticate(context.Background(), nil, k2.RS256(t, good()))
	require.ErrorIs(t, err, auth.ErrUnauthorized)
	require.Equal(t, fetches+1, idp.Fetches.Load(), "an unknown kid fetches the set again")

	// The refetches are rate-limited: another unknown kid right away fetches nothing.
	_, err = j.Authenticate(context.Background(), nil, authtest.NewKey(t, "k3").RS256(t, good()))
	require.ErrorIs(t, err, auth.ErrUnauthorized)
	require.Equal(t, fetches+1, idp.Fetches.Load(), "unknown kids are refetched at most once per interval")
}

func TestJWKSRotationVerifiesTheNewKey(t *testing.T) {
	t.Parallel()
	k1, k2 := authtest.NewKey(t, "k1"), authtest.NewKey(t, "k2")
	idp := authtest.NewJWKS(t, k1)
	j := newJWT(t, auth.Config{JWKSURL: idp.URL})
	_, err := j.Authenticate(context.Background(), nil, k1.RS256(t, good()))
	require.NoError(t, err)

	idp.SetKeys(k2)
	// The identity provider is across a network: its answer takes a while, and the
	// token waits for it (a fetch once bounded by the limiter's 1 ms wait never came).
	idp.Latency.Store(int64(50 * time.Millisecond))
	user, err := j.Authenticate(context.Background(), nil, k2.RS256(t, good()))
	require.NoError(t, err)
	require.Equal(t, "alice", user)
}

func TestConfigRefusals(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]auth.Config{
		"nothing":      {},
		"both":         {Secret: authtest.Secret, JWKSURL: "https://idp.test/jwks"},
		"short secret": {Secret: []byte("short")},
		"bad url":      {JWKSURL: "ftp://idp.test/jwks"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := auth.New(cfg)
			require.Error(t, err)
			require.False(t, errors.Is(err, auth.ErrUnauthorized))
		})
	}
}
