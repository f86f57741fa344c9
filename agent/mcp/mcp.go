package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jonboulle/clockwork"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/agent"
)

// The keys chatd puts in a call's _meta (docs/tools.md).
const (
	// MetaIdempotencyKey is the chatd call id: the same when chatd runs a call again
	// after a crash, so a server that honours it does the call's effects once.
	MetaIdempotencyKey = "chatd/idempotency-key"
	// MetaUser is the caller's user id, with forwardUser.
	MetaUser = "chatd/user"
	// MetaUserToken is the bearer token the caller's message came with, with
	// forwardUser "token" (when chatd has it: not for a run continued after a restart).
	MetaUserToken = "chatd/user-token"
	// MetaSession and MetaRun name the chat and the run the call belongs to.
	MetaSession = "chatd/session"
	MetaRun     = "chatd/run"
)

// HeaderUser carries the caller's user id on a streamable HTTP server's call requests,
// with forwardUser; HeaderUserToken the bearer token their message came with, with
// forwardUser "token".
const (
	HeaderUser      = "X-Chatd-User"
	HeaderUserToken = "X-Chatd-User-Token"
)

// Options configure a Manager.
type Options struct {
	// Registry gets each server's tools as the group "mcp:<server>".
	Registry *agent.Registry
	Logger   zerolog.Logger
	// Clock paces reconnects and call timeouts; the real one by default.
	Clock clockwork.Clock
	// InitialWait bounds how long Start waits for the servers' first connections, so
	// that runs continued at start find their tools (default 10 s).
	InitialWait time.Duration
	// Version is chatd's, sent to servers in the MCP handshake.
	Version string
}

// Manager keeps a session with each configured server and its tools in the registry.
type Manager struct {
	o       Options
	log     zerolog.Logger
	servers []*server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// ServerStatus is what a server is doing, for /healthz and logs.
type ServerStatus struct {
	Name      string    `json:"name"`
	Transport string    `json:"transport"`
	Connected bool      `json:"connected"`
	Tools     []string  `json:"tools"`
	Error     string    `json:"error,omitempty"`
	Since     time.Time `json:"since"`
}

// Start connects to every server in cfg (in the background, retried with backoff while
// it is down) and keeps their tools in o.Registry. It waits for each server's first
// attempt, at most o.InitialWait, and fails only when a server's tool takes a name the
// registry already has (naming the server and the tool).
func Start(cfg Config, o Options) (*Manager, error) {
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.InitialWait <= 0 {
		o.InitialWait = 10 * time.Second
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{o: o, log: o.Logger.With().Str("component", "mcp").Logger(), cancel: cancel}
	names := make([]string, 0, len(cfg.Servers))
	for name := range cfg.Servers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := &server{name: name, cfg: cfg.Servers[name], m: m, first: make(chan struct{}), relist: make(chan struct{}, 1)}
		s.status = ServerStatus{Name: name, Transport: s.transportName(), Since: o.Clock.Now()}
		m.servers = append(m.servers, s)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			s.keep(ctx)
		}()
	}
	deadline := o.Clock.After(o.InitialWait)
	for _, s := range m.servers {
		select {
		case <-s.first:
		case <-deadline:
		}
	}
	for _, s := range m.servers {
		s.mu.Lock()
		err := s.collision
		s.mu.Unlock()
		if err != nil {
			m.Close()
			return nil, err
		}
	}
	return m, nil
}

// Status reports each server, by name.
func (m *Manager) Status() []ServerStatus {
	out := make([]ServerStatus, 0, len(m.servers))
	for _, s := range m.servers {
		s.mu.Lock()
		st := s.status
		st.Tools = append([]string(nil), st.Tools...)
		s.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Close ends every session; stdio servers are stopped (their stdin closed, then
// SIGTERM, then SIGKILL for their process group).
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// server is one configured server and its session.
type server struct {
	name string
	cfg  ServerConfig
	m    *Manager

	first  chan struct{} // closed after the first attempt
	relist chan struct{}

	mu        sync.Mutex
	session   *sdk.ClientSession
	status    ServerStatus
	collision error
	progress  map[string]agent.Env // by progress token: the calls in flight
}

func (s *server) transportName() string {
	if s.cfg.URL != "" {
		return "http"
	}
	return "stdio"
}

func (s *server) group() string { return "mcp:" + s.name }

// keep connects, lists the tools, and waits for the session to end, again and again
// with backoff, until ctx ends.
func (s *server) keep(ctx context.Context) {
	log := s.m.log.With().Str("mcp_server", s.name).Logger()
	firstDone := sync.OnceFunc(func() { close(s.first) })
	defer firstDone()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		sess, end, err := s.connect(ctx, log)
		if err == nil {
			err = s.list(ctx, sess)
		}
		if err != nil {
			if end != nil {
				end()
			}
			s.down(err)
			firstDone() // after the status has the error: Start's caller may read it next
			log.Warn().Err(err).Int("attempt", attempt+1).Msg("mcp server unreachable; its tools are absent until it answers")
			if !s.sleep(ctx, backoff(attempt)) {
				return
			}
			continue
		}
		firstDone()
		attempt = -1 // the next failure starts the backoff over
		log.Info().Strs("tools", s.toolNames()).Msg("mcp server connected")
		waitErr := make(chan error, 1)
		go func() { waitErr <- sess.Wait() }()
	session:
		for {
			select {
			case <-s.relist:
				if err := s.list(ctx, sess); err != nil {
					log.Warn().Err(err).Msg("list the mcp server's tools again")
				} else {
					log.Info().Strs("tools", s.toolNames()).Msg("mcp server's tools changed")
				}
			case err := <-waitErr:
				s.down(fmt.Errorf("the session ended: %v", err))
				log.Warn().Err(err).Msg("mcp server went away; reconnecting")
				end()
				break session
			case <-ctx.Done():
				s.down(errors.New("chatd is stopping"))
				end()
				<-waitErr
				return
			}
		}
		if !s.sleep(ctx, 200*time.Millisecond) {
			return
		}
	}
}

func backoff(attempt int) time.Duration {
	d := 500 * time.Millisecond << min(attempt, 6)
	return min(d, 30*time.Second)
}

func (s *server) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-s.m.o.Clock.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// connect starts a session. end closes it (and stops a stdio server).
func (s *server) connect(ctx context.Context, log zerolog.Logger) (*sdk.ClientSession, func(), error) {
	sctx, cancel := context.WithCancel(ctx)
	var transport sdk.Transport
	var cmd *exec.Cmd
	if s.cfg.URL != "" {
		base := http.DefaultTransport.(*http.Transport).Clone()
		transport = &sdk.StreamableClientTransport{
			Endpoint:   s.cfg.URL,
			HTTPClient: &http.Client{Transport: &identityTransport{base: base, headers: s.cfg.Headers, forward: s.cfg.ForwardUser}},
			MaxRetries: 2,
		}
	} else {
		cmd = exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Env = childEnv(s.cfg.Env)
		// Its own process group, stopped with chatd; killed if chatd dies without
		// stopping it (kill -9).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Stderr = &lineLogger{log: log}
		transport = &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	// stop ends the attempt: for a stdio server, whatever it started too (npx starts
	// the server as its child).
	stop := func() {
		cancel()
		if cmd != nil && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "chatd", Version: s.m.o.Version}, &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case s.relist <- struct{}{}:
			default:
			}
		},
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			s.onProgress(req.Params)
		},
	})
	// The handshake is bounded; the session then lives as long as sctx.
	type result struct {
		sess *sdk.ClientSession
		err  error
	}
	done := make(chan result, 1)
	go func() {
		sess, err := client.Connect(sctx, transport, nil)
		done <- result{sess, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-s.m.o.Clock.After(30 * time.Second):
		stop()
		r = <-done
		if r.err == nil {
			_ = r.sess.Close()
		}
		r.err = errors.New("no answer to the MCP handshake within 30 s")
	}
	if r.err != nil {
		stop()
		return nil, nil, r.err
	}
	s.mu.Lock()
	s.session = r.sess
	s.mu.Unlock()
	end := func() {
		s.mu.Lock()
		if s.session == r.sess {
			s.session = nil
		}
		s.mu.Unlock()
		_ = r.sess.Close() // a stdio server: stdin closed, then SIGTERM
		stop()
	}
	return r.sess, end, nil
}

// childEnv is a stdio server's environment: PATH and HOME (and the locale) from chatd's,
// then the configured variables. Nothing else of chatd's (its database URL, its keys).
func childEnv(extra map[string]string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "NODE_PATH", "npm_config_cache"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// list reads the server's tools and puts them in the registry.
func (s *server) list(ctx context.Context, sess *sdk.ClientSession) error {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var ts []agent.Tool
	var names []string
	for t, err := range sess.Tools(lctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		if s.cfg.Tools[t.Name].Disabled {
			continue
		}
		tool, err := s.adapt(t)
		if err != nil {
			s.m.log.Warn().Str("mcp_server", s.name).Str("tool", t.Name).Err(err).Msg("mcp tool left out")
			continue
		}
		// A name another group or a built-in tool has: left out (at start, chatd stops).
		if _, _, taken := s.m.o.Registry.Lookup(tool.spec.Name); taken && !s.owns(tool.spec.Name) {
			err := fmt.Errorf("mcp server %q: tool %q is offered as %q, which another tool already is", s.name, t.Name, tool.spec.Name)
			s.mu.Lock()
			s.collision = err
			s.mu.Unlock()
			s.m.log.Error().Err(err).Msg("mcp tool left out")
			continue
		}
		ts = append(ts, tool)
		names = append(names, tool.spec.Name)
	}
	if err := s.m.o.Registry.SetGroup(s.group(), ts...); err != nil {
		return err
	}
	s.mu.Lock()
	s.status = ServerStatus{Name: s.name, Transport: s.transportName(), Connected: true, Tools: names, Since: s.m.o.Clock.Now()}
	s.mu.Unlock()
	return nil
}

// owns reports whether name is one of this server's tools in the registry now.
func (s *server) owns(name string) bool {
	t, _, ok := s.m.o.Registry.Lookup(name)
	if !ok {
		return false
	}
	mt, ok := t.(*tool)
	return ok && mt.s == s
}

func (s *server) toolNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.status.Tools...)
}

// down takes the server's tools out of the registry and records why.
func (s *server) down(err error) {
	if rerr := s.m.o.Registry.SetGroup(s.group()); rerr != nil {
		s.m.log.Error().Err(rerr).Msg("clear an mcp server's tools")
	}
	s.mu.Lock()
	s.status = ServerStatus{Name: s.name, Transport: s.transportName(), Error: err.Error(), Since: s.m.o.Clock.Now()}
	s.mu.Unlock()
}

func (s *server) current() *sdk.ClientSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session
}

func (s *server) onProgress(p *sdk.ProgressNotificationParams) {
	if p == nil {
		return
	}
	token := fmt.Sprint(p.ProgressToken)
	s.mu.Lock()
	env := s.progress[token]
	s.mu.Unlock()
	if env == nil {
		return
	}
	line := fmt.Sprintf("progress %g", p.Progress)
	if p.Total > 0 {
		line = fmt.Sprintf("progress %g/%g", p.Progress, p.Total)
		_ = env.Progress(int(p.Progress), int(p.Total), p.Message) // a bad value changes nothing
	}
	if p.Message != "" {
		line += ": " + p.Message
	}
	_, _ = io.WriteString(env.Output(), line+"\n")
}

// lineLogger logs a stdio server's stderr, a line at a time.
type lineLogger struct {
	log zerolog.Logger
	buf []byte
	mu  sync.Mutex
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := strings.IndexByte(string(l.buf), '\n')
		if i < 0 {
			break
		}
		l.log.Debug().Str("stderr", strings.TrimRight(string(l.buf[:i]), "\r")).Msg("mcp server")
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 { // a line that never ends
		l.log.Debug().Str("stderr", string(l.buf)).Msg("mcp server")
		l.buf = l.buf[:0]
	}
	return len(p), nil
}

// identityTransport adds a server's configured headers to every request, and with
// forwardUser the caller's id to the requests of that caller's calls (from the
// request's context), never to another's.
type identityTransport struct {
	base    http.RoundTripper
	headers map[string]string
	forward ForwardUser
}

type userKey struct{}

// caller is who a call is for, as its request's context carries it.
type caller struct{ user, token string }

func (t *identityTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range t.headers {
		req.Header.Set(k, v)
	}
	req.Header.Del(HeaderUser)
	req.Header.Del(HeaderUserToken)
	if c, ok := req.Context().Value(userKey{}).(caller); ok && t.forward != ForwardNone {
		if c.user != "" {
			req.Header.Set(HeaderUser, c.user)
		}
		if c.token != "" && t.forward == ForwardToken {
			req.Header.Set(HeaderUserToken, c.token)
		}
	}
	return t.base.RoundTrip(req)
}

// tool is one of a server's tools, offered as <server>__<tool>.
type tool struct {
	s    *server
	name string // on the server
	spec agent.ToolSpec
}

func (s *server) adapt(t *sdk.Tool) (*tool, error) {
	schema, err := json.Marshal(t.InputSchema)
	if err != nil || string(schema) == "null" {
		schema = []byte(`{"type":"object"}`)
	}
	readOnly, idem := false, false
	if a := t.Annotations; a != nil {
		readOnly, idem = a.ReadOnlyHint, a.IdempotentHint || a.ReadOnlyHint
	}
	approval := ApprovalAuto
	if s.cfg.Approval != "" {
		approval = s.cfg.Approval
	}
	tc := s.cfg.Tools[t.Name]
	if tc.Approval != "" {
		approval = tc.Approval
	}
	if s.cfg.Idempotent != nil {
		idem = *s.cfg.Idempotent
	}
	if tc.Idempotent != nil {
		idem = *tc.Idempotent
	}
	desc := t.Description
	if title := t.Title; title != "" && !strings.Contains(desc, title) {
		desc = title + ". " + desc
	}
	return &tool{s: s, name: t.Name, spec: agent.ToolSpec{
		Name:          s.name + "__" + t.Name,
		Description:   strings.TrimSpace(desc + " (MCP server " + s.name + ")"),
		InputSchema:   schema,
		NeedsApproval: approval == ApprovalAlways || (approval == ApprovalAuto && !readOnly),
		Idempotent:    idem,
		StaleAfter:    s.cfg.stale(t.Name),
	}}, nil
}

func (t *tool) Spec() agent.ToolSpec { return t.spec }

// Run calls the tool on the server's session: the chatd call id as the idempotency key,
// progress to the call's output and the run's progress, bounded by the timeout; a
// cancelled run cancels the call (notifications/cancelled).
func (t *tool) Run(ctx context.Context, input json.RawMessage, env agent.Env) (string, error) {
	sess := t.s.current()
	if sess == nil {
		return "", fmt.Errorf("the MCP server %q is not connected; try again later", t.s.name)
	}
	info, _ := agent.CallInfoFrom(ctx)
	meta := sdk.Meta{MetaIdempotencyKey: info.CallID, MetaSession: info.SessionID.String(), MetaRun: info.RunID.String()}
	who := caller{}
	if fw := t.s.cfg.ForwardUser; fw != ForwardNone && info.Owner != "" {
		meta[MetaUser] = info.Owner
		who.user = info.Owner
		if fw == ForwardToken && info.Token != "" {
			meta[MetaUserToken] = info.Token
			who.token = info.Token
		}
	}
	ctx = context.WithValue(ctx, userKey{}, who)
	var args any = map[string]any{}
	if len(input) > 0 && string(input) != "null" {
		args = json.RawMessage(input)
	}
	params := &sdk.CallToolParams{Meta: meta, Name: t.name, Arguments: args}
	token := info.CallID
	if token == "" {
		token = fmt.Sprintf("call-%p", params)
	}
	params.SetProgressToken(token)
	t.s.mu.Lock()
	if t.s.progress == nil {
		t.s.progress = map[string]agent.Env{}
	}
	t.s.progress[token] = env
	t.s.mu.Unlock()
	defer func() {
		t.s.mu.Lock()
		delete(t.s.progress, token)
		t.s.mu.Unlock()
	}()

	timeout := t.s.cfg.timeout(t.name)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timedOut := make(chan struct{})
	timer := t.s.m.o.Clock.AfterFunc(timeout, func() {
		close(timedOut)
		cancel()
	})
	defer timer.Stop()
	res, err := sess.CallTool(cctx, params)
	if err != nil {
		select {
		case <-timedOut:
			return "", fmt.Errorf("the MCP server %q did not answer within %s; the call was cancelled", t.s.name, timeout)
		default:
		}
		if ctx.Err() != nil {
			return "", ctx.Err() // the run was cancelled
		}
		if errors.Is(err, sdk.ErrConnectionClosed) {
			return "", fmt.Errorf("the MCP server %q went away during the call: %v", t.s.name, err)
		}
		return "", fmt.Errorf("the MCP server %q: %v", t.s.name, err)
	}
	text := resultText(res)
	if res.IsError {
		if text == "" {
			text = "the tool reported an error"
		}
		return "", errors.New(text)
	}
	return text, nil
}

// resultText is a call's result for the model: text content as it is, structured
// content as JSON (unless a text part is that JSON already), images, audio and resources
// described by their type and size.
func resultText(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, c.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image: %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio: %s, %d bytes, not shown]", c.MIMEType, len(c.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link: %s %q (%s)]", c.URI, c.Name, c.MIMEType))
		case *sdk.EmbeddedResource:
			r := c.Resource
			switch {
			case r == nil:
			case r.Text != "":
				parts = append(parts, fmt.Sprintf("[resource %s (%s)]\n%s", r.URI, r.MIMEType, r.Text))
			default:
				parts = append(parts, fmt.Sprintf("[resource: %s, %s, %d bytes, not shown]", r.URI, r.MIMEType, len(r.Blob)))
			}
		}
	}
	if res.StructuredContent != nil {
		if j, err := json.Marshal(res.StructuredContent); err == nil {
			dup := false
			for _, p := range parts {
				if jsonEqual(p, j) {
					dup = true
				}
			}
			if !dup {
				parts = append(parts, string(j))
			}
		}
	}
	return strings.Join(parts, "\n")
}

func jsonEqual(text string, j []byte) bool {
	var a, b any
	if json.Unmarshal([]byte(text), &a) != nil || json.Unmarshal(j, &b) != nil {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}
