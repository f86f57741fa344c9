package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/demo"
	"github.com/chatd/chatd/agent/mcp"
	"github.com/chatd/chatd/agent/sandbox/bwrap"
	"github.com/chatd/chatd/auth"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/journal"
	"github.com/chatd/chatd/retention"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/webhook"
)

// Config is everything chatd can be told at start-up. Each field has a flag and an
// environment variable; a flag given on the command line wins over the variable.
// ConfigFromEnv reads it as the chatd command does; a program that builds one in Go
// starts from DefaultConfig: a zero field is not "unset" (0 turns a limit off).
type Config struct {
	// Addr is the address of the public listener: the API, the WebSocket, the web app,
	// /healthz and /readyz (CHATD_ADDR).
	Addr string
	// AdminAddr is the address of the admin listener: /metrics, /debug/pprof/ (with
	// Pprof), /healthz and /readyz; "off" serves none of them (CHATD_ADMIN_ADDR).
	AdminAddr string
	// DatabaseURL is the PostgreSQL connection URL (DATABASE_URL). Required.
	DatabaseURL string
	// AllowedOrigins are browser origins allowed besides the server's own
	// (CHATD_ALLOWED_ORIGINS, comma-separated host patterns or scheme://host patterns).
	AllowedOrigins []string
	// LogLevel is trace, debug, info, warn or error (CHATD_LOG_LEVEL).
	LogLevel string
	// LogFormat is json, console, or auto: console on a terminal, json otherwise
	// (CHATD_LOG_FORMAT).
	LogFormat string

	// RingEvents and RingBytes bound each session's replay ring (CHATD_RING_EVENTS,
	// CHATD_RING_BYTES).
	RingEvents int
	RingBytes  int
	// SendQueueBytes bounds each connection's outbound queue (CHATD_SEND_QUEUE_BYTES).
	SendQueueBytes int
	// ReadLimit is the largest frame a client may send (CHATD_READ_LIMIT).
	ReadLimit int
	// PingInterval and PingTimeout: the server pings every connection this often and
	// drops one that has not answered within the timeout (CHATD_PING_INTERVAL,
	// CHATD_PING_TIMEOUT).
	PingInterval time.Duration
	PingTimeout  time.Duration
	// MaxQueuedCommands bounds the commands of one connection waiting or being handled;
	// one more is answered with error busy (CHATD_MAX_QUEUED_COMMANDS).
	MaxQueuedCommands int
	// CommandRate and CommandBurst are each connection's token bucket of commands; one
	// over it is answered error rate_limited (CHATD_COMMAND_RATE, e.g. 20/s or off;
	// CHATD_COMMAND_BURST). rate.Inf is off.
	CommandRate  rate.Limit
	CommandBurst int
	// MaxConnsPerUser bounds the WebSocket connections of one authenticated user, the
	// anonymous user of CHATD_AUTH=none excepted: one more is closed with 4029.
	// MaxConnsPerAddr bounds the TCP connections from one remote address, of every kind:
	// one more is answered HTTP 429 and closed. 0 is no limit (CHATD_MAX_CONNS_PER_USER,
	// CHATD_MAX_CONNS_PER_ADDR).
	MaxConnsPerUser int
	MaxConnsPerAddr int
	// MaxConns bounds the connections the listener holds; one more is answered 503 and
	// closed. Its default is three quarters of the open-file limit; 0 is no limit
	// (CHATD_MAX_CONNS).
	MaxConns int
	// MaxSessionsPerUser bounds the live (not deleted) sessions of one authenticated
	// user across every chatd on the database; a new one over it is refused
	// too_many_sessions. 0 is no limit (CHATD_MAX_SESSIONS_PER_USER).
	MaxSessionsPerUser int
	// HTTPReadTimeout bounds reading a request, its body included; HTTPWriteTimeout
	// writing an answer that is not a stream; HTTPIdleTimeout how long a kept-alive
	// connection waits for its next request (CHATD_HTTP_READ_TIMEOUT,
	// CHATD_HTTP_WRITE_TIMEOUT, CHATD_HTTP_IDLE_TIMEOUT). WebSockets and streams are
	// bounded by their own means once they start.
	HTTPReadTimeout  time.Duration
	HTTPWriteTimeout time.Duration
	HTTPIdleTimeout  time.Duration
	// MaxRunsPerUser bounds the active runs of one authenticated user across their
	// sessions and every chatd on the database, the anonymous user excepted: a send,
	// retry or continue over it is answered error rate_limited. 0 is no limit
	// (CHATD_MAX_RUNS_PER_USER).
	MaxRunsPerUser int
	// DoubleText is what a chat.send (or an AI SDK POST) does while the session's run is
	// active when it names no policy: queue, steer, interrupt or reject (CHATD_DOUBLE_TEXT).
	DoubleText string
	// HandshakeRate and HandshakeBurst are each remote address's token bucket of
	// WebSocket upgrades; one over it is answered HTTP 429 (CHATD_HANDSHAKE_RATE, e.g.
	// 20/s or off; CHATD_HANDSHAKE_BURST). rate.Inf is off.
	HandshakeRate  rate.Limit
	HandshakeBurst int
	// MaxContentBytes is the largest user message (CHATD_MAX_CONTENT_BYTES).
	MaxContentBytes int
	// IdleEvict is how long a session with no subscriber and no run stays in memory
	// (CHATD_IDLE_EVICT).
	IdleEvict time.Duration
	// Compression negotiates permessage-deflate on the WebSocket with clients that offer
	// it (CHATD_COMPRESSION, on|off).
	Compression bool
	// QuietRelease is how long a session with no active run keeps its newest messages and
	// its replay ring in memory after its last run ended (CHATD_QUIET_RELEASE); 0 (off):
	// for its life.
	QuietRelease time.Duration
	// ShutdownTimeout bounds each step of a graceful shutdown: the listener's and the
	// transport's, and on a budget of its own the conversations' storing of what they
	// queued (CHATD_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// StreamSync is the stream log's interval: the text runs are streaming is stored
	// every StreamSync, for every session of the node in one statement, so a crash loses
	// at most that much of it; 0 keeps no stream log (CHATD_STREAM_SYNC, a duration or
	// off).
	StreamSync time.Duration
	// Pprof serves net/http/pprof under /debug/pprof/ on the admin listener (CHATD_PPROF,
	// on|off). Off by default: profiles show the process's internals to whoever can
	// reach the admin listener, and a CPU profile or trace costs while it runs.
	Pprof bool
	// AdminToken, when set, is what the admin listener's erasure (DELETE /users/{id})
	// needs as a bearer token (CHATD_ADMIN_TOKEN; no flag, so it never shows in a process
	// list). Without it an erasure is taken only on an admin listener bound to a loopback
	// address, from a loopback address: one bound to the pod's address for Prometheus must
	// not let the pod network erase users.
	AdminToken string
	// CoalesceDeltas merges the text a segment streams within this long into one
	// chat.delta; 0 sends every piece as it comes; conversation.CoalesceAdaptive (the
	// default, "adaptive") merges only what queued while a session's actor was busy
	// (CHATD_COALESCE_DELTAS).
	CoalesceDeltas time.Duration

	// DemoWords and DemoDelay set the demo agent's reply length and pace
	// (CHATD_DEMO_WORDS, CHATD_DEMO_DELAY).
	DemoWords int
	DemoDelay time.Duration

	// ApprovalTimeout is how long a run waits for a decision before the session's
	// sandbox is paused (CHATD_APPROVAL_TIMEOUT); SandboxIdlePause how long a sandbox
	// runs without a tool call before it is paused (CHATD_SANDBOX_IDLE_PAUSE);
	// SandboxKillAfter how long a paused sandbox lives (CHATD_SANDBOX_KILL_AFTER). The
	// last two are enforced by the sandbox janitor from times stored with each session.
	// Runs wait for decisions indefinitely.
	ApprovalTimeout time.Duration
	// ApprovalExpire, when positive, denies a call nobody decided within it (0: never).
	ApprovalExpire   time.Duration
	SandboxIdlePause time.Duration
	SandboxKillAfter time.Duration
	// WorkspaceRetention is how long the workspace of a sandbox that stopped being its
	// session's (the janitor killed it, or the session got another) is kept before the
	// janitor removes it (CHATD_WORKSPACE_RETENTION); 0 (also written off) keeps them
	// for good. A deleted session's workspaces are removed at once whatever it says.
	WorkspaceRetention time.Duration
	// AbandonAfter cancels a streaming run nobody has watched for this long
	// (CHATD_ABANDON_AFTER).
	AbandonAfter time.Duration
	// LeaseTTL is how long a node holds a session's lease without renewing it
	// (CHATD_LEASE_TTL): the longest a dead node's runs wait before another node
	// continues them. Renewals come every third of it.
	LeaseTTL time.Duration
	// NodeAddr is where the other nodes of a cluster reach this one (CHATD_NODE_ADDR):
	// host:port of its listener. By default the listener's address, or this host's name
	// with its port when it listens on every interface.
	NodeAddr string
	// NodeID names this node among those on the database (CHATD_NODE_ID); by default
	// NodeAddr. Each node's must be its own.
	NodeID string
	// Recover says what start-up does with the runs a process that died left
	// unfinished (CHATD_RECOVER): RecoverContinue continues each from its checkpoint as
	// the same run; RecoverInterrupt ends them interrupted.
	Recover string
	// MaxSteps bounds model calls per run (CHATD_MAX_STEPS).
	MaxSteps int
	// ShellTool offers the model the shell tool (CHATD_SHELL_TOOL, on|off).
	ShellTool bool
	// MCPConfig names a JSON file of MCP servers whose tools the model is offered
	// (CHATD_MCP_CONFIG; docs/tools.md); empty: none. Read and checked by validation
	// (ConfigFromEnv, New): a file chatd cannot use is an error naming the server and the
	// key.
	MCPConfig string
	// AgentURL is the endpoint of an HTTP agent (CHATD_AGENT=http; CHATD_AGENT_URL), and
	// AgentProtocol what it speaks: aisdk (an AI SDK route's UI message stream) or agui
	// (CHATD_AGENT_PROTOCOL; docs/agents.md).
	AgentURL      string
	AgentProtocol string
	// AgentForwardToken sends the HTTP agent the bearer token of the run's message
	// (CHATD_AGENT_FORWARD_TOKEN, on|off).
	AgentForwardToken bool
	// Retention (docs/retention.md): how long ended runs keep their details (RetainDone,
	// RetainFailed; CHATD_RETAIN_DONE, CHATD_RETAIN_FAILED), how much of a tool's output
	// outlives them (RetainToolOutput, characters; CHATD_RETAIN_TOOL_OUTPUT), how long an
	// idle session lives (RetainSessions, CHATD_RETAIN_SESSIONS), and how often the
	// janitor looks (RetentionInterval, CHATD_RETENTION_INTERVAL). 0 keeps for good.
	RetainDone        time.Duration
	RetainFailed      time.Duration
	RetainToolOutput  int
	RetainSessions    time.Duration
	RetentionInterval time.Duration
	// ToolStale stops a running tool call that sent no output and reported no progress
	// for this long (CHATD_TOOL_STALE); 0 (off): never.
	ToolStale time.Duration
	// WebhookURL receives the webhook events (CHATD_WEBHOOK_URL; docs/webhooks.md),
	// signed with WebhookSecret (CHATD_WEBHOOK_SECRET, whsec_…); empty: none.
	WebhookURL    string
	WebhookSecret string
	// SandboxDir holds the sandboxes' workspaces (CHATD_SANDBOX_DIR).
	SandboxDir string
	// Sandbox is where tools run commands (CHATD_SANDBOX): SandboxBwrap, under bubblewrap,
	// or SandboxLocal, plain child processes in a working directory (for development:
	// they see all chatd sees). Empty picks bwrap when the shell tool is on, else local.
	Sandbox string
	// Bwrap is bubblewrap's executable; empty looks for bwrap in PATH (CHATD_BWRAP).
	Bwrap string
	// SandboxNetwork gives bwrap sandboxes the host's network (CHATD_SANDBOX_NETWORK).
	SandboxNetwork bool
	// The limits of a bwrap sandbox's commands (bwrap.Limits); 0 for none. Each process
	// has its address space (CHATD_SANDBOX_MEMORY), open files
	// (CHATD_SANDBOX_OPEN_FILES) and largest file (CHATD_SANDBOX_FILE_SIZE); a command
	// its CPU time, its processes together and each (CHATD_SANDBOX_CPU_TIME), and
	// processes (CHATD_SANDBOX_PROCESSES); a sandbox the memory of its processes
	// together (CHATD_SANDBOX_TOTAL_MEMORY), the size of its workspace
	// (CHATD_SANDBOX_DISK) and of its /tmp and /dev/shm (CHATD_SANDBOX_TMP_SIZE).
	SandboxCPUTime     time.Duration
	SandboxMemory      int
	SandboxTotalMemory int
	SandboxProcesses   int
	SandboxOpenFiles   int
	SandboxFileSize    int
	SandboxDisk        int
	SandboxTmpSize     int

	// Agent is the model provider: demo, openai or anthropic (CHATD_AGENT).
	Agent string
	// Model is the provider's model name (CHATD_MODEL); required unless Agent is demo.
	Model string
	// OpenAIBaseURL and OpenAIAPIKey point the openai agent at an OpenAI-compatible
	// endpoint (OPENAI_BASE_URL, OPENAI_API_KEY); the key has no flag, so it never shows
	// in a process list.
	OpenAIBaseURL string
	OpenAIAPIKey  string
	// AnthropicBaseURL and AnthropicAPIKey do the same for the anthropic agent
	// (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY).
	AnthropicBaseURL string
	AnthropicAPIKey  string
	// SystemPrompt is sent with every model call (CHATD_SYSTEM_PROMPT).
	SystemPrompt string
	// ContextTokens is the token budget of a model call: the system prompt, the tool
	// specs, the conversation and the answer (MaxTokens, or a reserve); the oldest turns
	// are left out to stay under it (CHATD_CONTEXT_TOKENS).
	ContextTokens int
	// MaxTokens caps each answer; 0 is the provider's default (CHATD_MAX_TOKENS).
	MaxTokens int
	// ThinkingBudget turns Anthropic's extended thinking on (CHATD_THINKING_BUDGET).
	ThinkingBudget int
	// ModelTimeout is the longest a model call may go without sending anything
	// (CHATD_MODEL_TIMEOUT).
	ModelTimeout time.Duration

	// Auth is how clients are authenticated (CHATD_AUTH): AuthNone (every client is the
	// same anonymous user; only on a loopback address unless AuthNoneOnPublic) or AuthJWT.
	Auth string
	// AuthNoneOnPublic allows AuthNone on an address other than loopback, behind a proxy
	// that authenticates (CHATD_AUTH_NONE_ON_PUBLIC=yes).
	AuthNoneOnPublic bool
	// JWTSecret is the HMAC key of AuthJWT (CHATD_JWT_SECRET; no flag, so it never shows
	// in a process list); JWKSURL the identity provider's JWK Set (CHATD_JWKS_URL). One of
	// the two.
	JWTSecret string
	JWKSURL   string
	// JWTIssuer and JWTAudience, when set, must be the token's iss and among its aud
	// (CHATD_JWT_ISSUER, CHATD_JWT_AUDIENCE).
	JWTIssuer   string
	JWTAudience string
}

// Authentication modes (CHATD_AUTH).
const (
	AuthNone = "none"
	AuthJWT  = "jwt"
)

// defaultCoalesceDeltas is chatd's coalescing: adaptive, which holds a token back only
// while its session's actor has more work queued behind it, so a process that keeps up
// adds no latency and one that falls behind sends fewer, larger frames.
// docs/benchmarks.md has the figures against the fixed windows.
const defaultCoalesceDeltas = conversation.CoalesceAdaptive

// defaultAdminAddr is where /metrics and /debug/pprof/ are served unless told otherwise:
// loopback, so only the machine itself (or what it forwards) can read them.
const defaultAdminAddr = "127.0.0.1:9090"

// AdminOff as CHATD_ADMIN_ADDR runs no admin listener.
const AdminOff = "off"

// maxStreamSync bounds CHATD_STREAM_SYNC: past it, a crash would lose more text than a
// stream log is for.
const maxStreamSync = 10 * time.Second

// maxCoalesceDeltas bounds CHATD_COALESCE_DELTAS: a longer wait would make streaming
// visibly stutter, which is not what coalescing is for.
const maxCoalesceDeltas = time.Second

// defaultSandboxDir is CHATD_SANDBOX_DIR unless told otherwise: a directory of chatd's
// user's, not one in the shared /tmp, where another user could make it first (or a
// symbolic link by its name) and read or plant workspaces. As root it is under
// /var/cache, which the sandbox user (nobody) can traverse, unlike root's home; otherwise
// the user's cache directory ($XDG_CACHE_HOME, else ~/.cache), and without a home, a
// directory of the user's own in $TMPDIR (start-up refuses it if someone else made it).
func defaultSandboxDir(getenv func(string) string, euid int) string {
	if euid == 0 {
		return "/var/cache/chatd/sandboxes"
	}
	// As os.UserCacheDir, from getenv.
	cache := getenv("XDG_CACHE_HOME")
	if !filepath.IsAbs(cache) {
		cache = ""
		if home := getenv("HOME"); filepath.IsAbs(home) {
			cache = filepath.Join(home, ".cache")
		}
	}
	if cache == "" {
		return filepath.Join(os.TempDir(), "chatd-sandboxes-"+strconv.Itoa(euid))
	}
	return filepath.Join(cache, "chatd", "sandboxes")
}

// defaultLeaseTTL is CHATD_LEASE_TTL's default.
const defaultLeaseTTL = 10 * time.Second

// validHostPort reports whether s is host:port with a host and a port.
func validHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	return err == nil && host != "" && port != ""
}

// What start-up does with runs a dead process left unfinished (CHATD_RECOVER).
const (
	RecoverContinue  = "continue"
	RecoverInterrupt = "interrupt"
)

// minSandboxOpenFiles bounds CHATD_SANDBOX_OPEN_FILES from below: fewer, and a shell
// cannot run a pipeline with a redirection or two.
const minSandboxOpenFiles = 16

// Sandbox providers (CHATD_SANDBOX).
const (
	SandboxBwrap = "bwrap"
	SandboxLocal = "local"
)

// Agents chatd can run.
const (
	AgentDemo      = "demo"
	AgentOpenAI    = "openai"
	AgentAnthropic = "anthropic"
	// AgentSynth streams numbered, time-stamped tokens for the benchmark (agent/synth).
	AgentSynth = "synth"
	// AgentHTTP is an agent of the team's own, served over HTTP (AgentURL, AgentProtocol;
	// docs/agents.md).
	AgentHTTP = "http"
)

// ConfigFromEnv reads chatd's configuration as the chatd command does: flags from args
// (without the program's name), each defaulting to its environment variable from getenv,
// else to chatd's default (DefaultConfig). -help prints the flags to usage and returns
// flag.ErrHelp; a bad flag prints usage too. The error names the first setting that is
// wrong, by its variable and flag.
func ConfigFromEnv(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	c, err := readConfig(args, getenv, usage)
	if err != nil {
		return Config{}, err
	}
	return c, c.validate()
}

// DefaultConfig returns chatd's defaults, the configuration of a chatd given no flag and
// no variable (HOME and XDG_CACHE_HOME excepted, which place SandboxDir), except that
// DatabaseURL is empty. A program that builds its Config in Go starts from it and sets
// DatabaseURL and whatever else it changes; New refuses a Config that is not complete.
func DefaultConfig() Config {
	home := func(k string) string {
		if k == "HOME" || k == "XDG_CACHE_HOME" {
			return os.Getenv(k)
		}
		return ""
	}
	c, err := readConfig(nil, home, io.Discard)
	if err != nil {
		panic("server: chatd's defaults do not parse: " + err.Error()) // no flag, no variable: a bug
	}
	return c
}

// readConfig is ConfigFromEnv without the validation.
func readConfig(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("chatd", flag.ContinueOnError)
	fs.SetOutput(usage)

	env := envDefaults{getenv: getenv}
	// Byte sizes are flag.Values: their defaults must be in place before fs.Var, which
	// records the default shown by -help.
	c.RingBytes = env.bytes("CHATD_RING_BYTES", conversation.DefaultRingBytes)
	c.SendQueueBytes = env.bytes("CHATD_SEND_QUEUE_BYTES", transport.DefaultSendQueueBytes)
	c.ReadLimit = env.bytes("CHATD_READ_LIMIT", ws.DefaultReadLimit)
	c.SandboxMemory = env.bytesUpTo("CHATD_SANDBOX_MEMORY", int(bwrap.DefaultLimits.Memory), maxLargeBytes)
	c.SandboxTotalMemory = env.bytesUpTo("CHATD_SANDBOX_TOTAL_MEMORY", int(bwrap.DefaultLimits.TotalMemory), maxLargeBytes)
	c.SandboxDisk = env.bytesUpTo("CHATD_SANDBOX_DISK", int(bwrap.DefaultLimits.Disk), maxLargeBytes)
	c.SandboxFileSize = env.bytesUpTo("CHATD_SANDBOX_FILE_SIZE", int(bwrap.DefaultLimits.FileSize), maxLargeBytes)
	c.SandboxTmpSize = env.bytesUpTo("CHATD_SANDBOX_TMP_SIZE", int(bwrap.DefaultLimits.TmpSize), maxLargeBytes)
	c.MaxContentBytes = env.bytes("CHATD_MAX_CONTENT_BYTES", conversation.DefaultMaxContentBytes)
	c.WorkspaceRetention = env.offDuration("CHATD_WORKSPACE_RETENTION", agent.DefaultWorkspaceRetention)
	c.ToolStale = env.offDuration("CHATD_TOOL_STALE", agent.DefaultToolStale)
	c.RetainDone = env.offDuration("CHATD_RETAIN_DONE", retention.DefaultDone)
	c.RetainFailed = env.offDuration("CHATD_RETAIN_FAILED", retention.DefaultFailed)
	c.RetainSessions = env.offDuration("CHATD_RETAIN_SESSIONS", 0)
	c.RetentionInterval = env.offDuration("CHATD_RETENTION_INTERVAL", retention.DefaultInterval)
	fs.StringVar(&c.Addr, "addr", env.str("CHATD_ADDR", "127.0.0.1:8080"), "listen address of the API, the WebSocket and the app (CHATD_ADDR)")
	fs.StringVar(&c.AdminAddr, "admin-addr", env.str("CHATD_ADMIN_ADDR", defaultAdminAddr), "listen address of /metrics and /debug/pprof/, or off (CHATD_ADMIN_ADDR)")
	fs.StringVar(&c.DatabaseURL, "database-url", env.str("DATABASE_URL", ""), "PostgreSQL URL (DATABASE_URL)")
	origins := fs.String("allowed-origins", env.str("CHATD_ALLOWED_ORIGINS", ""), "comma-separated extra allowed origins (CHATD_ALLOWED_ORIGINS)")
	fs.StringVar(&c.LogLevel, "log-level", env.str("CHATD_LOG_LEVEL", "info"), "trace, debug, info, warn or error (CHATD_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", env.str("CHATD_LOG_FORMAT", "auto"), "json, console or auto (CHATD_LOG_FORMAT)")
	fs.IntVar(&c.RingEvents, "ring-events", env.int("CHATD_RING_EVENTS", conversation.DefaultRingEvents), "events kept per session for replay (CHATD_RING_EVENTS)")
	fs.Var(byteSize{&c.RingBytes}, "ring-bytes", "bytes kept per session for replay, e.g. 4MiB (CHATD_RING_BYTES)")
	fs.Var(byteSize{&c.SendQueueBytes}, "send-queue-bytes", "outbound queue per connection, e.g. 1MiB (CHATD_SEND_QUEUE_BYTES)")
	fs.Var(byteSize{&c.ReadLimit}, "read-limit", "largest client frame, e.g. 256KiB (CHATD_READ_LIMIT)")
	fs.Var(byteSize{&c.MaxContentBytes}, "max-content-bytes", "largest user message, e.g. 128KiB (CHATD_MAX_CONTENT_BYTES)")
	fs.DurationVar(&c.PingInterval, "ping-interval", env.duration("CHATD_PING_INTERVAL", ws.DefaultPingInterval), "ping every connection this often (CHATD_PING_INTERVAL)")
	fs.DurationVar(&c.PingTimeout, "ping-timeout", env.duration("CHATD_PING_TIMEOUT", ws.DefaultPingTimeout), "drop a connection that has not answered a ping within this (CHATD_PING_TIMEOUT)")
	fs.IntVar(&c.MaxQueuedCommands, "max-queued-commands", env.int("CHATD_MAX_QUEUED_COMMANDS", ws.DefaultMaxQueuedCommands), "commands per connection waiting or being handled; one more is answered busy (CHATD_MAX_QUEUED_COMMANDS)")
	c.CommandRate = env.rate("CHATD_COMMAND_RATE", ws.DefaultCommandRate)
	fs.Var(rateValue{&c.CommandRate}, "command-rate", "commands per connection, e.g. 20/s, 600/m or off; more are answered rate_limited (CHATD_COMMAND_RATE)")
	fs.IntVar(&c.CommandBurst, "command-burst", env.int("CHATD_COMMAND_BURST", ws.DefaultCommandBurst), "commands a connection may send at once within its rate (CHATD_COMMAND_BURST)")
	fs.IntVar(&c.MaxConnsPerUser, "max-conns-per-user", env.int("CHATD_MAX_CONNS_PER_USER", ws.DefaultMaxConnsPerUser), "connections per authenticated user, 0 for no limit; more are closed with 4029 (CHATD_MAX_CONNS_PER_USER)")
	fs.IntVar(&c.MaxRunsPerUser, "max-runs-per-user", env.int("CHATD_MAX_RUNS_PER_USER", conversation.DefaultMaxRunsPerUser), "active runs per authenticated user, 0 for no limit; more are answered rate_limited (CHATD_MAX_RUNS_PER_USER)")
	fs.IntVar(&c.MaxConnsPerAddr, "max-conns-per-addr", env.int("CHATD_MAX_CONNS_PER_ADDR", ws.DefaultMaxConnsPerAddr), "TCP connections per remote address (an IPv6 client by its /64), 0 for no limit; one more is answered HTTP 429 and closed (CHATD_MAX_CONNS_PER_ADDR)")
	fs.IntVar(&c.MaxConns, "max-conns", env.int("CHATD_MAX_CONNS", defaultMaxConns()), "connections the listener holds, 0 for no limit; more are answered 503 (CHATD_MAX_CONNS; default: 3/4 of the open-file limit)")
	fs.IntVar(&c.MaxSessionsPerUser, "max-sessions-per-user", env.int("CHATD_MAX_SESSIONS_PER_USER", defaultMaxSessionsPerUser), "live sessions per authenticated user, 0 for no limit; more are refused too_many_sessions (CHATD_MAX_SESSIONS_PER_USER)")
	fs.DurationVar(&c.HTTPReadTimeout, "http-read-timeout", env.duration("CHATD_HTTP_READ_TIMEOUT", defaultHTTPReadTimeout), "bound on reading a request, its body included (CHATD_HTTP_READ_TIMEOUT)")
	fs.DurationVar(&c.HTTPWriteTimeout, "http-write-timeout", env.duration("CHATD_HTTP_WRITE_TIMEOUT", defaultHTTPWriteTimeout), "bound on writing an answer that is not a stream (CHATD_HTTP_WRITE_TIMEOUT)")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", env.duration("CHATD_HTTP_IDLE_TIMEOUT", defaultHTTPIdleTimeout), "close a kept-alive connection idle this long between requests (CHATD_HTTP_IDLE_TIMEOUT)")
	c.HandshakeRate = env.rate("CHATD_HANDSHAKE_RATE", ws.DefaultHandshakeRate)
	fs.Var(rateValue{&c.HandshakeRate}, "handshake-rate", "WebSocket upgrades per remote address, e.g. 20/s or off; more are answered 429 (CHATD_HANDSHAKE_RATE)")
	fs.IntVar(&c.HandshakeBurst, "handshake-burst", env.int("CHATD_HANDSHAKE_BURST", ws.DefaultHandshakeBurst), "upgrades an address may make at once within its rate (CHATD_HANDSHAKE_BURST)")
	c.QuietRelease = env.offDuration("CHATD_QUIET_RELEASE", conversation.DefaultQuietRelease)
	c.Compression = env.onOff("CHATD_COMPRESSION", false)
	fs.Var(onOff{&c.Compression}, "compression", "on or off: negotiate permessage-deflate with WebSocket clients that offer it, for messages of 512 bytes and more (CHATD_COMPRESSION)")
	fs.Var(offDuration{&c.QuietRelease}, "quiet-release", "drop the messages and replay ring a session with no active run keeps in memory this long after its last run ended (its tabs stay; the next snapshot reads the messages again, a tab behind the last event gets a snapshot); off keeps them (CHATD_QUIET_RELEASE)")
	fs.DurationVar(&c.IdleEvict, "idle-evict", env.duration("CHATD_IDLE_EVICT", conversation.DefaultIdleTimeout), "evict a session idle this long (CHATD_IDLE_EVICT)")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", env.duration("CHATD_SHUTDOWN_TIMEOUT", 10*time.Second), "bound on a graceful shutdown (CHATD_SHUTDOWN_TIMEOUT)")
	c.Pprof = env.onOff("CHATD_PPROF", false)
	c.AdminToken = env.str("CHATD_ADMIN_TOKEN", "")
	fs.Var(onOff{&c.Pprof}, "pprof", "on or off: serve net/http/pprof under /debug/pprof/ on the admin listener (CHATD_PPROF)")
	c.StreamSync = env.offDuration("CHATD_STREAM_SYNC", journal.DefaultStreamSync)
	fs.Var(offDuration{&c.StreamSync}, "stream-sync", "store the text runs are streaming this often, e.g. 50ms, or off: a crash loses at most this much of it (CHATD_STREAM_SYNC)")
	c.CoalesceDeltas = env.coalesce("CHATD_COALESCE_DELTAS", defaultCoalesceDeltas)
	fs.Var(coalesceFlag{&c.CoalesceDeltas}, "coalesce-deltas", "adaptive: merge the text that queued while a session was busy into one chat.delta; a duration such as 25ms: merge what streams within it; 0 or off: none (CHATD_COALESCE_DELTAS)")
	fs.IntVar(&c.DemoWords, "demo-words", env.int("CHATD_DEMO_WORDS", demo.DefaultWords), "demo agent reply length in words, then to the end of that sentence (CHATD_DEMO_WORDS)")
	fs.DurationVar(&c.DemoDelay, "demo-delay", env.duration("CHATD_DEMO_DELAY", demo.DefaultDelay), "demo agent pause per word (CHATD_DEMO_DELAY)")
	fs.DurationVar(&c.ApprovalExpire, "approval-expire", env.duration("CHATD_APPROVAL_EXPIRE", 0), "deny a tool call nobody decided within this long; 0 waits for ever (CHATD_APPROVAL_EXPIRE)")
	fs.DurationVar(&c.ApprovalTimeout, "approval-timeout", env.duration("CHATD_APPROVAL_TIMEOUT", agent.DefaultApprovalTimeout), "pause the sandbox of a run waiting this long for an approval (CHATD_APPROVAL_TIMEOUT)")
	fs.DurationVar(&c.SandboxIdlePause, "sandbox-idle-pause", env.duration("CHATD_SANDBOX_IDLE_PAUSE", agent.DefaultSandboxIdlePause), "pause a sandbox that ran no tool call for this long (CHATD_SANDBOX_IDLE_PAUSE)")
	fs.DurationVar(&c.SandboxKillAfter, "sandbox-kill-after", env.duration("CHATD_SANDBOX_KILL_AFTER", agent.DefaultSandboxKillAfter), "kill a sandbox paused this long (CHATD_SANDBOX_KILL_AFTER)")
	fs.Var(offDuration{&c.ToolStale}, "tool-stale", "stop a running tool call that sent no output and reported no progress for this long, e.g. 1m; off never does (CHATD_TOOL_STALE)")
	fs.Var(offDuration{&c.RetainDone}, "retain-done", "remove the details of runs that ended done (error messages, tool output past -retain-tool-output, stream-log remnants) this long after, e.g. 7d; off keeps them (CHATD_RETAIN_DONE)")
	fs.Var(offDuration{&c.RetainFailed}, "retain-failed", "the same for runs that ended error, interrupted or cancelled, e.g. 30d; off keeps them (CHATD_RETAIN_FAILED)")
	fs.IntVar(&c.RetainToolOutput, "retain-tool-output", env.int("CHATD_RETAIN_TOOL_OUTPUT", retention.DefaultToolOutput), "characters of a tool call's output kept once its run's details are removed (CHATD_RETAIN_TOOL_OUTPUT)")
	fs.Var(offDuration{&c.RetainSessions}, "retain-sessions", "delete sessions with no activity for this long (and no active run), e.g. 365d; off (the default) keeps them until deleted (CHATD_RETAIN_SESSIONS)")
	fs.Var(offDuration{&c.RetentionInterval}, "retention-interval", "how often the retention janitor looks for what is due; off stops it (CHATD_RETENTION_INTERVAL)")
	fs.Var(offDuration{&c.WorkspaceRetention}, "workspace-retention", "remove a killed or replaced sandbox's workspace this long after, e.g. 7d or 12h; 0 or off keeps them (CHATD_WORKSPACE_RETENTION)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", env.duration("CHATD_LEASE_TTL", defaultLeaseTTL), "how long a node holds a session without renewing; a dead node's runs continue elsewhere after this (CHATD_LEASE_TTL)")
	fs.StringVar(&c.NodeAddr, "node-addr", env.str("CHATD_NODE_ADDR", ""), "host:port where the other chatd nodes reach this one; default: the listener's address, or this host's name with its port (CHATD_NODE_ADDR)")
	fs.StringVar(&c.NodeID, "node-id", env.str("CHATD_NODE_ID", ""), "this node's id among the chatd nodes on the database, its own; default: its address (CHATD_NODE_ID)")
	fs.StringVar(&c.DoubleText, "double-text", env.str("CHATD_DOUBLE_TEXT", string(chat.DoubleTextQueue)), "what a message sent while a run is active does when it names no policy: queue, steer, interrupt or reject (CHATD_DOUBLE_TEXT)")
	fs.StringVar(&c.Recover, "recover", env.str("CHATD_RECOVER", RecoverContinue), "what start-up does with runs a dead process left unfinished: continue or interrupt (CHATD_RECOVER)")
	fs.DurationVar(&c.AbandonAfter, "abandon-after", env.duration("CHATD_ABANDON_AFTER", conversation.DefaultAbandonAfter), "cancel a run nobody watched this long (CHATD_ABANDON_AFTER)")
	fs.IntVar(&c.MaxSteps, "max-steps", env.int("CHATD_MAX_STEPS", agent.DefaultMaxSteps), "model calls per run at most (CHATD_MAX_STEPS)")
	c.ShellTool = env.onOff("CHATD_SHELL_TOOL", false)
	fs.Var(onOff{&c.ShellTool}, "shell-tool", "on or off: offer the approval-gated shell tool (CHATD_SHELL_TOOL)")
	fs.StringVar(&c.AgentURL, "agent-url", env.str("CHATD_AGENT_URL", ""), "with CHATD_AGENT=http: the agent's endpoint, POSTed for each turn (CHATD_AGENT_URL; docs/agents.md)")
	c.AgentForwardToken = env.onOff("CHATD_AGENT_FORWARD_TOKEN", false)
	fs.Var(onOff{&c.AgentForwardToken}, "agent-forward-token", "on or off: send an HTTP agent the bearer token of the run's message as X-Chatd-User-Token (CHATD_AGENT_FORWARD_TOKEN)")
	fs.StringVar(&c.AgentProtocol, "agent-protocol", env.str("CHATD_AGENT_PROTOCOL", ""), "with CHATD_AGENT=http: aisdk (an AI SDK route) or agui (an AG-UI agent) (CHATD_AGENT_PROTOCOL)")
	fs.StringVar(&c.WebhookURL, "webhook-url", env.str("CHATD_WEBHOOK_URL", ""), "URL that receives the webhook events: runs that complete, fail, are cancelled or wait for approval (CHATD_WEBHOOK_URL; docs/webhooks.md)")
	fs.StringVar(&c.WebhookSecret, "webhook-secret", env.str("CHATD_WEBHOOK_SECRET", ""), "the webhooks' signing secret, whsec_ and base64 (CHATD_WEBHOOK_SECRET)")
	fs.StringVar(&c.MCPConfig, "mcp-config", env.str("CHATD_MCP_CONFIG", ""), "JSON file of MCP servers whose tools the model is offered (CHATD_MCP_CONFIG; docs/tools.md)")
	fs.StringVar(&c.SandboxDir, "sandbox-dir", env.str("CHATD_SANDBOX_DIR", defaultSandboxDir(getenv, os.Geteuid())), "directory of the sandboxes' workspaces (CHATD_SANDBOX_DIR)")
	fs.StringVar(&c.Sandbox, "sandbox", env.str("CHATD_SANDBOX", ""), "where tools run commands: bwrap (bubblewrap) or local (no isolation, for development); default bwrap when the shell tool is on (CHATD_SANDBOX)")
	fs.StringVar(&c.Bwrap, "bwrap", env.str("CHATD_BWRAP", ""), "bubblewrap's executable; empty looks for bwrap in PATH (CHATD_BWRAP)")
	c.SandboxNetwork = env.onOff("CHATD_SANDBOX_NETWORK", false)
	fs.Var(onOff{&c.SandboxNetwork}, "sandbox-network", "on or off: give bwrap sandboxes the host's network (CHATD_SANDBOX_NETWORK)")
	fs.DurationVar(&c.SandboxCPUTime, "sandbox-cpu-time", env.duration("CHATD_SANDBOX_CPU_TIME", time.Duration(bwrap.DefaultLimits.CPUSeconds)*time.Second), "CPU time of a sandboxed command, its processes together and each, 0 for no limit (CHATD_SANDBOX_CPU_TIME)")
	fs.Var(largeSize{byteSize{&c.SandboxMemory}}, "sandbox-memory", "address space of each sandboxed process, e.g. 4GiB, 0 for no limit (CHATD_SANDBOX_MEMORY)")
	fs.Var(largeSize{byteSize{&c.SandboxTotalMemory}}, "sandbox-total-memory", "memory of a sandbox's processes together, e.g. 2GiB, 0 for no limit (CHATD_SANDBOX_TOTAL_MEMORY)")
	fs.IntVar(&c.SandboxProcesses, "sandbox-processes", env.int("CHATD_SANDBOX_PROCESSES", int(bwrap.DefaultLimits.Processes)), "processes of a sandboxed command, 0 for no limit (CHATD_SANDBOX_PROCESSES)")
	fs.IntVar(&c.SandboxOpenFiles, "sandbox-open-files", env.int("CHATD_SANDBOX_OPEN_FILES", int(bwrap.DefaultLimits.OpenFiles)), "open files of each sandboxed process, 0 for chatd's own limit (CHATD_SANDBOX_OPEN_FILES)")
	fs.Var(largeSize{byteSize{&c.SandboxFileSize}}, "sandbox-file-size", "largest file a sandboxed process may write, e.g. 1GiB, 0 for no limit (CHATD_SANDBOX_FILE_SIZE)")
	fs.Var(largeSize{byteSize{&c.SandboxDisk}}, "sandbox-disk", "size of a sandbox's workspace, e.g. 2GiB, 0 for no limit (CHATD_SANDBOX_DISK)")
	fs.Var(largeSize{byteSize{&c.SandboxTmpSize}}, "sandbox-tmp-size", "size of a sandbox's private /tmp and /dev/shm each, e.g. 256MiB, 0 for the kernel's default (CHATD_SANDBOX_TMP_SIZE)")

	fs.StringVar(&c.Agent, "agent", env.str("CHATD_AGENT", AgentDemo), "model provider: demo, openai or anthropic; http for an agent of your own; synth for benchmarks (CHATD_AGENT)")
	fs.StringVar(&c.Model, "model", env.str("CHATD_MODEL", ""), "model name, e.g. gpt-4.1-mini, llama3.2, claude-sonnet-4-5 (CHATD_MODEL)")
	fs.StringVar(&c.OpenAIBaseURL, "openai-base-url", env.str("OPENAI_BASE_URL", ""), "OpenAI-compatible API base URL, e.g. http://localhost:11434/v1; empty for OpenAI (OPENAI_BASE_URL)")
	c.OpenAIAPIKey = env.str("OPENAI_API_KEY", "")
	fs.StringVar(&c.AnthropicBaseURL, "anthropic-base-url", env.str("ANTHROPIC_BASE_URL", ""), "Anthropic API base URL; empty for api.anthropic.com (ANTHROPIC_BASE_URL)")
	c.AnthropicAPIKey = env.str("ANTHROPIC_API_KEY", "")
	fs.StringVar(&c.SystemPrompt, "system-prompt", env.str("CHATD_SYSTEM_PROMPT", ""), "system prompt sent with every model call (CHATD_SYSTEM_PROMPT)")
	fs.IntVar(&c.ContextTokens, "context-tokens", env.int("CHATD_CONTEXT_TOKENS", agent.DefaultContextTokens), "token budget of a model call: system prompt, tools, conversation and answer; the oldest turns are left out beyond it (CHATD_CONTEXT_TOKENS)")
	fs.IntVar(&c.MaxTokens, "max-tokens", env.int("CHATD_MAX_TOKENS", 0), "cap on each answer's tokens, 0 for the provider's default (CHATD_MAX_TOKENS)")
	fs.IntVar(&c.ThinkingBudget, "thinking-budget", env.int("CHATD_THINKING_BUDGET", 0), "anthropic: extended thinking budget in tokens, 0 for off (CHATD_THINKING_BUDGET)")
	fs.DurationVar(&c.ModelTimeout, "model-timeout", env.duration("CHATD_MODEL_TIMEOUT", agent.DefaultModelIdleTimeout), "give up on a model call that sends nothing this long (CHATD_MODEL_TIMEOUT)")

	fs.StringVar(&c.Auth, "auth", env.str("CHATD_AUTH", AuthNone), "none (one anonymous user; loopback addresses only unless CHATD_AUTH_NONE_ON_PUBLIC=yes) or jwt (CHATD_AUTH)")
	c.AuthNoneOnPublic = env.onOff("CHATD_AUTH_NONE_ON_PUBLIC", false)
	fs.Var(onOff{&c.AuthNoneOnPublic}, "auth-none-on-public", "yes or no: allow CHATD_AUTH=none on a non-loopback address, behind a proxy that authenticates (CHATD_AUTH_NONE_ON_PUBLIC)")
	c.JWTSecret = env.str("CHATD_JWT_SECRET", "")
	fs.StringVar(&c.JWKSURL, "jwks-url", env.str("CHATD_JWKS_URL", ""), "jwt: the identity provider's JWK Set URL (CHATD_JWKS_URL); or set CHATD_JWT_SECRET for HMAC")
	fs.StringVar(&c.JWTIssuer, "jwt-issuer", env.str("CHATD_JWT_ISSUER", ""), "jwt: the required iss, if any (CHATD_JWT_ISSUER)")
	fs.StringVar(&c.JWTAudience, "jwt-audience", env.str("CHATD_JWT_AUDIENCE", ""), "jwt: the required aud, if any (CHATD_JWT_AUDIENCE)")

	if env.err != nil {
		return Config{}, env.err
	}
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, o := range strings.Split(*origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			c.AllowedOrigins = append(c.AllowedOrigins, o)
		}
	}
	return c, nil
}

// validate names the first setting that is wrong.
func (c Config) validate() error {
	if c.MCPConfig != "" {
		if _, err := mcp.Load(c.MCPConfig); err != nil {
			return err
		}
	}
	switch {
	case c.Addr == "":
		return errors.New("CHATD_ADDR (-addr) is empty")
	case c.AdminAddr == "":
		return errors.New(`CHATD_ADMIN_ADDR (-admin-addr) is empty; give an address, or "off" for no admin listener`)
	case c.AdminAddr == c.Addr && !strings.HasSuffix(c.Addr, ":0"):
		return fmt.Errorf("CHATD_ADMIN_ADDR (-admin-addr) is %s, the address of CHATD_ADDR (-addr): the admin listener needs an address of its own, or off", c.AdminAddr)
	case c.Pprof && c.AdminAddr == AdminOff:
		return errors.New("CHATD_PPROF (-pprof) is on but CHATD_ADMIN_ADDR (-admin-addr) is off: the profiles are served on the admin listener")
	case c.DatabaseURL == "":
		return errors.New("DATABASE_URL (-database-url) is not set: point it at PostgreSQL, or use `make run`, which starts a private one")
	case c.LogFormat != "json" && c.LogFormat != "console" && c.LogFormat != "auto":
		return fmt.Errorf("CHATD_LOG_FORMAT (-log-format) is %q; use json, console or auto", c.LogFormat)
	case c.RingEvents < 1:
		return fmt.Errorf("CHATD_RING_EVENTS (-ring-events) is %d; it must be at least 1", c.RingEvents)
	case c.RingBytes < 1024:
		return fmt.Errorf("CHATD_RING_BYTES (-ring-bytes) is %d; it must be at least 1KiB", c.RingBytes)
	case c.SendQueueBytes < 1024:
		return fmt.Errorf("CHATD_SEND_QUEUE_BYTES (-send-queue-bytes) is %d; it must be at least 1KiB", c.SendQueueBytes)
	case c.ReadLimit < 1024:
		return fmt.Errorf("CHATD_READ_LIMIT (-read-limit) is %d; it must be at least 1KiB", c.ReadLimit)
	case c.MaxContentBytes < 1:
		return fmt.Errorf("CHATD_MAX_CONTENT_BYTES (-max-content-bytes) is %d; it must be at least 1", c.MaxContentBytes)
	case c.PingInterval <= 0:
		return fmt.Errorf("CHATD_PING_INTERVAL (-ping-interval) is %s; it must be positive", c.PingInterval)
	case c.PingTimeout <= 0:
		return fmt.Errorf("CHATD_PING_TIMEOUT (-ping-timeout) is %s; it must be positive", c.PingTimeout)
	case c.MaxQueuedCommands < 1:
		return fmt.Errorf("CHATD_MAX_QUEUED_COMMANDS (-max-queued-commands) is %d; it must be at least 1", c.MaxQueuedCommands)
	case c.CommandBurst < 1:
		return fmt.Errorf("CHATD_COMMAND_BURST (-command-burst) is %d; it must be at least 1", c.CommandBurst)
	case c.HandshakeBurst < 1:
		return fmt.Errorf("CHATD_HANDSHAKE_BURST (-handshake-burst) is %d; it must be at least 1", c.HandshakeBurst)
	case c.MaxRunsPerUser < 0:
		return fmt.Errorf("CHATD_MAX_RUNS_PER_USER (-max-runs-per-user) is %d; use 0 (no limit) or more", c.MaxRunsPerUser)
	case c.MaxConnsPerUser < 0:
		return fmt.Errorf("CHATD_MAX_CONNS_PER_USER (-max-conns-per-user) is %d; use 0 (no limit) or more", c.MaxConnsPerUser)
	case c.MaxConnsPerAddr < 0:
		return fmt.Errorf("CHATD_MAX_CONNS_PER_ADDR (-max-conns-per-addr) is %d; use 0 (no limit) or more", c.MaxConnsPerAddr)
	case c.MaxConns < 0:
		return fmt.Errorf("CHATD_MAX_CONNS (-max-conns) is %d; use 0 (no limit) or more", c.MaxConns)
	case c.MaxSessionsPerUser < 0:
		return fmt.Errorf("CHATD_MAX_SESSIONS_PER_USER (-max-sessions-per-user) is %d; use 0 (no limit) or more", c.MaxSessionsPerUser)
	case c.HTTPReadTimeout <= 0:
		return fmt.Errorf("CHATD_HTTP_READ_TIMEOUT (-http-read-timeout) is %s; it must be positive", c.HTTPReadTimeout)
	case c.HTTPWriteTimeout <= 0:
		return fmt.Errorf("CHATD_HTTP_WRITE_TIMEOUT (-http-write-timeout) is %s; it must be positive", c.HTTPWriteTimeout)
	case c.HTTPIdleTimeout <= 0:
		return fmt.Errorf("CHATD_HTTP_IDLE_TIMEOUT (-http-idle-timeout) is %s; it must be positive", c.HTTPIdleTimeout)
	case c.QuietRelease < 0:
		return errors.New("CHATD_QUIET_RELEASE (-quiet-release) takes a duration such as 1m, or off")
	case c.IdleEvict <= 0:
		return fmt.Errorf("CHATD_IDLE_EVICT (-idle-evict) is %s; it must be positive", c.IdleEvict)
	case c.ShutdownTimeout <= 0:
		return fmt.Errorf("CHATD_SHUTDOWN_TIMEOUT (-shutdown-timeout) is %s; it must be positive", c.ShutdownTimeout)
	case c.StreamSync < 0 || c.StreamSync > maxStreamSync:
		return fmt.Errorf("CHATD_STREAM_SYNC (-stream-sync) is %s; use off, or a duration up to %s", c.StreamSync, maxStreamSync)
	case (c.CoalesceDeltas < 0 && c.CoalesceDeltas != conversation.CoalesceAdaptive) || c.CoalesceDeltas > maxCoalesceDeltas:
		return fmt.Errorf("CHATD_COALESCE_DELTAS (-coalesce-deltas) is %s; use adaptive, 0 (off) or a window up to %s", c.CoalesceDeltas, maxCoalesceDeltas)
	case c.DemoWords < 1:
		return fmt.Errorf("CHATD_DEMO_WORDS (-demo-words) is %d; it must be at least 1", c.DemoWords)
	case c.DemoDelay < 0:
		return fmt.Errorf("CHATD_DEMO_DELAY (-demo-delay) is %s; it must not be negative", c.DemoDelay)
	case c.ApprovalExpire < 0:
		return fmt.Errorf("CHATD_APPROVAL_EXPIRE (-approval-expire) is %s; it must be 0 (off) or positive", c.ApprovalExpire)
	case c.ApprovalTimeout <= 0:
		return fmt.Errorf("CHATD_APPROVAL_TIMEOUT (-approval-timeout) is %s; it must be positive", c.ApprovalTimeout)
	case c.SandboxIdlePause <= 0:
		return fmt.Errorf("CHATD_SANDBOX_IDLE_PAUSE (-sandbox-idle-pause) is %s; it must be positive", c.SandboxIdlePause)
	case c.SandboxKillAfter <= 0:
		return fmt.Errorf("CHATD_SANDBOX_KILL_AFTER (-sandbox-kill-after) is %s; it must be positive", c.SandboxKillAfter)
	case c.ToolStale < 0:
		return errors.New("CHATD_TOOL_STALE (-tool-stale) takes a duration such as 1m, or off")
	case c.RetainDone < 0 || c.RetainFailed < 0 || c.RetainSessions < 0 || c.RetentionInterval < 0:
		return errors.New("CHATD_RETAIN_DONE, CHATD_RETAIN_FAILED, CHATD_RETAIN_SESSIONS and CHATD_RETENTION_INTERVAL take a duration such as 7d or 12h, or off")
	case c.RetainToolOutput < 1:
		return fmt.Errorf("CHATD_RETAIN_TOOL_OUTPUT (-retain-tool-output) is %d; it must be at least 1 (characters kept)", c.RetainToolOutput)
	case c.RetainSessions > 0 && c.RetainSessions < time.Hour:
		return fmt.Errorf("CHATD_RETAIN_SESSIONS (-retain-sessions) is %s; sessions idle for less than an hour are not idle: use 1h or more, or off", c.RetainSessions)
	case c.WorkspaceRetention < 0:
		return fmt.Errorf("CHATD_WORKSPACE_RETENTION (-workspace-retention) is %s; use a duration such as 7d or 12h, or off to keep workspaces", c.WorkspaceRetention)
	case !chat.DoubleText(c.DoubleText).Valid():
		return fmt.Errorf("CHATD_DOUBLE_TEXT (-double-text) is %q; use queue, steer, interrupt or reject", c.DoubleText)
	case c.Recover != RecoverContinue && c.Recover != RecoverInterrupt:
		return fmt.Errorf("CHATD_RECOVER (-recover) is %q; use continue or interrupt", c.Recover)
	case c.LeaseTTL < 300*time.Millisecond:
		return fmt.Errorf("CHATD_LEASE_TTL (-lease-ttl) is %s; use 300ms or more (the default is %s)", c.LeaseTTL, defaultLeaseTTL)
	case c.NodeAddr != "" && !validHostPort(c.NodeAddr):
		return fmt.Errorf("CHATD_NODE_ADDR (-node-addr) is %q; use host:port, e.g. 10.0.0.5:8080", c.NodeAddr)
	case c.AbandonAfter <= 0:
		return fmt.Errorf("CHATD_ABANDON_AFTER (-abandon-after) is %s; it must be positive", c.AbandonAfter)
	case c.MaxSteps < 1:
		return fmt.Errorf("CHATD_MAX_STEPS (-max-steps) is %d; it must be at least 1", c.MaxSteps)
	case c.SandboxDir == "":
		return errors.New("CHATD_SANDBOX_DIR (-sandbox-dir) is empty")
	case c.Sandbox != "" && c.Sandbox != SandboxBwrap && c.Sandbox != SandboxLocal:
		return fmt.Errorf("CHATD_SANDBOX (-sandbox) is %q; use bwrap or local", c.Sandbox)
	case c.SandboxCPUTime < 0:
		return fmt.Errorf("CHATD_SANDBOX_CPU_TIME (-sandbox-cpu-time) is %s; it must not be negative", c.SandboxCPUTime)
	case c.SandboxCPUTime%time.Second != 0:
		return fmt.Errorf("CHATD_SANDBOX_CPU_TIME (-sandbox-cpu-time) is %s; use whole seconds", c.SandboxCPUTime)
	case c.SandboxProcesses < 0:
		return fmt.Errorf("CHATD_SANDBOX_PROCESSES (-sandbox-processes) is %d; it must not be negative", c.SandboxProcesses)
	case c.SandboxOpenFiles < 0 || (c.SandboxOpenFiles > 0 && c.SandboxOpenFiles < minSandboxOpenFiles):
		return fmt.Errorf("CHATD_SANDBOX_OPEN_FILES (-sandbox-open-files) is %d; use 0 (chatd's own limit) or at least %d, which a shell's pipelines need", c.SandboxOpenFiles, minSandboxOpenFiles)
	case c.SandboxMemory < 0 || c.SandboxTotalMemory < 0 || c.SandboxFileSize < 0 || c.SandboxDisk < 0 || c.SandboxTmpSize < 0:
		return errors.New("CHATD_SANDBOX_MEMORY, CHATD_SANDBOX_TOTAL_MEMORY, CHATD_SANDBOX_FILE_SIZE, CHATD_SANDBOX_DISK and CHATD_SANDBOX_TMP_SIZE must not be negative")
	case c.ContextTokens < 1000:
		return fmt.Errorf("CHATD_CONTEXT_TOKENS (-context-tokens) is %d; it must be at least 1000", c.ContextTokens)
	case c.MaxTokens < 0:
		return fmt.Errorf("CHATD_MAX_TOKENS (-max-tokens) is %d; it must not be negative", c.MaxTokens)
	case c.ModelTimeout <= 0:
		return fmt.Errorf("CHATD_MODEL_TIMEOUT (-model-timeout) is %s; it must be positive", c.ModelTimeout)
	}
	if err := c.validateAuth(); err != nil {
		return err
	}
	if err := c.validateWebhooks(); err != nil {
		return err
	}
	return c.validateAgent()
}

// validateAuth checks the authentication settings: no anonymous access on a public
// address unless asked for, and a key for JWTs.
func (c Config) validateAuth() error {
	switch c.Auth {
	case AuthNone:
		if c.JWTSecret != "" || c.JWKSURL != "" || c.JWTIssuer != "" || c.JWTAudience != "" {
			return errors.New("CHATD_JWT_SECRET, CHATD_JWKS_URL, CHATD_JWT_ISSUER or CHATD_JWT_AUDIENCE is set but CHATD_AUTH is none: set CHATD_AUTH=jwt to check tokens")
		}
		if c.AuthNoneOnPublic {
			break
		}
		if why := notLoopback(c.Addr); why != "" {
			return fmt.Errorf("CHATD_ADDR (-addr) is %s, %s, and CHATD_AUTH is none: anyone who can reach it would use chatd as the same anonymous user. "+
				"Set CHATD_AUTH=jwt with CHATD_JWT_SECRET or CHATD_JWKS_URL, listen on 127.0.0.1, or, behind a proxy that authenticates, set CHATD_AUTH_NONE_ON_PUBLIC=yes", c.Addr, why)
		}
	case AuthJWT:
		switch {
		case c.JWTSecret == "" && c.JWKSURL == "":
			return errors.New("CHATD_AUTH is jwt but neither CHATD_JWT_SECRET (an HMAC key) nor CHATD_JWKS_URL (-jwks-url, the identity provider's keys) is set")
		case c.JWTSecret != "" && c.JWKSURL != "":
			return errors.New("CHATD_AUTH is jwt with both CHATD_JWT_SECRET and CHATD_JWKS_URL set: use one")
		case c.JWKSURL != "" && c.JWTAudience == "":
			// An identity provider's keys sign tokens for all of its customers' apps: without
			// an audience, anyone's token for any app would be a chatd user.
			return errors.New("CHATD_AUTH is jwt with CHATD_JWKS_URL but CHATD_JWT_AUDIENCE is not set: an identity provider signs tokens for other apps with the same keys; set the audience chatd's tokens carry (and CHATD_JWT_ISSUER)")
		case c.JWTSecret != "" && len(c.JWTSecret) < auth.MinSecretBytes:
			return fmt.Errorf("CHATD_JWT_SECRET is %d bytes; use at least %d random bytes (e.g. openssl rand -base64 32)", len(c.JWTSecret), auth.MinSecretBytes)
		}
		if err := checkURL("CHATD_JWKS_URL (-jwks-url)", c.JWKSURL); err != nil {
			return err
		}
	default:
		return fmt.Errorf("CHATD_AUTH (-auth) is %q; use none or jwt", c.Auth)
	}
	return nil
}

// lookupIPAddr resolves a host name of CHATD_ADDR; tests replace it.
var lookupIPAddr = net.DefaultResolver.LookupIPAddr

// resolveTimeout bounds that resolution: start-up does not wait long on a DNS server.
const resolveTimeout = 3 * time.Second

// notLoopback says why addr (host:port) does not listen on loopback addresses only
// (127.0.0.0/8, ::1), or returns "" when it does. An empty host listens on every
// interface. A host name, localhost too, is resolved as the listener will resolve it,
// and every address must be loopback: /etc/hosts or DNS may map any name anywhere.
func notLoopback(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if host == "" {
		return "which listens on every interface"
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Unmap().IsLoopback() {
			return ""
		}
		return "which is not a loopback address"
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	addrs, err := lookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Sprintf("whose host name does not resolve (%v), so it is not known to be a loopback address", err)
	}
	if len(addrs) == 0 {
		return "whose host name resolves to no address, so it is not known to be a loopback address"
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); !ok || !ip.Unmap().IsLoopback() {
			return fmt.Sprintf("whose host name resolves to %s, which is not a loopback address", a.IP)
		}
	}
	return ""
}

// validateAgent checks the model provider's settings.
// validateWebhooks checks the webhook settings: a URL goes with a secret of the
// Standard Webhooks form, and a secret with a URL.
func (c Config) validateWebhooks() error {
	switch {
	case c.WebhookURL == "" && c.WebhookSecret != "":
		return errors.New("CHATD_WEBHOOK_SECRET is set but CHATD_WEBHOOK_URL (-webhook-url) is not: give the URL that receives the events")
	case c.WebhookURL == "":
		return nil
	case c.WebhookSecret == "":
		return errors.New("CHATD_WEBHOOK_URL is set but CHATD_WEBHOOK_SECRET (-webhook-secret) is not: every event is signed; make one with: echo whsec_$(head -c 32 /dev/urandom | base64)")
	}
	if err := checkURL("CHATD_WEBHOOK_URL (-webhook-url)", c.WebhookURL); err != nil {
		return err
	}
	if _, err := webhook.ParseSecret(c.WebhookSecret); err != nil {
		return fmt.Errorf("CHATD_WEBHOOK_SECRET (-webhook-secret): %w", err)
	}
	return nil
}

func (c Config) validateAgent() error {
	var (
		example, baseVar, key, base string
		noKey                       string // what to say when neither key nor base URL is set
	)
	if c.Agent != AgentHTTP && (c.AgentURL != "" || c.AgentProtocol != "" || c.AgentForwardToken) {
		return fmt.Errorf("CHATD_AGENT_URL, CHATD_AGENT_PROTOCOL and CHATD_AGENT_FORWARD_TOKEN apply to CHATD_AGENT=http only (CHATD_AGENT is %s)", c.Agent)
	}
	switch c.Agent {
	case AgentHTTP:
		if c.AgentURL == "" {
			return errors.New("CHATD_AGENT is http but CHATD_AGENT_URL (-agent-url) is not set: give the agent's endpoint, e.g. http://localhost:3000/api/chat")
		}
		if err := checkURL("CHATD_AGENT_URL (-agent-url)", c.AgentURL); err != nil {
			return err
		}
		if c.AgentProtocol != "aisdk" && c.AgentProtocol != "agui" {
			return fmt.Errorf("CHATD_AGENT_PROTOCOL (-agent-protocol) is %q; use aisdk (an AI SDK route) or agui (an AG-UI agent)", c.AgentProtocol)
		}
		if c.Model != "" {
			return fmt.Errorf("CHATD_MODEL (-model) is %q but CHATD_AGENT is http: the agent picks its model", c.Model)
		}
		return nil
	case AgentDemo, AgentSynth:
		if c.Model != "" {
			return fmt.Errorf("CHATD_MODEL (-model) is %q but CHATD_AGENT is %s: set CHATD_AGENT=openai or anthropic to use it", c.Model, c.Agent)
		}
	case AgentOpenAI:
		example, baseVar, key, base = "gpt-4.1-mini, or llama3.2 on Ollama", "OPENAI_BASE_URL (-openai-base-url)", c.OpenAIAPIKey, c.OpenAIBaseURL
		noKey = "CHATD_AGENT is openai with OpenAI's own API but OPENAI_API_KEY is not set; for a local server set OPENAI_BASE_URL, e.g. http://localhost:11434/v1"
	case AgentAnthropic:
		example, baseVar, key, base = "claude-sonnet-4-5", "ANTHROPIC_BASE_URL (-anthropic-base-url)", c.AnthropicAPIKey, c.AnthropicBaseURL
		noKey = "CHATD_AGENT is anthropic but ANTHROPIC_API_KEY is not set"
	default:
		return fmt.Errorf("CHATD_AGENT (-agent) is %q; use demo, openai, anthropic or http (or synth for benchmarks)", c.Agent)
	}
	if c.Agent != AgentDemo && c.Agent != AgentSynth {
		switch {
		case c.Model == "":
			return fmt.Errorf("CHATD_AGENT is %s but CHATD_MODEL (-model) is not set: name the model, e.g. %s", c.Agent, example)
		case key == "" && base == "":
			return errors.New(noKey)
		}
		if err := checkURL(baseVar, base); err != nil {
			return err
		}
	}
	if c.ThinkingBudget != 0 && c.Agent != AgentAnthropic {
		return errors.New("CHATD_THINKING_BUDGET (-thinking-budget) applies to CHATD_AGENT=anthropic only")
	}
	if c.ThinkingBudget < 0 {
		return fmt.Errorf("CHATD_THINKING_BUDGET (-thinking-budget) is %d; it must not be negative", c.ThinkingBudget)
	}
	return nil
}

// checkURL accepts an empty value or an absolute http(s) URL.
func checkURL(name, v string) error {
	if v == "" {
		return nil
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%s is %q; use an http:// or https:// URL", name, v)
	}
	return nil
}

// envDefaults reads typed defaults from the environment, keeping the first bad value.
type envDefaults struct {
	getenv func(string) string
	err    error
}

func (e *envDefaults) str(key, def string) string {
	if v := e.getenv(key); v != "" {
		return v
	}
	return def
}

func (e *envDefaults) int(key string, def int) int {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		e.fail(fmt.Errorf("%s=%q is not a whole number", key, v))
		return def
	}
	return n
}

func (e *envDefaults) rate(key string, def rate.Limit) rate.Limit {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	r, err := parseRate(v)
	if err != nil {
		e.fail(fmt.Errorf("%s=%q: %w", key, v, err))
		return def
	}
	return r
}

func (e *envDefaults) onOff(key string, def bool) bool {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	b, ok := parseOnOff(v)
	if !ok {
		e.fail(fmt.Errorf("%s=%q: use on or off", key, v))
		return def
	}
	return b
}

func (e *envDefaults) duration(key string, def time.Duration) time.Duration {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		e.fail(fmt.Errorf("%s=%q is not a duration (use e.g. 30ms, 5m)", key, v))
		return def
	}
	return d
}

func (e *envDefaults) offDuration(key string, def time.Duration) time.Duration {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	d, err := parseOffDuration(v)
	if err != nil {
		e.fail(fmt.Errorf("%s=%q: %w", key, v, err))
		return def
	}
	return d
}

func (e *envDefaults) bytes(key string, def int) int {
	return e.bytesUpTo(key, def, maxBytes)
}

func (e *envDefaults) bytesUpTo(key string, def, most int) int {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	n, err := parseBytesUpTo(v, most)
	if err != nil {
		e.fail(fmt.Errorf("%s=%q: %w", key, v, err))
		return def
	}
	return n
}

func (e *envDefaults) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// onOff is a boolean flag.Value that also takes on and off (-shell-tool, -shell-tool=on).
type onOff struct{ p *bool }

func (o onOff) IsBoolFlag() bool { return true }

func (o onOff) String() string {
	if o.p != nil && *o.p {
		return "on"
	}
	return "off"
}

func (o onOff) Set(s string) error {
	v, ok := parseOnOff(s)
	if !ok {
		return errors.New("use on or off")
	}
	*o.p = v
	return nil
}

func parseOnOff(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "on", "true", "1", "yes":
		return true, true
	case "off", "false", "0", "no":
		return false, true
	}
	return false, false
}

// rateValue is a flag.Value for rates such as 20/s, 600/m, 3600/h or off (rate.Inf).
type rateValue struct{ p *rate.Limit }

func (r rateValue) String() string {
	if r.p == nil {
		return ""
	}
	if *r.p == rate.Inf {
		return "off"
	}
	return strconv.FormatFloat(float64(*r.p), 'g', -1, 64) + "/s"
}

func (r rateValue) Set(s string) error {
	l, err := parseRate(s)
	if err != nil {
		return err
	}
	*r.p = l
	return nil
}

// parseRate reads a positive number of events per second, minute or hour ("20/s",
// "600/m", "3600/h"; a bare number is per second), or off.
func parseRate(s string) (rate.Limit, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "off" {
		return rate.Inf, nil
	}
	per := time.Second
	if n, unit, ok := strings.Cut(t, "/"); ok {
		switch strings.TrimSpace(unit) {
		case "s":
		case "m":
			per = time.Minute
		case "h":
			per = time.Hour
		default:
			return 0, errors.New("not a rate (use e.g. 20/s, 600/m, 3600/h or off)")
		}
		t = strings.TrimSpace(n)
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n <= 0 {
		return 0, errors.New("not a positive rate (use e.g. 20/s, 600/m, 3600/h or off)")
	}
	return rate.Limit(n / per.Seconds()), nil
}

// offDuration is a flag.Value for a duration that may be off (0): a Go duration (50ms,
// 12h), whole days (7d), or off. -workspace-retention (off: for good) and -stream-sync
// (off: no stream log).
// coalesceFlag is -coalesce-deltas: adaptive, off (0), or a duration.
type coalesceFlag struct{ p *time.Duration }

func (f coalesceFlag) String() string {
	switch {
	case f.p == nil:
		return ""
	case *f.p == conversation.CoalesceAdaptive:
		return "adaptive"
	case *f.p == 0:
		return "off"
	}
	return f.p.String()
}

func (f coalesceFlag) Set(s string) error {
	d, err := parseCoalesce(s)
	if err != nil {
		return err
	}
	*f.p = d
	return nil
}

// parseCoalesce reads CHATD_COALESCE_DELTAS: adaptive, off, or a duration.
func parseCoalesce(s string) (time.Duration, error) {
	switch strings.TrimSpace(s) {
	case "adaptive":
		return conversation.CoalesceAdaptive, nil
	case "off":
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not adaptive, off or a duration such as 25ms", s)
	}
	return d, nil
}

func (e *envDefaults) coalesce(key string, def time.Duration) time.Duration {
	v := e.getenv(key)
	if v == "" {
		return def
	}
	d, err := parseCoalesce(v)
	if err != nil {
		e.fail(fmt.Errorf("%s=%q: %w", key, v, err))
		return def
	}
	return d
}

type offDuration struct{ p *time.Duration }

// String prints whole days as days, as -help shows the default.
func (r offDuration) String() string {
	switch {
	case r.p == nil:
		return ""
	case *r.p == 0:
		return "off"
	case *r.p%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(*r.p/(24*time.Hour)), 10) + "d"
	}
	return r.p.String()
}

func (r offDuration) Set(s string) error {
	d, err := parseOffDuration(s)
	if err != nil {
		return err
	}
	*r.p = d
	return nil
}

// parseOffDuration reads a duration (50ms, 12h), a whole number of days (7d), or off (0).
// Days are not Go durations, but retentions are counted in them.
func parseOffDuration(s string) (time.Duration, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "off" {
		return 0, nil
	}
	if n, ok := strings.CutSuffix(t, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days < 0 || days > math.MaxInt64/int64(24*time.Hour) {
			return 0, errors.New("not a duration (use e.g. 7d, 12h, 50ms or off)")
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, errors.New("not a duration (use e.g. 7d, 12h, 50ms or off)")
	}
	return d, nil
}

// byteSize is a flag.Value for sizes such as 4096, 64KiB or 4MiB.
type byteSize struct{ p *int }

// String prints the size with the largest binary unit that divides it, as -help shows it.
func (b byteSize) String() string {
	if b.p == nil {
		return ""
	}
	n := *b.p
	for _, u := range []struct {
		name string
		size int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.Itoa(n/u.size) + u.name
		}
	}
	return strconv.Itoa(n)
}

func (b byteSize) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

// largeSize is a byteSize up to maxLargeBytes, for the sandbox's limits.
type largeSize struct{ byteSize }

// maxLargeBytes bounds a largeSize: 1TiB, or on a 32-bit platform what an int holds.
const maxLargeBytes = min(1<<40, math.MaxInt)

func (b largeSize) Set(s string) error {
	n, err := parseBytesUpTo(s, maxLargeBytes)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

// parseBytes reads a byte count with an optional binary suffix: K/KiB, M/MiB, G/GiB
// (case-insensitive, B optional), up to 2GiB (maxBytes).
func parseBytes(s string) (int, error) {
	return parseBytesUpTo(s, maxBytes)
}

// maxBytes bounds a byte size: 2GiB (less one byte on a 32-bit platform, where an int
// holds no more).
const maxBytes = min(1<<31, math.MaxInt)

func parseBytesUpTo(s string, most int) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10}, {"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}, {"b", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return 0, errors.New("not a byte size (use e.g. 65536, 64KiB, 4MiB)")
	}
	if n > most/mult {
		return 0, errors.New("byte size is too large")
	}
	return n * mult, nil
}
