package server

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/mattn/go-isatty"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/agui"
	"github.com/chatd/chatd/agent/anthropic"
	"github.com/chatd/chatd/agent/demo"
	"github.com/chatd/chatd/agent/mcp"
	"github.com/chatd/chatd/agent/openai"
	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/bwrap"
	"github.com/chatd/chatd/agent/sandbox/local"
	"github.com/chatd/chatd/agent/synth"
	"github.com/chatd/chatd/agent/tools"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/httpagent"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/journal"
	"github.com/chatd/chatd/lease"
	"github.com/chatd/chatd/retention"
	"github.com/chatd/chatd/service"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/aisdk"
	"github.com/chatd/chatd/transport/httpapi"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/web"
	"github.com/chatd/chatd/webhook"
)

// Command is the chatd command: it reads the configuration from args (without the
// program's name) and getenv, logs to stderr, serves until SIGINT or SIGTERM, shuts down
// gracefully, and returns the exit code: 0 (-help too), 1 when chatd could not start or
// did not shut down cleanly, 2 for a bad configuration. cmd/chatd is
// os.Exit(Command(os.Args[1:], os.Getenv, os.Stderr)).
func Command(args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := ConfigFromEnv(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "chatd: %v\n", err)
		return 2
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "chatd: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	m, err := New(cfg, WithLogger(log))
	if err == nil {
		err = m.Start(ctx)
	}
	if err != nil {
		log.Error().Err(err).Msg("chatd could not start")
		if m != nil {
			m.Shutdown(context.Background())
		}
		return 1
	}
	<-ctx.Done()
	stop() // a second signal kills at once
	log.Info().Stringer("timeout", cfg.ShutdownTimeout).Msg("shutting down")

	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := m.Shutdown(sctx); err != nil {
		log.Error().Err(err).Msg("shutdown was not clean")
		return 1
	}
	log.Info().Msg("stopped")
	return 0
}

func newLogger(cfg Config, w io.Writer) (zerolog.Logger, error) {
	level, err := zerolog.ParseLevel(strings.ToLower(cfg.LogLevel))
	if err != nil || cfg.LogLevel == "" {
		return zerolog.Logger{}, fmt.Errorf("CHATD_LOG_LEVEL (-log-level) is %q; use trace, debug, info, warn or error", cfg.LogLevel)
	}
	console := cfg.LogFormat == "console"
	if cfg.LogFormat == "auto" {
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			console = true
		}
	}
	if console {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger(), nil
}

// Server is chatd wired together: the database, the conversations, the agent and its
// sandboxes, the transports, and the listeners. New builds one, Start (or Run) starts
// it, Shutdown stops it. Tests run it in-process.
type Server struct {
	cfg Config
	log zerolog.Logger
	// clock paces what the server times (leases, deadlines, pings); nil is the real one.
	// Tests set a fake one before Start.
	clock clockwork.Clock

	registry *prometheus.Registry // what /metrics serves
	db       *database
	// sandboxes is where tools run commands: a *bwrap.Provider or a *local.Provider.
	sandboxes sandboxProvider
	// sessionSandboxes gives each session its sandbox; a deleted session's is killed and
	// its workspaces removed.
	sessionSandboxes *agent.Sandboxes
	janitor          *agent.SandboxJanitor
	// journal is the persistence service the conversations write through: their write
	// queues and the stream log.
	journal *journal.Writer
	hub     *hub.Hub
	srv     *transport.Server
	http    *listener
	// admin serves /metrics and pprof; nil when CHATD_ADMIN_ADDR is off.
	admin *listener
	// nodeAddr is where the other nodes reach this one, once the listener has started.
	nodeAddr atomic.Pointer[string]
	renewer  *lease.Renewer
	rescuer  *lease.Rescuer
	// tools are the model's: the built-in ones, and the MCP servers' (mcp keeps those).
	tools *agent.Registry
	mcp   atomic.Pointer[mcp.Manager]
	// mcpConfig is Config.MCPConfig's servers (New reads it).
	mcpConfig mcp.Config
	// sessions is the conversation list, and what deletes and erases.
	sessions *hub.Sessions
	// webhooks delivers the webhook events (CHATD_WEBHOOK_URL); nil when none.
	webhooks *webhook.Deliverer
	// services holds every part above that has a lifecycle, in start order.
	services *service.Group
	// opts are New's options; built says build has run (New builds, so that a bad
	// option or tool is its error).
	opts  options
	built bool
}

// newServer returns an unstarted, unbuilt chatd: Start builds it.
func newServer(cfg Config, log zerolog.Logger) *Server {
	return &Server{cfg: cfg, log: log, services: service.NewGroup(log)}
}

// Addr is the address the public listener listens on, once Start has returned. Without
// one (WithoutListener) it is Config.Addr, where the program's own server listens.
func (m *Server) Addr() string {
	if m.opts.noListener {
		return m.cfg.Addr
	}
	return m.http.Addr().String()
}

// AdminAddr is the address the admin listener listens on, once Start has returned, or ""
// when there is none (CHATD_ADMIN_ADDR=off).
func (m *Server) AdminAddr() string {
	if m.admin == nil {
		return ""
	}
	return m.admin.Addr().String()
}

// Start builds chatd, unless New did, and starts its services: it connects to the database, applies
// migrations, takes up the runs a dead process (or node) left behind (continued, or
// with CHATD_RECOVER=interrupt ended interrupted), kills what its sandboxes left
// running, and starts serving.
// It returns once the server listens; when it fails, nothing it started is left running.
// Start is called once; call Shutdown after it, whether it failed or not.
func (m *Server) Start(ctx context.Context) error {
	if !m.built {
		if err := m.build(); err != nil {
			return err
		}
	}
	if err := m.services.Start(ctx); err != nil {
		return err
	}
	m.logListening()
	m.logAdmin()
	m.warnSandboxNetwork()
	return nil
}

// build makes every part of chatd and adds those with a lifecycle to m.services. Building
// connects to nothing and starts no goroutine; the database's store is handed out now and
// usable once the database has started.
func (m *Server) build() error {
	m.built = true
	m.registry = newRegistry()
	var err error
	m.db, err = newDatabase(m.cfg.DatabaseURL, m.registry)
	if err != nil {
		return err
	}
	st := m.db.Store()
	if m.cfg.WebhookURL != "" {
		m.db.webhooks = true // the events are queued with the runs' changes
		if m.webhooks, err = webhook.New(webhook.Config{
			URL: m.cfg.WebhookURL, Secret: m.cfg.WebhookSecret, Store: st, Clock: m.clock,
			Logger: m.log, Registry: m.registry,
		}); err != nil {
			return err
		}
		m.registry.MustRegister(webhookCollector{st})
	}
	if m.cfg.MCPConfig != "" {
		// Checked by validation; read again here, for the servers to use.
		if m.mcpConfig, err = mcp.Load(m.cfg.MCPConfig); err != nil {
			return err
		}
	}
	clock := m.clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	loop, err := m.newAgent(st, clock)
	if err != nil {
		return err
	}
	var runs conversation.Agent = loop
	if m.cfg.Agent == AgentHTTP && m.opts.model == nil {
		if runs, err = m.newHTTPAgent(clock); err != nil {
			return err
		}
	}
	evictions := conversation.NewDeadlines("eviction", clock)
	abandonments := conversation.NewDeadlines("abandonment", clock)
	convMetrics := conversation.NewMetrics(m.registry)
	var memory *conversation.MemoryReturner
	if m.cfg.QuietRelease > 0 {
		memory = conversation.NewMemoryReturner(clock, 0, 0, nil, convMetrics)
	}
	// Adaptive coalescing widens to a window while the process is behind. The pacer
	// reads the real scheduler, so it runs only with the real clock: on a test's fake
	// clock a window would hold text until the test moved the clock.
	var pacer *conversation.Pacer
	if m.cfg.CoalesceDeltas == conversation.CoalesceAdaptive && m.clock == nil {
		pacer = conversation.NewPacer(clock, 0, nil, convMetrics)
	}
	m.journal = journal.NewWriter(journal.Config{
		Clock:      clock,
		Logger:     m.log.With().Str("component", "journal").Logger(),
		Metrics:    convMetrics.Journal(),
		StreamSync: m.cfg.StreamSync,
		Log:        st,
	})
	m.hub, err = hub.New(conversation.Config{
		Journal:            m.journal,
		Clock:              clock,
		Evictions:          evictions,
		Abandonments:       abandonments,
		Store:              st,
		Agent:              runs,
		AbandonAfter:       m.cfg.AbandonAfter,
		Logger:             m.log,
		RingEvents:         m.cfg.RingEvents,
		RingBytes:          m.cfg.RingBytes,
		MaxReplayBytes:     max(m.cfg.SendQueueBytes/2, 1),
		IdleTimeout:        m.cfg.IdleEvict,
		QuietRelease:       m.cfg.QuietRelease, // 0 (off): never
		Memory:             memory,
		MaxContentBytes:    m.cfg.MaxContentBytes,
		MaxSessionsPerUser: m.cfg.MaxSessionsPerUser,
		MaxRecoveries:      conversation.DefaultMaxRecoveries,
		MaxRunsPerUser:     m.cfg.MaxRunsPerUser,
		DoubleText:         chat.DoubleText(m.cfg.DoubleText),
		// Every chatd is a node, one or several on the database.
		Lease: &conversation.LeaseConfig{Node: m.nodeID, Addr: m.peerAddr, TTL: m.cfg.LeaseTTL},
		// A rolling restart continues every run where it stopped.
		SuspendOnStop:  m.cfg.Recover == RecoverContinue,
		ModelName:      m.modelName(),
		Metrics:        convMetrics,
		CoalesceDeltas: m.cfg.CoalesceDeltas,
		Pacer:          pacer,
	}, m.log, hub.WithMetrics(hub.NewMetrics(m.registry)))
	if err != nil {
		return err
	}
	// The WebSocket and the HTTP API know users the same way.
	auth, authService := m.newAuthenticator()
	transportMetrics := transport.NewMetrics(m.registry)
	// Any node takes any connection or request: one for a session another live node
	// holds is relayed there.
	relay := transport.NewRelay(transport.Relay{
		OwnerOf: func(ctx context.Context, id uuid.UUID) (string, bool, error) {
			l, err := st.LeaseGet(ctx, id)
			if errors.Is(err, store.ErrNotFound) {
				return "", false, nil
			}
			if err != nil {
				return "", false, err
			}
			// Live by the database's clock: the nodes' clocks need not agree.
			return l.Addr, l.Node != m.nodeID() && l.Live, nil
		},
		Node:    m.nodeID,
		Metrics: transportMetrics,
		Logger:  m.log,
	})
	// A user's WebSockets and AI SDK streams count against one limit.
	users := transport.NewUserStreams(noLimit(m.cfg.MaxConnsPerUser))
	wsSrv, err := ws.New(ws.Config{
		Hub:               m.hub,
		Auth:              auth,
		Logger:            m.log,
		AllowedOrigins:    m.cfg.AllowedOrigins,
		ReadLimit:         int64(m.cfg.ReadLimit),
		Compression:       m.cfg.Compression,
		SendQueueBytes:    m.cfg.SendQueueBytes,
		PingInterval:      m.cfg.PingInterval,
		PingTimeout:       m.cfg.PingTimeout,
		Metrics:           transportMetrics,
		Relay:             relay,
		MaxQueuedCommands: m.cfg.MaxQueuedCommands,
		CommandRate:       m.cfg.CommandRate,
		CommandBurst:      m.cfg.CommandBurst,
		Users:             users,
		MaxConnsPerAddr:   noLimit(m.cfg.MaxConnsPerAddr),
		HandshakeRate:     m.cfg.HandshakeRate,
		HandshakeBurst:    m.cfg.HandshakeBurst,
	})
	if err != nil {
		return err
	}
	sessions := hub.NewSessions(m.hub, st, m.sessionSandboxes)
	m.sessions = sessions
	api, err := httpapi.New(httpapi.Config{
		Sessions:       sessions,
		Auth:           auth,
		AllowedOrigins: m.cfg.AllowedOrigins,
		Logger:         m.log,
		Relay:          relay,
	})
	if err != nil {
		return err
	}
	aisdkHandler := aisdk.New(aisdk.Config{
		Hub:                m.hub,
		Store:              st,
		Auth:               auth,
		SendQueueBytes:     m.cfg.SendQueueBytes,
		Clock:              clock,
		Metrics:            transportMetrics,
		AllowedOrigins:     m.cfg.AllowedOrigins,
		Logger:             m.log,
		Relay:              relay,
		NeedsApproval:      m.tools.NeedsApproval,
		Users:              users,
		MaxContentBytes:    m.cfg.MaxContentBytes,
		MaxSessionsPerUser: m.cfg.MaxSessionsPerUser,
	})
	m.srv, err = transport.New(transport.Config{WebSocket: wsSrv, API: api, AISDK: aisdkHandler, Ready: st.Ping, App: web.Handler(), Logger: m.log})
	if err != nil {
		return err
	}
	m.http = newListener(m.cfg.Addr, m.srv.Handler(), httpLimits{
		ReadTimeout: m.cfg.HTTPReadTimeout, WriteTimeout: m.cfg.HTTPWriteTimeout, IdleTimeout: m.cfg.HTTPIdleTimeout,
		Conns: transport.ConnLimits{
			PerAddr: noLimit(m.cfg.MaxConnsPerAddr), Total: noLimit(m.cfg.MaxConns),
			Metrics: transportMetrics, Logger: m.log.With().Str("component", "listener").Logger(),
		},
	})
	// The HTTP server's Shutdown waits for its requests: the AI SDK's streams end first
	// (their clients resume), or one waiting for an approval would hold it up.
	m.http.srv.RegisterOnShutdown(aisdkHandler.Shutdown)
	if m.cfg.AdminAddr != AdminOff {
		// An operator's: no connection limits, and no write timeout, so a profile may
		// take as long as it asks.
		m.admin = newListener(m.cfg.AdminAddr, m.adminHandler(m.registry), httpLimits{
			ReadTimeout: m.cfg.HTTPReadTimeout, IdleTimeout: m.cfg.HTTPIdleTimeout,
			Conns: transport.ConnLimits{PerAddr: -1, Total: -1},
		})
	}

	// Started in this order, stopped in the reverse: the listener stops taking requests,
	// then the hub leaves the active runs for the next process (suspended, their open
	// segments stored; with CHATD_RECOVER=interrupt ended interrupted) and stores what
	// its actors queued, then the journal stores its last interval of the stream log,
	// then the transport flushes and closes the sockets with 1001, then the sandboxes'
	// processes are killed, then the pool closes. A service
	// that works on the hub's actors (eviction, abandonment, rescue) goes after the hub;
	// one the hub's writes rely on (lease renewal) goes before it.
	leases := lease.Config{Store: st, Holder: m.hub, Node: m.nodeID, TTL: m.cfg.LeaseTTL, Clock: clock, Logger: m.log.With().Str("component", "lease").Logger(),
		Metrics: lease.NewMetrics(m.registry),
		// Runs are not continued: a dead node's runs that wait for a person end too.
		RescueWaiting: m.cfg.Recover != RecoverContinue,
		// When the database answers again, what the conversations queued is retried at
		// once, under the leases the node still holds.
		Answered: m.journal.Kick}
	m.renewer, m.rescuer = lease.NewRenewer(leases), lease.NewRescuer(leases)
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chatd_leases_held",
		Help: "Session leases this node holds: the sessions whose actors run here.",
	}, func() float64 { return float64(len(m.hub.Held())) }))
	m.services.Add("database", m.db)
	// MCP servers' tools, before anything continues a run that may call them; stopped
	// after the runs are.
	if len(m.mcpConfig.Servers) > 0 {
		m.services.Add("mcp", service.Func(m.startMCP, m.stopMCP))
		m.registry.MustRegister(mcpCollector{m})
	}
	// Renewals stop after the hub, whose actors give their leases back as they stop;
	// then the renewer gives back any left.
	m.services.Add("lease-renewal", m.renewer)
	m.services.Add("sandboxes", service.Func(m.sweepSandboxes, m.closeSandboxes))
	m.services.Add("sandbox-janitor", m.janitor)
	m.services.Add("transport", service.Func(nil, m.srv.Shutdown))
	// The journal stops after the hub: its last interval of the stream log removes the
	// logs of what the stopping conversations stored.
	m.services.Add("journal", service.Func(m.journal.Start, m.ownBudget(m.journal.Stop)))
	// Storing what the conversations queued has a budget of its own, whatever the steps
	// before it took: a slow database must not cost text.
	m.services.Add("hub", service.Func(nil, m.ownBudget(m.hub.Shutdown)))
	m.services.Add("eviction", evictions)
	m.services.Add("abandonment", abandonments)
	if memory != nil {
		m.services.Add("memory", memory)
	}
	if pacer != nil {
		m.services.Add("pacer", pacer)
	}
	// Its first pass, before the listener serves, takes up the runs of nodes that died,
	// this one's last life among them.
	m.services.Add("rescue", m.rescuer)
	if m.webhooks != nil {
		m.services.Add("webhooks", m.webhooks)
	}
	if m.cfg.RetentionInterval > 0 {
		m.services.Add("retention", retention.New(retention.Config{
			Store: st, DeleteSession: sessions.Delete,
			Done: m.cfg.RetainDone, Failed: m.cfg.RetainFailed, ToolOutput: m.cfg.RetainToolOutput, Sessions: m.cfg.RetainSessions,
			Interval: m.cfg.RetentionInterval, Clock: clock, Logger: m.log, Registry: m.registry,
		}))
	}
	if authService != nil {
		m.services.Add("auth", authService)
	}
	if m.admin != nil {
		m.services.Add("admin-http", m.admin)
	}
	if m.opts.noListener {
		// The program's own server serves Handler; its streams end as the listener's would.
		m.services.Add("aisdk-streams", service.Func(nil, func(context.Context) error { aisdkHandler.Shutdown(); return nil }))
	} else {
		m.services.Add("http", m.http)
	}
	return nil
}

// nodeID is this node's id among those on the database: CHATD_NODE_ID, else its address
// (peerAddr). Two live processes cannot listen on one address, and a chatd that restarts
// on its address takes its sessions back at once instead of after their leases expire.
func (m *Server) nodeID() string {
	if m.cfg.NodeID != "" {
		return m.cfg.NodeID
	}
	return m.peerAddr()
}

// peerAddr is where the other nodes reach this one: CHATD_NODE_ADDR, else the
// listener's address (with this host's name when it listens on every interface); ""
// before the listener has started.
func (m *Server) peerAddr() string {
	if m.cfg.NodeAddr != "" {
		return m.cfg.NodeAddr
	}
	if p := m.nodeAddr.Load(); p != nil {
		return *p
	}
	host, port, err := net.SplitHostPort(m.cfg.Addr)
	if err != nil {
		return ""
	}
	if port == "0" {
		// Known once the listener has started.
		if m.http == nil || m.http.Bound() == nil {
			return ""
		}
		port = strconv.Itoa(m.http.Bound().Port)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	a := net.JoinHostPort(host, port)
	m.nodeAddr.Store(&a)
	return a
}

// sandboxProvider is what chatd needs of its sandbox provider.
type sandboxProvider interface {
	sandbox.Provider
	// Close ends every process the sandboxes run.
	Close()
}

// sweepSandboxes kills what the local sandboxes of a chatd process that died left running
// (its commands died with it; what they started in the background did not). Nothing of
// a bwrap sandbox outlives the chatd that started it.
func (m *Server) sweepSandboxes(ctx context.Context) error {
	lp, ok := m.sandboxes.(*local.Provider)
	if !ok {
		return nil
	}
	swept, err := lp.Sweep(ctx)
	if err != nil {
		return err
	}
	if swept.Processes > 0 {
		m.log.Warn().Int("processes", swept.Processes).Int("groups", swept.Groups).Int("sandboxes", swept.Sandboxes).
			Msg("killed processes that sandboxes of a previous process left running")
	}
	return nil
}

// closeSandboxes ends every process the sandboxes run: nothing chatd started outlives it.
func (m *Server) closeSandboxes(context.Context) error {
	m.sandboxes.Close()
	return nil
}

// logListening says where chatd listens and which model answers.
func (m *Server) logListening() {
	admin := m.AdminAddr()
	if admin == "" {
		admin = AdminOff
	}
	ev := m.log.Info().
		Str("addr", m.Addr()).
		Str("admin_addr", admin).
		Str("agent", m.cfg.Agent).
		Bool("shell_tool", m.cfg.ShellTool).
		Str("sandbox", m.sandboxKind()).
		Bool("pprof", m.cfg.Pprof).
		Str("sandbox_dir", m.cfg.SandboxDir)
	if m.opts.model != nil {
		ev.Str("model", m.opts.modelName).Msgf("chatd listening: the app at http://%s/, ws://%s/v1/ws with model %s (WithModel)", m.Addr(), m.Addr(), m.opts.modelName)
		return
	}
	switch m.cfg.Agent {
	case AgentDemo:
		ev.Int("demo_words", m.cfg.DemoWords).
			Stringer("demo_delay", m.cfg.DemoDelay).
			Msgf("chatd listening: the app at http://%s/, ws://%s/v1/ws with the demo agent (no LLM; say \"tool\" or \"approve\" to see tool calls, \"steps\" to see progress)", m.Addr(), m.Addr())
		m.log.Info().Msg("to use a real model: CHATD_AGENT=openai OPENAI_BASE_URL=http://localhost:11434/v1 CHATD_MODEL=llama3.2 (Ollama), or CHATD_AGENT=anthropic ANTHROPIC_API_KEY=… CHATD_MODEL=claude-sonnet-4-5; see README.md")
	case AgentSynth:
		ev.Msgf("chatd listening: the app at http://%s/, ws://%s/v1/ws with the synthetic benchmark model (send \"tokens=N rate=R tools=K\")", m.Addr(), m.Addr())
	case AgentHTTP:
		agentURL := m.cfg.AgentURL
		if u, err := url.Parse(agentURL); err == nil {
			agentURL = u.Redacted()
		}
		ev.Str("agent_url", agentURL).Str("agent_protocol", m.cfg.AgentProtocol).
			Msgf("chatd listening: the app at http://%s/, ws://%s/v1/ws in front of the %s agent at %s", m.Addr(), m.Addr(), m.cfg.AgentProtocol, agentURL)
	default:
		base := m.cfg.OpenAIBaseURL
		if m.cfg.Agent == AgentAnthropic {
			base = m.cfg.AnthropicBaseURL
		}
		if u, err := url.Parse(base); err == nil {
			base = u.Redacted()
		}
		if base == "" {
			base = "(the provider's own)"
		}
		ev.Str("model", m.cfg.Model).
			Str("base_url", base).
			Int("context_tokens", m.cfg.ContextTokens).
			Msgf("chatd listening: the app at http://%s/, ws://%s/v1/ws with %s model %s", m.Addr(), m.Addr(), m.cfg.Agent, m.cfg.Model)
	}
}

// sandboxKind is the sandbox provider chatd uses: CHATD_SANDBOX, or by default bwrap
// when the shell tool is on (it runs whatever the model asks) and local otherwise (the
// demo agent's fixed command).
func (m *Server) sandboxKind() string {
	switch {
	case m.cfg.Sandbox != "":
		return m.cfg.Sandbox
	case m.cfg.ShellTool:
		return SandboxBwrap
	}
	return SandboxLocal
}

// newSandboxes builds the sandbox provider. With the shell tool on and bubblewrap
// missing (or unable to start a sandbox), chatd does not start.
func (m *Server) newSandboxes() (sandboxProvider, error) {
	// Checked here, for either provider, so that the error names the setting.
	if _, err := sandbox.PrepareDir(m.cfg.SandboxDir); err != nil {
		return nil, fmt.Errorf("CHATD_SANDBOX_DIR (-sandbox-dir): %w", err)
	}
	if m.sandboxKind() == SandboxLocal {
		if m.cfg.ShellTool {
			m.log.Warn().Msg("CHATD_SANDBOX=local: shell commands run unisolated, as chatd's user, and can read its files and environment; use bwrap outside development")
		}
		p, err := local.New(m.cfg.SandboxDir)
		if err != nil {
			return nil, fmt.Errorf("CHATD_SANDBOX_DIR: %w", err)
		}
		return p, nil
	}
	p, err := bwrap.New(bwrap.Config{
		Dir:     m.cfg.SandboxDir,
		Bwrap:   m.cfg.Bwrap,
		Network: m.cfg.SandboxNetwork,
		Limits: &bwrap.Limits{
			CPUSeconds: uint64(m.cfg.SandboxCPUTime / time.Second),
			Memory:     uint64(m.cfg.SandboxMemory),
			Processes:  uint64(m.cfg.SandboxProcesses),
			FileSize:   uint64(m.cfg.SandboxFileSize),
			TmpSize:    uint64(m.cfg.SandboxTmpSize),

			TotalMemory: uint64(m.cfg.SandboxTotalMemory),
			OpenFiles:   uint64(m.cfg.SandboxOpenFiles),
			Disk:        uint64(m.cfg.SandboxDisk),
		},
	})
	if err != nil {
		what := "the sandbox"
		if m.cfg.ShellTool {
			what = "the shell tool (CHATD_SHELL_TOOL=on)"
		}
		return nil, fmt.Errorf("%s runs commands under bubblewrap (CHATD_SANDBOX=bwrap): %w", what, err)
	}
	return p, nil
}

// warnSandboxNetwork says, loudly, what a command can reach when bwrap sandboxes share
// the host's network namespace (CHATD_SANDBOX_NETWORK=on): the host's loopback too, and
// so chatd's own listeners and a database that trusts local connections. Nothing short of
// a network namespace of its own (slirp4netns, pasta), which chatd does not require,
// keeps it out.
func (m *Server) warnSandboxNetwork() {
	if m.sandboxKind() != SandboxBwrap || !m.cfg.SandboxNetwork {
		return
	}
	reach := []string{"chatd's listener at " + m.Addr()}
	if admin := m.AdminAddr(); admin != "" {
		reach = append(reach, "its admin listener at "+admin+" (/metrics, and profiles with CHATD_PPROF=on)")
	}
	if db := databaseAddr(m.cfg.DatabaseURL); db != "" {
		reach = append(reach, "PostgreSQL at "+db)
	}
	m.log.Warn().Bool("sandbox_network", true).Strs("sandbox_reaches", reach).
		Msgf("CHATD_SANDBOX_NETWORK=on: sandboxed commands share the host's network namespace, loopback included. "+
			"They can reach %s, every other service listening on the host's loopback (127.0.0.1, ::1) or on an abstract Unix socket, "+
			"the host's networks (a cloud's metadata service at 169.254.169.254 too) and the internet. "+
			"Turn it off unless the commands need the network and nothing on the host trusts a connection for coming from it", strings.Join(reach, ", "))
}

// databaseAddr is the host and port of a PostgreSQL URL or key=value string, "" when it
// names none (libpq then uses a Unix socket) or a Unix socket: a path, which the sandbox
// does not see.
func databaseAddr(dsn string) string {
	host, port := "", "5432"
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		host = u.Host
		if h := u.Query().Get("host"); host == "" && h != "" {
			host = h
		}
		if _, _, err := net.SplitHostPort(host); err != nil && host != "" && !strings.HasPrefix(host, "/") {
			host = net.JoinHostPort(strings.Trim(host, "[]"), port)
		}
	} else {
		for _, kv := range strings.Fields(dsn) {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "host" {
				host = v
			} else if ok && k == "port" {
				port = v
			}
		}
		if host != "" && !strings.HasPrefix(host, "/") {
			host = net.JoinHostPort(host, port)
		}
	}
	if strings.HasPrefix(host, "/") {
		return ""
	}
	return host
}

// logAdmin says where the admin listener serves metrics and profiles, if anywhere.
func (m *Server) logAdmin() {
	if m.admin == nil {
		m.log.Info().Str("admin_addr", AdminOff).Msg("no admin listener (CHATD_ADMIN_ADDR=off): /metrics and /debug/pprof/ are not served")
		return
	}
	profiles := ""
	if m.cfg.Pprof {
		profiles = fmt.Sprintf(", profiles at http://%s/debug/pprof/", m.AdminAddr())
	}
	m.log.Info().Str("admin_addr", m.AdminAddr()).Bool("pprof", m.cfg.Pprof).
		Msgf("admin listener: metrics at http://%s/metrics%s", m.AdminAddr(), profiles)
}

// newAgent builds the agent loop: the configured model (the demo one by default), the
// built-in tools, and the sandboxes.
func (m *Server) newAgent(st *store.Store, clock clockwork.Clock) (*agent.Loop, error) {
	model, err := m.newModel()
	if err != nil {
		return nil, err
	}
	m.sandboxes, err = m.newSandboxes()
	if err != nil {
		return nil, err
	}
	ts := []agent.Tool{tools.CurrentTime{}}
	if m.cfg.Agent == AgentDemo && m.opts.model == nil {
		ts = append(ts, demo.SandboxTool{}) // the demo model's way to show a sandbox
	}
	if m.cfg.ShellTool {
		ts = append(ts, tools.Shell{})
	}
	ts = append(ts, m.opts.tools...)
	registry, err := agent.NewRegistry(ts...)
	if err != nil {
		return nil, err
	}
	m.tools = registry
	// Sandboxes are this node's: one that moved here gets a new one, and this node's
	// janitor removes only the workspaces of the sandboxes it made.
	sandboxStore := st.NodeSandboxes(m.nodeID)
	metrics := agent.NewMetrics(m.registry)
	m.sessionSandboxes = agent.NewSandboxes(m.sandboxes, sandboxStore, clock, agent.WithMetrics(metrics))
	retention := m.cfg.WorkspaceRetention
	if retention == 0 {
		retention = agent.KeepWorkspaces
	}
	m.janitor, err = agent.NewJanitor(agent.JanitorConfig{
		Sandboxes:          m.sessionSandboxes,
		Store:              sandboxStore,
		IdlePause:          m.cfg.SandboxIdlePause,
		KillAfter:          m.cfg.SandboxKillAfter,
		WorkspaceRetention: retention,
		Clock:              clock,
		Logger:             m.log,
	})
	if err != nil {
		return nil, err
	}
	return agent.New(agent.Config{
		Model:            model,
		Tools:            registry,
		Sandboxes:        m.sessionSandboxes,
		System:           m.cfg.SystemPrompt,
		ContextTokens:    m.cfg.ContextTokens,
		MaxOutputTokens:  m.cfg.MaxTokens,
		MaxSteps:         m.cfg.MaxSteps,
		ApprovalTimeout:  m.cfg.ApprovalTimeout,
		ApprovalExpire:   m.cfg.ApprovalExpire,
		ModelIdleTimeout: m.cfg.ModelTimeout,
		ToolStale:        toolStale(m.cfg.ToolStale),
		Clock:            clock,
		Logger:           m.log,
		Metrics:          metrics,
	})
}

// newModel builds the configured model provider.
func (m *Server) newModel() (agent.Model, error) {
	if m.opts.model != nil {
		return m.opts.model, nil
	}
	switch m.cfg.Agent {
	case AgentOpenAI:
		return openai.New(openai.Config{
			BaseURL:   m.cfg.OpenAIBaseURL,
			APIKey:    m.cfg.OpenAIAPIKey,
			Model:     m.cfg.Model,
			MaxTokens: int64(m.cfg.MaxTokens),
		})
	case AgentAnthropic:
		return anthropic.New(anthropic.Config{
			BaseURL:        m.cfg.AnthropicBaseURL,
			APIKey:         m.cfg.AnthropicAPIKey,
			Model:          m.cfg.Model,
			MaxTokens:      int64(m.cfg.MaxTokens),
			ThinkingBudget: int64(m.cfg.ThinkingBudget),
		})
	case AgentSynth:
		return &synth.Model{}, nil
	default:
		return demo.NewModel(demo.Config{Words: m.cfg.DemoWords, Delay: m.cfg.DemoDelay}), nil
	}
}

// startMCP connects to the configured MCP servers (waiting up to 10 s for their first
// connections) and keeps their tools in m.tools; a tool name taken twice stops chatd.
func (m *Server) startMCP(context.Context) error {
	mgr, err := mcp.Start(m.mcpConfig, mcp.Options{Registry: m.tools, Logger: m.log, Clock: m.clock, Version: version()})
	if err != nil {
		return err
	}
	m.mcp.Store(mgr)
	for _, st := range mgr.Status() {
		ev := m.log.Info()
		if !st.Connected {
			ev = m.log.Warn().Str("error", st.Error)
		}
		ev.Str("mcp_server", st.Name).Str("transport", st.Transport).Bool("connected", st.Connected).Strs("tools", st.Tools).Msg("mcp server")
	}
	return nil
}

// mcpCollector exports each MCP server's state: chatd_mcp_server_up and chatd_mcp_tools.
type mcpCollector struct{ m *Server }

var (
	mcpUpDesc    = prometheus.NewDesc("chatd_mcp_server_up", "Whether chatd has a session with the MCP server (1) or not (0).", []string{"server"}, nil)
	mcpToolsDesc = prometheus.NewDesc("chatd_mcp_tools", "The tools of the MCP server the model is offered.", []string{"server"}, nil)
)

func (c mcpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- mcpUpDesc
	ch <- mcpToolsDesc
}

func (c mcpCollector) Collect(ch chan<- prometheus.Metric) {
	mgr := c.m.mcp.Load()
	if mgr == nil {
		return
	}
	for _, st := range mgr.Status() {
		up := 0.0
		if st.Connected {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(mcpUpDesc, prometheus.GaugeValue, up, st.Name)
		ch <- prometheus.MustNewConstMetric(mcpToolsDesc, prometheus.GaugeValue, float64(len(st.Tools)), st.Name)
	}
}

// version is chatd's module version, as built ("(devel)" from a checkout).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}

func (m *Server) stopMCP(context.Context) error {
	if mgr := m.mcp.Load(); mgr != nil {
		mgr.Close()
	}
	return nil
}

// mcpStatus serves the MCP servers' state on the admin listener (GET /mcp).
func (m *Server) mcpStatus(w http.ResponseWriter, _ *http.Request) {
	servers := []mcp.ServerStatus{}
	if mgr := m.mcp.Load(); mgr != nil {
		servers = mgr.Status()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"servers": servers})
}

// newHTTPAgent is the team's own agent at CHATD_AGENT_URL (docs/agents.md): its runs
// are played by chatd's HTTP client for its protocol, not by chatd's agent loop, so
// chatd's own tools (and MCP servers') are not offered to it.
func (m *Server) newHTTPAgent(clock clockwork.Clock) (conversation.Agent, error) {
	cfg := httpagent.Config{
		URL:            m.cfg.AgentURL,
		Protocol:       m.cfg.AgentProtocol,
		Timeout:        m.cfg.ModelTimeout,
		ForwardToken:   m.cfg.AgentForwardToken,
		ApprovalExpire: m.cfg.ApprovalExpire,
		Clock:          clock,
		Logger:         m.log.With().Str("component", "agent").Logger(),
	}
	switch m.cfg.AgentProtocol {
	case httpagent.ProtocolAISDK:
		return httpagent.NewAISDK(cfg)
	case httpagent.ProtocolAGUI:
		return agui.New(agui.Config{
			URL:            cfg.URL,
			Header:         cfg.RequestHeaders,
			Timeout:        cfg.Timeout,
			ApprovalExpire: cfg.ApprovalExpire,
			Clock:          clock,
			Logger:         cfg.Logger,
		})
	default:
		return nil, fmt.Errorf("CHATD_AGENT_PROTOCOL %q is not supported", m.cfg.AgentProtocol)
	}
}

// modelName is stored on each run.
func (m *Server) modelName() string {
	if m.opts.model != nil {
		return m.opts.modelName
	}
	if m.cfg.Agent == AgentDemo || m.cfg.Agent == AgentSynth {
		return m.cfg.Agent
	}
	if m.cfg.Agent == AgentHTTP {
		return "http:" + m.cfg.AgentProtocol
	}
	return m.cfg.Model
}

// Shutdown stops chatd's services in the reverse of their start order: stop accepting
// connections, leave active runs for the next process with their text stored (or end
// them interrupted, with CHATD_RECOVER=interrupt), store what the conversations queued
// (on a budget of its own, CHATD_SHUTDOWN_TIMEOUT), close every socket with 1001, kill
// the sandboxes' processes, close the database pool. ctx bounds the rest. It is safe
// after a Start that failed part way, without Start, and a second time.
func (m *Server) Shutdown(ctx context.Context) error {
	return m.services.Stop(ctx)
}

// ownBudget returns stop with a budget of its own, CHATD_SHUTDOWN_TIMEOUT from when it
// begins, rather than what the shutdown's earlier steps left of theirs.
func (m *Server) ownBudget(stop func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ShutdownTimeout)
		defer cancel()
		return stop(ctx)
	}
}

// noLimit maps the configuration's 0 (no limit) to ws.Config's -1.
func noLimit(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// toolStale is the agent loop's ToolStale for CHATD_TOOL_STALE: off (0) is never.
func toolStale(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
