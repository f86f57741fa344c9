package transport_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/transport"
)

// A request another node relayed is never relayed again, whoever holds the session: the
// holder changed meanwhile, and this node answers as it can (loop prevention). A failed
// lookup is served here too.
func TestRelayOwner(t *testing.T) {
	lookups := 0
	var fail error
	r := transport.NewRelay(transport.Relay{
		OwnerOf: func(context.Context, uuid.UUID) (string, bool, error) {
			lookups++
			return "10.0.0.2:8080", fail == nil, fail
		},
		Node: func() string { return "a" },
	})
	id := uuid.New()

	req := httptest.NewRequest("DELETE", "/v1/sessions/"+id.String(), nil)
	addr, ok := r.Owner(req, id)
	require.True(t, ok)
	require.Equal(t, "10.0.0.2:8080", addr)

	req.Header.Set(transport.RelayHeader, "b")
	_, ok = r.Owner(req, id)
	require.False(t, ok, "a relayed request is served where it arrives")
	require.Equal(t, 1, lookups, "without even looking")

	fail = errors.New("database down")
	_, ok = r.Owner(httptest.NewRequest("DELETE", "/", nil), id)
	require.False(t, ok)

	var none *transport.Relay
	_, ok = none.Owner(httptest.NewRequest("DELETE", "/", nil), id)
	require.False(t, ok, "one node relays nothing")
}
