package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/mcp"
	"github.com/chatd/chatd/agent/mcp/mcptest"
	"github.com/chatd/chatd/agent/sandbox"
)

func TestMain(m *testing.M) {
	if os.Getenv("MCPTEST_STDIO") == "1" {
		stdioServer()
		return
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"))
}

// stdioServer is this test binary as a stdio MCP server (MCPTEST_STDIO=1): echo, and pid
// (its process id, to kill it).
func stdioServer() {
	s := sdk.NewServer(&sdk.Implementation{Name: "stdio-test", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "echo", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "stdio echo: " + string(req.Params.Arguments)}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "pid", InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil
		})
	_ = s.Run(context.Background(), &sdk.StdioTransport{})
}

// env is a tool call's Env: what it streamed and the progress it reported.
type env struct {
	mu       sync.Mutex
	out      bytes.Buffer
	progress []string
}

func (e *env) Output() io.Writer { return lockedWriter{e} }
func (e *env) Progress(step, of int, label string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.progress = append(e.progress, fmt.Sprintf("%d/%d %s", step, of, label))
	return nil
}
func (e *env) Sandbox(context.Context) (sandbox.Sandbox, error) { return nil, errors.New("none") }
func (e *env) progressed() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.progress...)
}

func (e *env) output() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.String()
}

type lockedWriter struct{ e *env }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.e.mu.Lock()
	defer w.e.mu.Unlock()
	return w.e.out.Write(p)
}

func start(t *testing.T, cfg string, o mcp.Options) (*mcp.Manager, *agent.Registry) {
	t.Helper()
	c, err := mcp.Parse([]byte(cfg))
	require.NoError(t, err)
	reg, err := agent.NewRegistry()
	require.NoError(t, err)
	o.Registry = reg
	if o.Logger.GetLevel() == zerolog.DebugLevel {
		o.Logger = zerolog.Nop()
	}
	m, err := mcp.Start(c, o)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m, reg
}

func call(t *testing.T, reg *agent.Registry, name, input, owner string) (string, error, *env) {
	t.Helper()
	tool, _, ok := reg.Lookup(name)
	require.True(t, ok, "tool %s", name)
	e := &env{}
	ctx := agent.WithCallInfo(context.Background(), agent.CallInfo{CallID: "call-" + uuid.NewString(), Tool: name, SessionID: uuid.New(), RunID: uuid.New(), Owner: owner})
	out, err := tool.Run(ctx, json.RawMessage(input), e)
	return out, err, e
}

func specOf(t *testing.T, reg *agent.Registry, name string) agent.ToolSpec {
	t.Helper()
	_, spec, ok := reg.Lookup(name)
	require.True(t, ok, "tool %s", name)
	return spec
}

// eventually waits for cond, polling (an MCP server's reconnect is asynchronous).
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, 20*time.Second, 10*time.Millisecond, what)
}

func TestParseRefusesBadConfigurationNamingServerAndKey(t *testing.T) {
	for _, c := range []struct{ cfg, want string }{
		{`{`, "not valid JSON"},
		{`{"servers": {}}`, `unknown key "servers"`},
		{`{}`, `no "mcpServers"`},
		{`{"mcpServers": {"docs": {}}}`, `mcp server "docs": neither "url"`},
		{`{"mcpServers": {"docs": {"url": "http://x/mcp", "command": "x"}}}`, `mcp server "docs": both "url" and "command"`},
		{`{"mcpServers": {"docs": {"url": "http://x/mcp", "colour": "red"}}}`, `mcp server "docs": unknown key "colour"`},
		{`{"mcpServers": {"docs": {"url": "ftp://x"}}}`, `mcp server "docs": "url" "ftp://x"`},
		{`{"mcpServers": {"docs": {"url": "http://x/mcp", "approval": "sometimes"}}}`, `mcp server "docs": "approval": "sometimes"`},
		{`{"mcpServers": {"docs": {"url": "http://x/mcp", "tools": {"search": {"approval": "maybe"}}}}}`, `mcp server "docs": "tools" "search" "approval"`},
		{`{"mcpServers": {"docs": {"url": "http://x/mcp", "tools": {"search": {"retries": 3}}}}}`, `mcp server "docs": unknown key "retries"`},
		{`{"mcpServers": {"docs": {"url": "http://x/mcp", "timeout": "soon"}}}`, `mcp server "docs": "soon" is not a positive duration`},
		{`{"mcpServers": {"docs": {"url": "http://x/mcp", "stale": "never"}}}`, `"never" is not a positive duration (such as "30s" or "5m"), or "off"`},
		{`{"mcpServers": {"docs": {"url": "http://x/mcp", "forwardUser": "bearer"}}}`, `mcp server "docs"`},
		{`{"mcpServers": {"a__b": {"url": "http://x/mcp"}}}`, `mcp server "a__b": the name`},
		{`{"mcpServers": {"files": {"command": "x", "headers": {"a": "b"}}}}`, `mcp server "files": "headers" are for "url" servers`},
		{`{"mcpServers": {"files": {"type": "sse", "url": "http://x/sse"}}}`, `mcp server "files": "type" "sse"`},
	} {
		_, err := mcp.Parse([]byte(c.cfg))
		require.Error(t, err, c.cfg)
		require.Contains(t, err.Error(), c.want, c.cfg)
	}
	cfg, err := mcp.Parse([]byte(`{"mcpServers": {
		"docs": {"url": "https://docs.example/mcp", "headers": {"Authorization": "Bearer k"}, "approval": "never", "timeout": "30s", "forwardUser": true,
			"tools": {"delete": {"approval": "always", "idempotent": false}}},
		"files": {"type": "stdio", "command": "npx", "args": ["-y", "server"], "env": {"ROOT": "/srv"}},
		"off": {"url": "http://x/mcp", "disabled": true}}}`))
	require.NoError(t, err)
	require.Len(t, cfg.Servers, 2, "a disabled server is left out")
	require.Equal(t, mcp.ForwardID, string(cfg.Servers["docs"].ForwardUser))
	require.Equal(t, 30*time.Second, time.Duration(cfg.Servers["docs"].Timeout))
}

// A streamable HTTP server's tools: named <server>__<tool>, approval and idempotency from
// their annotations unless configured, the call id as the idempotency key, the user's id
// forwarded to that user's calls only, progress streamed, isError a failed call.
func TestHTTPServerTools(t *testing.T) {
	srv := mcptest.Start(t)
	_, reg := start(t, `{"mcpServers": {"t": {"url": "`+srv.URL+`", "forwardUser": true, "stale": "90s", "tools": {"fail": {"approval": "always"}, "slow": {"stale": "off"}}}}}`, mcp.Options{})
	var names []string
	for _, s := range reg.Specs() {
		names = append(names, s.Name)
	}
	require.ElementsMatch(t, []string{"t__echo", "t__lookup", "t__charge", "t__whoami", "t__slow", "t__progress", "t__fail"}, names)
	require.False(t, specOf(t, reg, "t__echo").NeedsApproval, "readOnlyHint: no approval")
	require.True(t, specOf(t, reg, "t__echo").Idempotent, "readOnlyHint: idempotent")
	require.Equal(t, 90*time.Second, specOf(t, reg, "t__echo").StaleAfter, "the server's stale")
	require.Negative(t, specOf(t, reg, "t__slow").StaleAfter, "the tool's own: never stale")
	require.True(t, specOf(t, reg, "t__charge").NeedsApproval, "not read-only: approval")
	require.False(t, specOf(t, reg, "t__charge").Idempotent)
	require.True(t, specOf(t, reg, "t__lookup").Idempotent, "idempotentHint")
	require.True(t, specOf(t, reg, "t__fail").NeedsApproval, "configured: always")
	require.Contains(t, specOf(t, reg, "t__echo").Description, "Echoes text.")
	require.JSONEq(t, `{"type":"object","properties":{"text":{"type":"string"}}}`, string(specOf(t, reg, "t__echo").InputSchema))

	out, err, _ := call(t, reg, "t__echo", `{"text":"hi"}`, "alice")
	require.NoError(t, err)
	require.Equal(t, "echo: hi", out)
	got := srv.Calls()[0]
	require.True(t, strings.HasPrefix(got.Key, "call-"), "the call id is the idempotency key: %q", got.Key)
	require.Equal(t, []string{"alice", "alice"}, []string{got.UserHeader, got.UserMeta})

	// Two users at once: each call carries its own user, never the other's.
	var wg sync.WaitGroup
	outs := make([]string, 20)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := []string{"alice", "bob"}[i%2]
			o, err, _ := call(t, reg, "t__whoami", `{}`, user)
			if err == nil {
				outs[i] = user + ": " + o
			}
		}()
	}
	wg.Wait()
	for i, o := range outs {
		user := []string{"alice", "bob"}[i%2]
		require.Equal(t, user+": header="+user+" meta="+user, o)
	}

	out, err, e := call(t, reg, "t__progress", `{}`, "alice")
	require.NoError(t, err)
	require.Equal(t, "progressed", out)
	// Notifications are handled apart from the call's answer: the last may come after
	// it, when the call is over and nothing is streamed any more.
	requirePrefix(t, []string{"progress 1/3: step", "progress 2/3: step", "progress 3/3: step"}, strings.Split(strings.TrimSuffix(e.output(), "\n"), "\n"))
	requirePrefix(t, []string{"1/3 step", "2/3 step", "3/3 step"}, e.progressed())

	_, err, _ = call(t, reg, "t__fail", `{}`, "alice")
	require.EqualError(t, err, "the card was declined")
}

// Without forwardUser nothing of the user reaches the server.
func TestNoForwardUser(t *testing.T) {
	srv := mcptest.Start(t)
	_, reg := start(t, `{"mcpServers": {"t": {"url": "`+srv.URL+`"}}}`, mcp.Options{})
	out, err, _ := call(t, reg, "t__whoami", `{}`, "alice")
	require.NoError(t, err)
	require.Equal(t, "header= meta=", out)
}

// A cancelled run cancels its call on the server (notifications/cancelled); a call past
// its timeout is cancelled and fails with a message the model can read.
func TestCancelAndTimeout(t *testing.T) {
	srv := mcptest.Start(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	_, reg := start(t, `{"mcpServers": {"t": {"url": "`+srv.URL+`", "tools": {"lookup": {"timeout": "5s"}}}}}`, mcp.Options{Clock: clock})

	tool, _, _ := reg.Lookup("t__slow")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tool.Run(agent.WithCallInfo(ctx, agent.CallInfo{CallID: "c1"}), json.RawMessage(`{}`), &env{})
		done <- err
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	_, ok := srv.Started(wctx)
	require.True(t, ok)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	calls := srv.WaitCalls(wctx, 1, true)
	require.True(t, calls[0].Cancelled, "the server saw the cancellation")

	srv.Hold()
	defer srv.Release()
	go func() {
		_, err := tool2(reg).Run(agent.WithCallInfo(context.Background(), agent.CallInfo{CallID: "c2"}), json.RawMessage(`{}`), &env{})
		done <- err
	}()
	_, ok = srv.Started(wctx)
	require.True(t, ok)
	require.NoError(t, clock.BlockUntilContext(wctx, 2)) // the call's timer (and the manager's wait)
	clock.Advance(5 * time.Second)
	err := <-done
	require.ErrorContains(t, err, `the MCP server "t" did not answer within 5s; the call was cancelled`)
}

func tool2(reg *agent.Registry) agent.Tool {
	t, _, _ := reg.Lookup("t__lookup")
	return t
}

// A server that goes away mid-call gives a failed call; when it is back, its tools are
// again, and a tool it adds later (list_changed) is offered.
func TestServerGoneAndBack(t *testing.T) {
	srv := mcptest.Start(t)
	m, reg := start(t, `{"mcpServers": {"t": {"url": "`+srv.URL+`"}}}`, mcp.Options{})
	srv.Hold()
	done := make(chan error, 1)
	go func() {
		_, err, _ := call(t, reg, "t__charge", `{}`, "alice")
		done <- err
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	_, ok := srv.Started(wctx)
	require.True(t, ok)
	srv.Restart()
	err := <-done
	require.Error(t, err)
	require.Contains(t, err.Error(), `the MCP server "t"`)

	eventually(t, func() bool {
		if _, _, ok := reg.Lookup("t__echo"); !ok {
			return false
		}
		out, err, _ := call(t, reg, "t__echo", `{"text":"back"}`, "alice")
		return err == nil && out == "echo: back"
	}, "the server is picked up again")
	require.True(t, m.Status()[0].Connected)

	srv.AddTool("later")
	eventually(t, func() bool { _, _, ok := reg.Lookup("t__later"); return ok }, "a tool added later is offered")
}

// A server down at start: its tools are absent (and the status says why) until it
// answers.
func TestServerDownAtStart(t *testing.T) {
	srv := mcptest.Start(t)
	url := srv.URL
	srv.Close()
	m, reg := start(t, `{"mcpServers": {"t": {"url": "`+url+`"}}}`, mcp.Options{InitialWait: time.Second})
	_, _, ok := reg.Lookup("t__echo")
	require.False(t, ok)
	st := m.Status()
	require.False(t, st[0].Connected)
	require.NotEmpty(t, st[0].Error)
	srv.Restart()
	eventually(t, func() bool { _, _, ok := reg.Lookup("t__echo"); return ok }, "its tools once it answers")
}

// A stdio server is chatd's child: started with the configured command, env and args,
// restarted when it dies, stopped (its process gone) at Close.
func TestStdioServer(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	m, reg := start(t, `{"mcpServers": {"local": {"command": "`+self+`", "args": ["-test.run=^$"], "env": {"MCPTEST_STDIO": "1"}}}}`, mcp.Options{})
	out, err, _ := call(t, reg, "local__echo", `{"a":1}`, "alice")
	require.NoError(t, err)
	require.Equal(t, `stdio echo: {"a":1}`, out)
	pidText, err, _ := call(t, reg, "local__pid", `{}`, "alice")
	require.NoError(t, err)
	pid, err := strconv.Atoi(pidText)
	require.NoError(t, err)

	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	eventually(t, func() bool {
		if _, _, ok := reg.Lookup("local__pid"); !ok {
			return false
		}
		p, err, _ := call(t, reg, "local__pid", `{}`, "alice")
		return err == nil && p != pidText
	}, "a new process after the old one died")
	pidText, _, _ = call(t, reg, "local__pid", `{}`, "alice")
	pid, _ = strconv.Atoi(pidText)
	m.Close()
	require.Error(t, syscall.Kill(pid, 0), "the server is gone after Close")
}

// A tool whose name a tool of chatd's already has stops the start, naming both.
func TestNameCollisionAtStart(t *testing.T) {
	srv := mcptest.Start(t)
	c, err := mcp.Parse([]byte(`{"mcpServers": {"t": {"url": "` + srv.URL + `"}}}`))
	require.NoError(t, err)
	reg, err := agent.NewRegistry(named("t__echo"))
	require.NoError(t, err)
	_, err = mcp.Start(c, mcp.Options{Registry: reg, Logger: zerolog.Nop()})
	require.ErrorContains(t, err, `mcp server "t": tool "echo" is offered as "t__echo", which another tool already is`)
}

type named string

func (n named) Spec() agent.ToolSpec { return agent.ToolSpec{Name: string(n)} }
func (n named) Run(context.Context, json.RawMessage, agent.Env) (string, error) {
	return "", nil
}

// The server everything, @modelcontextprotocol/server-everything (npm, pinned in
// web/package.json), over stdio and over streamable HTTP.
func TestServerEverything(t *testing.T) {
	entry := os.Getenv("CHATD_MCP_EVERYTHING")
	if entry == "" {
		t.Fatal("CHATD_MCP_EVERYTHING is not set: make test-go sets it (web/node_modules/@modelcontextprotocol/server-everything/dist/index.js, installed by npm ci in web/)")
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err)
	port := freePort(t)
	httpSrv := exec.Command(node, entry, "streamableHttp")
	httpSrv.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	httpSrv.Stderr = os.Stderr
	require.NoError(t, httpSrv.Start())
	t.Cleanup(func() { _ = httpSrv.Process.Kill(); _ = httpSrv.Wait() })

	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			cfg := `{"mcpServers": {"everything": {"command": "` + node + `", "args": ["` + entry + `", "stdio"]}}}`
			if transport == "http" {
				cfg = fmt.Sprintf(`{"mcpServers": {"everything": {"url": "http://127.0.0.1:%d/mcp"}}}`, port)
			}
			_, reg := start(t, cfg, mcp.Options{InitialWait: 20 * time.Second})
			eventually(t, func() bool { _, _, ok := reg.Lookup("everything__echo"); return ok }, "everything's tools")
			require.False(t, specOf(t, reg, "everything__echo").NeedsApproval, "echo is readOnlyHint")
			require.True(t, specOf(t, reg, "everything__toggle-simulated-logging").NeedsApproval, "not read-only: asks a person")

			out, err, _ := call(t, reg, "everything__echo", `{"message":"hello"}`, "alice")
			require.NoError(t, err)
			require.Equal(t, "Echo: hello", out)
			out, err, _ = call(t, reg, "everything__get-sum", `{"a":2,"b":3}`, "alice")
			require.NoError(t, err)
			require.Contains(t, out, "5")

			out, err, e := call(t, reg, "everything__trigger-long-running-operation", `{"duration":0.3,"steps":3}`, "alice")
			require.NoError(t, err)
			require.Contains(t, out, "Long running operation completed")
			requirePrefix(t, []string{"1/3 ", "2/3 ", "3/3 "}, e.progressed())

			// Cancelled after its first step: it returns at once.
			tool, _, _ := reg.Lookup("everything__trigger-long-running-operation")
			ctx, cancel := context.WithCancel(context.Background())
			e = &env{}
			done := make(chan error, 1)
			go func() {
				_, err := tool.Run(agent.WithCallInfo(ctx, agent.CallInfo{CallID: "long"}), json.RawMessage(`{"duration":60,"steps":60}`), e)
				done <- err
			}()
			eventually(t, func() bool { return strings.Contains(e.output(), "progress 1/60") }, "the first step")
			at := time.Now()
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
			require.Less(t, time.Since(at), 5*time.Second)
		})
	}
}

// requirePrefix: got is want, or its start (at least one element).
func requirePrefix(t *testing.T, want, got []string) {
	t.Helper()
	require.NotEmpty(t, got)
	require.LessOrEqual(t, len(got), len(want))
	require.Equal(t, want[:len(got)], got)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
