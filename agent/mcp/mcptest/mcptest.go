// Package mcptest is an MCP server for tests, built on the official Go SDK and served
// over streamable HTTP from the test process (so that it outlives a chatd killed with
// kill -9): it records every call it gets (the tool, chatd's idempotency key, the
// forwarded user in the header and in _meta, whether it was cancelled) and has tools
// that block until a test lets them go.
//
// Tools: echo (readOnlyHint), lookup (idempotentHint; blocks while Hold is set), charge
// (neither; blocks while Hold is set), whoami (the forwarded user), slow (runs until
// cancelled), progress (three progress notifications, then done), fail (isError).
package mcptest

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Call is a call the server got.
type Call struct {
	Tool       string
	Args       json.RawMessage
	Key        string // _meta "chatd/idempotency-key"
	UserHeader string // X-Chatd-User
	UserMeta   string // _meta "chatd/user"
	// TokenHeader and TokenMeta are X-Chatd-User-Token and _meta "chatd/user-token".
	TokenHeader, TokenMeta string
	Cancelled              bool // its context ended before it returned
	Done                   bool
}

// Server is a running test server.
type Server struct {
	URL string

	t    testing.TB
	addr string
	mu   sync.Mutex
	srv  *httptest.Server
	// calls are every call, in arrival order; started is signalled on each.
	calls   []*Call
	started chan string
	hold    chan struct{}
	extra   []string // tools added with AddTool (list_changed)
	mcp     *sdk.Server
}

// Start serves a new server on a free port; it is closed when the test ends.
func Start(t testing.TB) *Server {
	s := &Server{t: t, started: make(chan string, 64)}
	s.serve("127.0.0.1:0")
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serve(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatalf("mcptest: listen: %v", err)
	}
	s.mcp = s.newMCP()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp }, nil)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	s.mu.Lock()
	s.srv = srv
	s.addr = ln.Addr().String()
	s.URL = "http://" + s.addr + "/mcp"
	s.mu.Unlock()
}

// Close stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	srv, m := s.srv, s.mcp
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.CloseClientConnections()
	s.Release() // held calls return, to a client that is gone
	for ss := range m.Sessions() {
		_ = ss.Close()
	}
	srv.Close()
}

// Restart stops the server (cutting its connections: calls in flight fail) and serves a
// new one on the same address: a server restarted under its clients.
func (s *Server) Restart() {
	s.Close()
	s.serve(s.addr)
}

// Hold makes lookup and charge block until Release.
func (s *Server) Hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = make(chan struct{})
}

// Release lets held calls return.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
}

// Started waits for the next call to start and returns its tool.
func (s *Server) Started(ctx context.Context) (string, bool) {
	select {
	case tool := <-s.started:
		return tool, true
	case <-ctx.Done():
		return "", false
	}
}

// Calls returns a copy of the calls so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Call, len(s.calls))
	for i, c := range s.calls {
		out[i] = *c
	}
	return out
}

// AddTool adds a tool named name (that echoes) while clients are connected: they get
// notifications/tools/list_changed.
func (s *Server) AddTool(name string) {
	s.mu.Lock()
	s.extra = append(s.extra, name)
	m := s.mcp
	s.mu.Unlock()
	m.AddTool(&sdk.Tool{Name: name, Description: "added later", InputSchema: json.RawMessage(`{"type":"object"}`)}, s.handler(name, s.echo))
}

var object = json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)

func (s *Server) newMCP() *sdk.Server {
	m := sdk.NewServer(&sdk.Implementation{Name: "mcptest", Version: "1"}, nil)
	yes := true
	m.AddTool(&sdk.Tool{Name: "echo", Description: "Echoes text.", InputSchema: object, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.handler("echo", s.echo))
	m.AddTool(&sdk.Tool{Name: "lookup", Description: "Looks something up (idempotent).", InputSchema: object, Annotations: &sdk.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(bool)}}, s.handler("lookup", s.held("looked up")))
	m.AddTool(&sdk.Tool{Name: "charge", Description: "Charges a card (not idempotent).", InputSchema: object, Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes}}, s.handler("charge", s.held("charged")))
	m.AddTool(&sdk.Tool{Name: "whoami", Description: "Says who called.", InputSchema: object, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.handler("whoami", func(ctx context.Context, c *Call, _ *sdk.CallToolRequest) *sdk.CallToolResult {
		return text("header=" + c.UserHeader + " meta=" + c.UserMeta)
	}))
	m.AddTool(&sdk.Tool{Name: "slow", Description: "Runs until cancelled.", InputSchema: object, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.handler("slow", func(ctx context.Context, c *Call, _ *sdk.CallToolRequest) *sdk.CallToolResult {
		<-ctx.Done()
		return text("cancelled")
	}))
	m.AddTool(&sdk.Tool{Name: "progress", Description: "Reports progress three times.", InputSchema: object, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.handler("progress", func(ctx context.Context, c *Call, req *sdk.CallToolRequest) *sdk.CallToolResult {
		token := req.Params.GetProgressToken()
		for i := 1; i <= 3; i++ {
			if token != nil {
				_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(i), Total: 3, Message: "step"})
			}
			// A step takes a while: the client gets each notification before the
			// answer (it handles them apart from it).
			time.Sleep(20 * time.Millisecond)
		}
		return text("progressed")
	}))
	m.AddTool(&sdk.Tool{Name: "fail", Description: "Always fails.", InputSchema: object, Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}}, s.handler("fail", func(context.Context, *Call, *sdk.CallToolRequest) *sdk.CallToolResult {
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "the card was declined"}}}
	}))
	for _, name := range s.extra {
		m.AddTool(&sdk.Tool{Name: name, Description: "added later", InputSchema: json.RawMessage(`{"type":"object"}`)}, s.handler(name, s.echo))
	}
	return m
}

func text(s string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
}

func (s *Server) echo(_ context.Context, c *Call, _ *sdk.CallToolRequest) *sdk.CallToolResult {
	var in struct{ Text string }
	_ = json.Unmarshal(c.Args, &in)
	return text("echo: " + in.Text)
}

// held blocks while Hold is set (until Release or the call's cancellation).
func (s *Server) held(result string) func(context.Context, *Call, *sdk.CallToolRequest) *sdk.CallToolResult {
	return func(ctx context.Context, c *Call, _ *sdk.CallToolRequest) *sdk.CallToolResult {
		s.mu.Lock()
		hold := s.hold
		s.mu.Unlock()
		if hold != nil {
			select {
			case <-hold:
			case <-ctx.Done():
				return text("cancelled")
			}
		}
		return text(result + " (key " + c.Key + ")")
	}
}

func (s *Server) handler(tool string, f func(context.Context, *Call, *sdk.CallToolRequest) *sdk.CallToolResult) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		c := &Call{Tool: tool, Args: append(json.RawMessage(nil), req.Params.Arguments...)}
		if m := req.Params.Meta; m != nil {
			c.Key, _ = m["chatd/idempotency-key"].(string)
			c.UserMeta, _ = m["chatd/user"].(string)
			c.TokenMeta, _ = m["chatd/user-token"].(string)
		}
		if req.Extra != nil && req.Extra.Header != nil {
			c.UserHeader = req.Extra.Header.Get("X-Chatd-User")
			c.TokenHeader = req.Extra.Header.Get("X-Chatd-User-Token")
		}
		s.mu.Lock()
		s.calls = append(s.calls, c)
		s.mu.Unlock()
		select {
		case s.started <- tool:
		default:
		}
		res := f(ctx, c, req)
		s.mu.Lock()
		c.Cancelled = ctx.Err() != nil
		c.Done = true
		s.mu.Unlock()
		return res, nil
	}
}

// WaitCalls waits until the server has seen n calls (or ctx ends).
func (s *Server) WaitCalls(ctx context.Context, n int, done bool) []Call {
	for {
		calls := s.Calls()
		ok := len(calls) >= n
		if ok && done {
			for _, c := range calls[:n] {
				ok = ok && c.Done
			}
		}
		if ok || ctx.Err() != nil {
			return calls
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}
