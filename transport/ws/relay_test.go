package ws_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// holder is a stand-in for the node holding a session: it records the relay header and
// the frames it gets, answers each with a frame of its own, and closes with 4321 on
// "bye".
type holder struct {
	ts     *httptest.Server
	header chan string
	frames chan string
}

func newHolder(t *testing.T) *holder {
	h := &holder{header: make(chan string, 1), frames: make(chan string, 16)}
	h.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.header <- r.Header.Get(transport.RelayHeader)
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{ws.Subprotocol}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				return
			}
			h.frames <- string(b)
			if strings.Contains(string(b), "bye") {
				_ = c.Close(4321, "holder says bye")
				return
			}
			if err := c.Write(context.Background(), websocket.MessageText, []byte(`{"echo":`+string(b)+`}`)); err != nil {
				return
			}
		}
	}))
	t.Cleanup(h.ts.Close)
	return h
}

// relayEnv is a node ("here") on whose database another node ("there", at addr) holds a
// session's lease.
func relayEnv(t *testing.T, addr string) (*env, string) {
	t.Helper()
	e := newEnv(t, envOptions{
		agent: script.New(script.Text("ok")),
		conv: func(c *conversation.Config) {
			c.Lease = &conversation.LeaseConfig{Node: func() string { return "here" }, Addr: func() string { return "here:1" }, TTL: time.Minute}
		},
		wsConfig: func(c *ws.Config) {
			c.Relay = transport.NewRelay(transport.Relay{
				OwnerOf: func(context.Context, uuid.UUID) (string, bool, error) { return addr, true, nil },
				Node:    func() string { return "here" },
			})
		},
	})
	ctx := context.Background()
	id := uuid.New()
	_, err := e.store.SessionCreate(ctx, chat.Session{ID: id, CreatedAt: e.ConvClock.Now()})
	require.NoError(t, err)
	_, l, err := e.store.LeaseAcquire(ctx, id, "there", addr, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "there", l.Node)
	return e, id.String()
}

func readText(t *testing.T, c *wstest.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wstest.ReadTimeout)
	defer cancel()
	_, b, err := c.WS.Read(ctx)
	require.NoError(t, err)
	return string(b)
}

// A hello for a session another node holds is relayed there as it came, with the
// commands pipelined behind it in order; the holder's frames and its close code come
// back unmodified.
func TestRelayAfterHello(t *testing.T) {
	h := newHolder(t)
	e, id := relayEnv(t, strings.TrimPrefix(h.ts.URL, "http://"))
	c := e.dial()
	hello := `{"type":"hello","sessionId":"` + id + `","token":"tok"}`
	c.SendRaw(websocket.MessageText, []byte(hello))
	c.SendRaw(websocket.MessageText, []byte(`{"type":"chat.send","requestId":"r1","content":"one"}`))
	c.SendRaw(websocket.MessageText, []byte(`{"type":"chat.send","requestId":"r2","content":"two"}`))
	require.Equal(t, "here", <-h.header)
	require.Equal(t, hello, <-h.frames)
	require.Contains(t, <-h.frames, `"r1"`)
	require.Contains(t, <-h.frames, `"r2"`)
	require.Equal(t, `{"echo":`+hello+`}`, readText(t, c))
	readText(t, c)
	readText(t, c)
	c.SendRaw(websocket.MessageText, []byte(`{"type":"chat.send","requestId":"bye","content":"bye"}`))
	require.Equal(t, websocket.StatusCode(4321), closeCode(t, c))
}

// A relayed hello reaching a node that does not hold the session is not relayed again:
// moved, 4010. So is a hello whose holder cannot be reached while its lease lives.
func TestRelayedHelloIsNotRelayedAgain(t *testing.T) {
	h := newHolder(t)
	e, id := relayEnv(t, strings.TrimPrefix(h.ts.URL, "http://"))
	c := wstest.Dial(t, e.URL, wstest.Header(transport.RelayHeader, "elsewhere"))
	c.Send(map[string]any{"type": "hello", "sessionId": id})
	f := c.Read()
	require.Equal(t, "error", f.Type, "%s", f.Raw)
	require.Equal(t, "moved", f.Code)
	require.Equal(t, websocket.StatusCode(4010), c.ExpectClose())
	select {
	case <-h.header:
		t.Fatal("the relayed hello was relayed again")
	default:
	}

	h.ts.Close()
	c = e.dial()
	c.Send(map[string]any{"type": "hello", "sessionId": id})
	f = c.Read()
	require.Equal(t, "moved", f.Code, "%s", f.Raw)
	require.Equal(t, websocket.StatusCode(4010), c.ExpectClose())
}

func closeCode(t *testing.T, c *wstest.Client) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wstest.ReadTimeout)
	defer cancel()
	for {
		_, _, err := c.WS.Read(ctx)
		if err != nil {
			return websocket.CloseStatus(err)
		}
	}
}
