package ws

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// What a connection keeps of its upgrade request gives the Authenticator the request's
// headers (every value, in order), URL and address, without the handshake's headers.
func TestUpgradeKeepsWhatTheAuthenticatorReads(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/v1/ws?session=s&x=1", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	r.Header.Add("Cookie", "a=1")
	r.Header.Add("Cookie", "b=2")
	r.Header.Set("Chatd-Relay", "node-1")
	r.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	r.Header.Set("Upgrade", "websocket")
	r.Header.Set("Connection", "Upgrade")
	u := newUpgrade(r)

	require.Equal(t, "node-1", u.get("chatd-relay"))
	require.Empty(t, u.get("Sec-WebSocket-Key"))
	got := u.request()
	require.Equal(t, http.Header{"Cookie": {"a=1", "b=2"}, "Chatd-Relay": {"node-1"}}, got.Header)
	require.Equal(t, "/v1/ws", got.URL.Path)
	require.Equal(t, "1", got.URL.Query().Get("x"))
	require.Equal(t, r.RequestURI, got.RequestURI)
	require.Equal(t, "192.0.2.1:1234", got.RemoteAddr)
	require.Equal(t, r.Host, got.Host)
	require.Equal(t, http.MethodGet, got.Method)
	require.Equal(t, 1, got.ProtoMajor)
	require.NoError(t, got.Context().Err())
}
