// Package authtest mints tokens and serves JWK Sets for tests of chatd's authentication.
package authtest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Secret is an HMAC secret long enough for auth.New.
var Secret = []byte("0123456789abcdef0123456789abcdef-test-secret")

// Claims are a token's claims: a subject expiring at Exp, issued by Issuer for Audience
// (each left out when empty or zero).
type Claims struct {
	Subject   string
	Issuer    string
	Audience  string
	ExpiresAt time.Time
	NotBefore time.Time
}

func (c Claims) jwt() jwt.RegisteredClaims {
	r := jwt.RegisteredClaims{Subject: c.Subject, Issuer: c.Issuer}
	if c.Audience != "" {
		r.Audience = jwt.ClaimStrings{c.Audience}
	}
	if !c.ExpiresAt.IsZero() {
		r.ExpiresAt = jwt.NewNumericDate(c.ExpiresAt)
	}
	if !c.NotBefore.IsZero() {
		r.NotBefore = jwt.NewNumericDate(c.NotBefore)
	}
	return r
}

// HS256 signs claims with secret.
func HS256(t testing.TB, secret []byte, c Claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c.jwt()).SignedString(secret)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return s
}

// None is an unsigned token (alg none).
func None(t testing.TB, c Claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, c.jwt()).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return s
}

// Key is an RSA signing key with a key id.
type Key struct {
	ID      string
	Private *rsa.PrivateKey
}

// NewKey generates a 2048-bit RSA key.
func NewKey(t testing.TB, id string) Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return Key{ID: id, Private: k}
}

// RS256 signs claims with the key, naming its id in the header.
func (k Key) RS256(t testing.TB, c Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c.jwt())
	tok.Header["kid"] = k.ID
	s, err := tok.SignedString(k.Private)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return s
}

// JWK is the key's public half as a JWK.
func (k Key) JWK() map[string]string {
	pub := k.Private.PublicKey
	return map[string]string{
		"kty": "RSA",
		"kid": k.ID,
		"use": "sig",
		"alg": "RS256",
		"n":   base64.RawURLEncoding.EncodeToString(pub.N.Bytes()),
		"e":   base64.RawURLEncoding.EncodeToString(big.NewInt(int64(pub.E)).Bytes()),
	}
}

// PublicPEM is the key's public half in PEM: what an algorithm-confusion attack signs an
// HS256 token with, hoping the server verifies HMAC with its public key.
func (k Key) PublicPEM(t testing.TB) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&k.Private.PublicKey)
	if err != nil {
		t.Fatalf("marshal public key: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// JWKS is an identity provider's key endpoint: a JWK Set whose keys a test can rotate.
type JWKS struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []Key
	Fetches atomic.Int64
	// Latency, in nanoseconds, is how long each answer takes, as over a network.
	Latency atomic.Int64
}

// NewJWKS serves keys at its URL until the test ends.
func NewJWKS(t testing.TB, keys ...Key) *JWKS {
	j := &JWKS{keys: keys}
	j.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		j.Fetches.Add(1)
		time.Sleep(time.Duration(j.Latency.Load()))
		j.mu.Lock()
		set := struct {
			Keys []map[string]string `json:"keys"`
		}{Keys: []map[string]string{}}
		for _, k := range j.keys {
			set.Keys = append(set.Keys, k.JWK())
		}
		j.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(j.Close)
	return j
}

// SetKeys replaces the served keys: a rotation.
func (j *JWKS) SetKeys(keys ...Key) {
	j.mu.Lock()
	j.keys = keys
	j.mu.Unlock()
}
