package transport

import (
	"context"
	"net/http"
	"time"
)

// Authenticator maps a client's token (and the request that carried it) to a user id.
// Sessions belong to the user that created them.
//
// On a WebSocket the token comes in a frame (hello, auth.refresh), and r is what the
// connection kept of its upgrade request: its method, URL, headers (without the
// handshake's own: Connection, Upgrade, Sec-WebSocket-*), Host, RemoteAddr and TLS
// state; no body, and a context that is never done (use ctx).
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request, token string) (userID string, err error)
}

// ExpiringAuthenticator is an Authenticator whose tokens expire. A transport that keeps a
// connection open past the token's expiry (the WebSocket) asks it for the expiry, warns
// the client shortly before, and closes the connection when it passes unless the client
// sends a new token for the same user. Authenticators that do not implement it are taken
// to issue tokens that never expire.
type ExpiringAuthenticator interface {
	Authenticator
	// AuthenticateExpiry is Authenticate that also returns when the token expires; the
	// zero time means never.
	AuthenticateExpiry(ctx context.Context, r *http.Request, token string) (userID string, expiresAt time.Time, err error)
}

// AuthenticateExpiry authenticates token with a, and returns its expiry when a is an
// ExpiringAuthenticator (the zero time otherwise).
func AuthenticateExpiry(ctx context.Context, a Authenticator, r *http.Request, token string) (string, time.Time, error) {
	if ea, ok := a.(ExpiringAuthenticator); ok {
		return ea.AuthenticateExpiry(ctx, r, token)
	}
	user, err := a.Authenticate(ctx, r, token)
	return user, time.Time{}, err
}

// Anonymous accepts everyone as the same user, "". It is the default: chatd runs behind
// whatever authenticates its users, or alone on a developer's machine.
type Anonymous struct{}

// Authenticate returns "" and no error.
func (Anonymous) Authenticate(context.Context, *http.Request, string) (string, error) { return "", nil }
