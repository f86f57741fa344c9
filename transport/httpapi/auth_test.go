package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/auth/authtest"
)

// The API with JWT users (a local identity provider's JWK Set): every bad token is 401
// unauthorized, a good one 200, and users are told apart by their tokens' sub.
func TestJWTBearer(t *testing.T) {
	t.Parallel()
	key := authtest.NewKey(t, "k1")
	idp := authtest.NewJWKS(t, key)
	j, err := auth.New(auth.Config{JWKSURL: idp.URL, Issuer: "https://idp.test", Audience: "chatd"})
	require.NoError(t, err)
	t.Cleanup(j.Close)
	e := newEnvAuth(t, nil, j)

	claims := func(user string, edit func(*authtest.Claims)) authtest.Claims {
		c := authtest.Claims{Subject: user, Issuer: "https://idp.test", Audience: "chatd", ExpiresAt: time.Now().Add(time.Hour)}
		if edit != nil {
			edit(&c)
		}
		return c
	}
	aliceToken := key.RS256(t, claims("alice", nil))
	bobToken := key.RS256(t, claims("bob", nil))

	for name, token := range map[string]string{
		"no token":                             "",
		"bad signature":                        authtest.NewKey(t, "k1").RS256(t, claims("alice", nil)),
		"expired":                              key.RS256(t, claims("alice", func(c *authtest.Claims) { c.ExpiresAt = time.Now().Add(-time.Minute) })),
		"nbf in the future":                    key.RS256(t, claims("alice", func(c *authtest.Claims) { c.NotBefore = time.Now().Add(time.Hour) })),
		"wrong aud":                            key.RS256(t, claims("alice", func(c *authtest.Claims) { c.Audience = "another" })),
		"wrong iss":                            key.RS256(t, claims("alice", func(c *authtest.Claims) { c.Issuer = "https://evil.test" })),
		"alg none":                             authtest.None(t, claims("alice", nil)),
		"HS256 signed with the RSA public key": authtest.HS256(t, key.PublicPEM(t), claims("alice", nil)),
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do(http.MethodGet, "/v1/sessions", token, nil)
			e.errorOf(r, http.StatusUnauthorized, "unauthorized")
			require.Equal(t, "Bearer", r.header.Get("WWW-Authenticate"))
		})
	}
	require.Equal(t, http.StatusOK, e.do(http.MethodGet, "/v1/sessions", aliceToken, nil).status)

	// Alice's session, over the WebSocket with her token, is not bob's.
	c := e.chat(aliceToken, "mine")
	id := c.State.SessionID
	require.Len(t, e.all(aliceToken, 10), 1)
	require.Empty(t, e.all(bobToken, 10))
	e.errorOf(e.rename(bobToken, id, "yours now"), http.StatusNotFound, "not_found")
	e.errorOf(e.do(http.MethodDelete, "/v1/sessions/"+id, bobToken, nil), http.StatusNotFound, "not_found")
	require.Equal(t, "mine", find(t, e.all(aliceToken, 10), id).Title, "bob changed nothing")
	require.Equal(t, 2, e.count("messages", id))
}
