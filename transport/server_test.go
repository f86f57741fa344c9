package transport_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/ws"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newServer serves chatd's HTTP surface on a real database and a real listener, with
// ready as its readiness check (the database's ping when nil).
func newServer(t *testing.T, ready func(context.Context) error) *httptest.Server {
	t.Helper()
	st := storetest.New(t)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	h, err := hub.New(conversation.Config{Store: st, Agent: script.New(script.Text("ok")), Logger: log}, log)
	require.NoError(t, err)
	wsSrv, err := ws.New(ws.Config{Hub: h, Logger: log})
	require.NoError(t, err)
	if ready == nil {
		ready = st.Ping
	}
	srv, err := transport.New(transport.Config{WebSocket: wsSrv, Ready: ready, Logger: log})
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, h.Shutdown(ctx))
		require.NoError(t, srv.Shutdown(ctx))
		ts.Close()
	})
	return ts
}

func requireStatus(t *testing.T, ts *httptest.Server, path string, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+path, nil)
	require.NoError(t, err)
	resp, err := ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, "GET %s: %s", path, body)
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	up := newServer(t, nil)
	requireStatus(t, up, "/healthz", http.StatusOK)
	requireStatus(t, up, "/readyz", http.StatusOK)

	down := newServer(t, func(context.Context) error { return errors.New("database unavailable") })
	requireStatus(t, down, "/readyz", http.StatusServiceUnavailable)
	// Liveness does not depend on readiness.
	requireStatus(t, down, "/healthz", http.StatusOK)
}
