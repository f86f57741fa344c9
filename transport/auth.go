package transport

import (
	"context"
	"net/http"
)

// Authenticator maps a client's token (and the request that carried it) to a user id.
// Sessions belong to the user that created them.
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request, token string) (userID string, err error)
}

// Anonymous accepts everyone as the same user, "". It is the default: chatd runs behind
// whatever authenticates its users, or alone on a developer's machine.
type Anonymous struct{}

// Authenticate returns "" and no error.
func (Anonymous) Authenticate(context.Context, *http.Request, string) (string, error) { return "", nil }
