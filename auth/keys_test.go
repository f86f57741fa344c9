package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/auth"
)

// ECDSA and EdDSA keys of a JWK Set verify their tokens too, and only with their own
// algorithm.
func TestJWKSECDSAAndEdDSA(t *testing.T) {
	t.Parallel()
	b64 := base64.RawURLEncoding.EncodeToString
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	ecX, ecY := make([]byte, 32), make([]byte, 32)
	ec.X.FillBytes(ecX)
	ec.Y.FillBytes(ecY)
	set := map[string]any{"keys": []map[string]string{
		{"kty": "EC", "kid": "ec1", "crv": "P-256", "alg": "ES256", "use": "sig", "x": b64(ecX), "y": b64(ecY)},
		{"kty": "OKP", "kid": "ed1", "crv": "Ed25519", "alg": "EdDSA", "use": "sig", "x": b64(edPub)},
	}}
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(idp.Close)
	j := newJWT(t, auth.Config{JWKSURL: idp.URL})

	sign := func(m jwt.SigningMethod, kid string, key any) string {
		tok := jwt.NewWithClaims(m, jwt.RegisteredClaims{Subject: "alice", ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour))})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		require.NoError(t, err)
		return s
	}
	for name, token := range map[string]string{
		"ES256": sign(jwt.SigningMethodES256, "ec1", ec),
		"EdDSA": sign(jwt.SigningMethodEdDSA, "ed1", edPriv),
	} {
		user, err := j.Authenticate(context.Background(), nil, token)
		require.NoError(t, err, name)
		require.Equal(t, "alice", user, name)
	}
	// A key used with another algorithm than its own is refused.
	_, err = j.Authenticate(context.Background(), nil, sign(jwt.SigningMethodEdDSA, "ec1", edPriv))
	require.ErrorIs(t, err, auth.ErrUnauthorized)
}
