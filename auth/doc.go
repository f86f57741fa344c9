// Package auth verifies JSON Web Tokens for chatd: it implements
// transport.ExpiringAuthenticator, so the WebSocket's hello and auth.refresh and the HTTP
// API's Authorization: Bearer know users the same way.
//
// Tokens are verified by github.com/golang-jwt/jwt/v5, with an HMAC secret or with the
// public keys of a JWK Set fetched over HTTP by github.com/MicahParks/keyfunc/v3 (cached,
// refreshed periodically and, rate-limited, when a token names a key id it does not
// know). The token's sub is the user id; exp is required; nbf, and iss and aud when
// configured, are checked. Only the algorithms of the configured key type are accepted:
// never none, and never HMAC with a public key.
package auth
