package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// echoTool is a program's own tool.
type echoTool struct{ name string }

func (e echoTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: e.name, Description: "Says its text back.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)}
}

func (echoTool) Run(_ context.Context, input json.RawMessage, _ agent.Env) (string, error) {
	var in struct{ Text string }
	if err := json.Unmarshal(input, &in); err != nil {
		return "", err
	}
	return "echo: " + in.Text, nil
}

// libraryConfig is a Config built in Go, as a program embedding chatd builds one.
func libraryConfig(t *testing.T, dbURL string) Config {
	cfg := DefaultConfig()
	cfg.DatabaseURL = dbURL
	cfg.AdminAddr = AdminOff
	cfg.SandboxDir = t.TempDir()
	return cfg
}

// DefaultConfig is what the command has with no flag and no variable.
func TestDefaultConfigIsTheCommandsDefaults(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://db/chatd", "HOME": os.Getenv("HOME"), "XDG_CACHE_HOME": os.Getenv("XDG_CACHE_HOME")}
	want, err := ConfigFromEnv(nil, envMap(env), io.Discard)
	require.NoError(t, err)
	got := DefaultConfig()
	require.Empty(t, got.DatabaseURL)
	got.DatabaseURL = "postgres://db/chatd"
	require.Equal(t, want, got)
}

// New refuses what the command would refuse, and what only a program can get wrong.
func TestNewRefuses(t *testing.T) {
	never := "postgres://127.0.0.1:1/never-reached"
	for name, tc := range map[string]struct {
		cfg  func(*Config)
		opts []Option
		want string
	}{
		"a Config not from DefaultConfig": {cfg: func(c *Config) { *c = Config{DatabaseURL: never} }, want: "CHATD_ADDR (-addr) is empty"},
		"no database":                     {cfg: func(c *Config) { c.DatabaseURL = "" }, want: "DATABASE_URL"},
		"a built-in tool's name":          {opts: []Option{WithTools(echoTool{"current_time"})}, want: `tool "current_time" is registered twice`},
		"a name twice":                    {opts: []Option{WithTools(echoTool{"echo"}), WithTools(echoTool{"echo"})}, want: `tool "echo" is registered twice`},
		"a bad name":                      {opts: []Option{WithTools(echoTool{"no spaces"})}, want: `tool name "no spaces"`},
		"a model without a name":          {opts: []Option{WithModel(modeltest.New(), "")}, want: "WithModel"},
		"no port without a listener":      {opts: []Option{WithoutListener()}, cfg: func(c *Config) { c.Addr = "127.0.0.1:0" }, want: "WithoutListener"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := libraryConfig(t, never)
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			s, err := New(cfg, append(tc.opts, WithLogger(zerolog.Nop()))...)
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, s)
		})
	}
}

// A program serves chatd's Handler from its own http.Server, with a tool and a model of
// its own: the model calls the tool, which runs, and its result is stored.
func TestEmbeddedWithoutListener(t *testing.T) {
	dbURL := storetest.NewURL(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg := libraryConfig(t, dbURL)
	cfg.Addr = ln.Addr().String()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("call-1", "echo", `{"text":"hi"}`)}},
		modeltest.Say("said ", "it"),
	)
	logBuf := &syncBuffer{}
	s, err := New(cfg, WithTools(echoTool{"echo"}), WithModel(model, "scripted"), WithoutListener(),
		WithLogger(zerolog.New(logBuf)))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.Start(ctx))
	require.Equal(t, cfg.Addr, s.Addr())
	require.Empty(t, s.AdminAddr())
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		if t.Failed() {
			t.Logf("chatd log:\n%s", logBuf.String())
		}
	}()

	c := wstest.Dial(t, "ws://"+cfg.Addr+"/v1/ws", nil)
	sessionID := c.Hello("").SessionID
	ack := c.Chat("req-1", "say hi")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	st := openStore(t, dbURL)
	var tool *chat.ToolCall
	for _, m := range sessionMessages(t, st, sessionID) {
		if m.Tool != nil {
			tool = m.Tool
		}
	}
	require.NotNil(t, tool)
	require.Equal(t, "echo", tool.Name)
	require.Equal(t, chat.ToolOK, tool.Status)
	require.Equal(t, "echo: hi", *tool.Output)
	require.Equal(t, "scripted", getRun(t, st, ack.RunID).Model, "the run is stored with WithModel's name")
	specs := model.Requests()[0].Tools
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"current_time", "echo"}, names, "the built-in tools and the program's; not the demo's")

	// Shutdown first (it ends chatd's sockets and streams), then the program's server.
	// The client reads no more: closed now, chatd does not wait out the close handshake.
	c.WS.CloseNow()
	require.NoError(t, s.Shutdown(ctx))
	require.NoError(t, srv.Shutdown(ctx))
	require.True(t, errors.Is(<-served, http.ErrServerClosed))
}

// Run serves until its context is done, then shuts down.
func TestRun(t *testing.T) {
	cfg := libraryConfig(t, storetest.NewURL(t))
	cfg.Addr = "127.0.0.1:0"
	logBuf := &syncBuffer{}
	s, err := New(cfg, WithLogger(zerolog.New(logBuf)))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	require.Eventually(t, func() bool { return strings.Contains(logBuf.String(), "chatd listening") }, 30*time.Second, 10*time.Millisecond)
	resp, err := http.Get("http://" + s.Addr() + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	cancel()
	select {
	case err := <-ran:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of its context's end")
	}
	require.Contains(t, logBuf.String(), `"stopped"`)
}
