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
	return newServerWithApp(t, ready, nil)
}

// newServerWithApp is newServer with app as transport.Config.App.
func newServerWithApp(t *testing.T, ready func(context.Context) error, app http.Handler) *httptest.Server {
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
	srv, err := transport.New(transport.Config{WebSocket: wsSrv, Ready: ready, App: app, Logger: log})
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

func requireStatus(t *testing.T, ts *httptest.Server, path string, want int) string {
	t.Helper()
	return requireMethodStatus(t, ts, http.MethodGet, path, want)
}

// requireMethodStatus requests path with method, requires the status and returns the body.
func requireMethodStatus(t *testing.T, ts *httptest.Server, method, path string, want int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, ts.URL+path, nil)
	require.NoError(t, err)
	resp, err := ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, body)
	return string(body)
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

// The app gets every path that is not the server's own; the server's own stay as they
// are, and an unknown /v1/ path is a plain 404, not the app's page.
func TestAppIsMountedBesideTheServersPaths(t *testing.T) {
	t.Parallel()
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("app " + r.URL.Path))
	})
	ts := newServerWithApp(t, nil, app)
	require.Equal(t, "app /", requireStatus(t, ts, "/", http.StatusOK))
	require.Equal(t, "app /c/x", requireStatus(t, ts, "/c/x", http.StatusOK))
	require.Equal(t, "ok\n", requireStatus(t, ts, "/healthz", http.StatusOK))
	require.Equal(t, "ready\n", requireStatus(t, ts, "/readyz", http.StatusOK))
	for _, path := range []string{"/v1", "/v1/", "/v1/nope", "/v1/ws/x"} {
		require.Equal(t, "404 page not found\n", requireStatus(t, ts, path, http.StatusNotFound), path)
	}
	require.Equal(t, "404 page not found\n", requireMethodStatus(t, ts, http.MethodPost, "/healthz", http.StatusNotFound))

	// Without an app, / is not found, as before.
	bare := newServer(t, nil)
	requireStatus(t, bare, "/", http.StatusNotFound)
}
