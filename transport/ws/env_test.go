package ws_test

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/time/rate"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is a chatd server on a real database and a real listener.
type env struct {
	t     testing.TB
	store *store.Store
	hub   *hub.Hub
	srv   *transport.Server
	ws    *ws.Server
	ts    *httptest.Server
	URL   string // ws://.../v1/ws
	// ConvClock drives the actors, WSClock the connections; separate so tests can count
	// each side's timers.
	ConvClock *clockwork.FakeClock
	WSClock   *clockwork.FakeClock
}

type envOptions struct {
	agent    conversation.Agent
	conv     func(*conversation.Config)
	wsConfig func(*ws.Config)
	pool     []func(*pgxpool.Config)
	listener func(net.Listener) net.Listener
	realWS   bool // use the real clock for connections
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	st := storetest.New(t, o.pool...)
	e := &env{t: t, store: st, ConvClock: clockwork.NewFakeClock(), WSClock: clockwork.NewFakeClock()}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)

	cc := conversation.Config{Store: st, Agent: o.agent, Clock: e.ConvClock, Logger: log}
	if o.conv != nil {
		o.conv(&cc)
	}
	h, err := hub.New(cc, log)
	require.NoError(t, err)
	e.hub = h

	// The limits are off unless a test turns them on: the connections' clock is fake, so
	// buckets would never refill for tests that send many frames or dial many times.
	wc := ws.Config{Hub: h, Logger: log, Clock: e.WSClock,
		CommandRate: rate.Inf, HandshakeRate: rate.Inf, MaxConnsPerUser: -1, MaxConnsPerAddr: -1}
	if o.realWS {
		wc.Clock = clockwork.NewRealClock()
	}
	if o.wsConfig != nil {
		o.wsConfig(&wc)
	}
	wsSrv, err := ws.New(wc)
	require.NoError(t, err)
	e.ws = wsSrv
	srv, err := transport.New(transport.Config{WebSocket: wsSrv, Ready: st.Ping, Logger: log})
	require.NoError(t, err)
	e.srv = srv

	e.ts = httptest.NewUnstartedServer(srv.Handler())
	if o.listener != nil {
		e.ts.Listener = o.listener(e.ts.Listener)
	}
	e.ts.Start()
	e.URL = "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/v1/ws"

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, h.Shutdown(ctx))
		require.NoError(t, srv.Shutdown(ctx))
		e.ts.Close()
	})
	return e
}

func (e *env) dial() *wstest.Client {
	e.t.Helper()
	return wstest.Dial(e.t, e.URL, nil)
}

// session dials and says hello to a new session.
func (e *env) session() *wstest.Client {
	e.t.Helper()
	c := e.dial()
	c.Hello("")
	return c
}

// join dials and says hello to an existing session.
func (e *env) join(sessionID string) *wstest.Client {
	e.t.Helper()
	c := e.dial()
	c.Hello(sessionID)
	return c
}

// dbMessages returns a session's stored messages in wire form.
func (e *env) dbMessages(sessionID string) []wstest.Message {
	e.t.Helper()
	id, err := uuidParse(sessionID)
	require.NoError(e.t, err)
	msgs, _, err := e.store.MessagesBefore(context.Background(), id, 0, 100000)
	require.NoError(e.t, err)
	out, err := wstest.FromStore(msgs)
	require.NoError(e.t, err)
	return out
}

// requireConverged checks that every client holds exactly the stored transcript.
func (e *env) requireConverged(sessionID string, clients ...*wstest.Client) {
	e.t.Helper()
	db := e.dbMessages(sessionID)
	for i, c := range clients {
		if d := wstest.Diff(db, c.State.Sorted()); d != "" {
			e.t.Fatalf("client %d differs from the database: %s", i, d)
		}
	}
}
