package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// childEnv, when "1", makes the test binary run the example's main instead of the tests,
// so that the test starts the program as a real process, as cmd/chatd's tests do.
const childEnv = "EMBED_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Args = append([]string{os.Args[0]}, childArgs(os.Args[1:])...)
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// childArgs drops the test flags go test passes the binary (-test.*), which are not the
// program's.
func childArgs(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-test.") {
			out = append(out, a)
		}
	}
	return out
}

// syncBuffer collects the program's output while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The example program serves chatd with its own tool: a chat that names an order makes
// the model call lookup_order, which runs in the program, and its result is stored in
// the session's transcript.
func TestServesChatWithItsOwnTool(t *testing.T) {
	dbURL := storetest.NewURL(t)
	out := &syncBuffer{}
	cmd := exec.Command(os.Args[0], "-addr", "127.0.0.1:0", "-admin-addr", "off")
	cmd.Env = append(os.Environ(), childEnv+"=1", "EMBED_MODEL=scripted", "DATABASE_URL="+dbURL,
		"CHATD_LOG_FORMAT=json", "CHATD_SANDBOX_DIR="+t.TempDir())
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	var waitErr error
	done := make(chan struct{}) // closed once the program has exited, with waitErr
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("the program's output:\n%s", out.String())
		}
	})

	var addr string
	require.Eventually(t, func() bool {
		addr = listeningOn(out.String())
		return addr != ""
	}, 30*time.Second, 20*time.Millisecond, "the program did not say where it listens")

	c := wstest.Dial(t, "ws://"+addr+"/v1/ws", nil)
	sessionID := c.Hello("").SessionID
	ack := c.Chat("req-1", "Where is my order A-1001?")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	end := c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)

	// The tool's result is in the stored transcript: lookup_order ran, in the program.
	var call *chat.ToolCall
	for _, m := range storedMessages(t, dbURL, sessionID) {
		if m.Tool != nil && m.Tool.Name == "lookup_order" {
			call = m.Tool
		}
	}
	require.NotNil(t, call, "no lookup_order call is stored")
	require.Equal(t, chat.ToolOK, call.Status)
	require.JSONEq(t, `{"order_id":"A-1001"}`, string(call.Input))
	require.NotNil(t, call.Output)
	require.JSONEq(t, `{"order_id":"A-1001","status":"shipped","carrier":"Parcelforce","eta":"2026-12-02"}`, *call.Output)

	// It shuts down gracefully on SIGTERM.
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-done:
		require.NoError(t, waitErr, "the program exits 0")
	case <-time.After(30 * time.Second):
		t.Fatal("the program did not exit within 30s of SIGTERM")
	}
	require.Contains(t, out.String(), `"stopped"`)
}

// listeningOn reads the address from chatd's log line "chatd listening", or "".
func listeningOn(log string) string {
	for _, line := range strings.Split(log, "\n") {
		var l struct {
			Message string `json:"message"`
			Addr    string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(l.Message, "chatd listening") {
			if _, _, err := net.SplitHostPort(l.Addr); err == nil {
				return l.Addr
			}
		}
	}
	return ""
}

// storedMessages returns the session's stored messages, in order.
func storedMessages(t *testing.T, dbURL, sessionID string) []chat.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer pool.Close()
	id, err := uuid.Parse(sessionID)
	require.NoError(t, err)
	msgs, _, err := store.New(pool).MessagesBefore(ctx, id, 0, 200)
	require.NoError(t, err)
	return msgs
}
