package ws

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/transport"
)

// Defaults for Config's zero fields.
const (
	DefaultReadLimit = 256 << 10
	// CompressionThreshold is the smallest message compressed (Config.Compression): a
	// token's delta, a few hundred bytes, would gain little without context takeover.
	CompressionThreshold     = 512
	DefaultSendQueueBytes    = transport.DefaultSendQueueBytes
	DefaultHelloTimeout      = 15 * time.Second
	DefaultPingInterval      = 25 * time.Second
	DefaultPingTimeout       = 10 * time.Second
	DefaultCloseGrace        = 5 * time.Second
	DefaultMaxQueuedCommands = 16
	DefaultCommandRate       = rate.Limit(20)
	DefaultCommandBurst      = 40
	DefaultMaxConnsPerUser   = 64
	DefaultMaxConnsPerAddr   = 256
	DefaultHandshakeRate     = rate.Limit(20)
	DefaultHandshakeBurst    = 100

	defaultHistoryLimit = 50

	// Subprotocol is accepted when a client offers it.
	Subprotocol = "chatd.v1"
)

// Config configures the WebSocket endpoint.
type Config struct {
	// Hub finds the conversation of a session. Required.
	Hub *hub.Hub
	// Auth authenticates hellos. Defaults to transport.Anonymous.
	Auth transport.Authenticator
	// Logger is the parent logger.
	Logger zerolog.Logger
	// Clock drives the hello deadline, pings and the close grace period. Defaults to the
	// real clock.
	Clock clockwork.Clock

	// AllowedOrigins lists origins allowed besides the server's own, as host patterns
	// ("app.example.com", "*.example.com") or with a scheme ("https://app.example.com"),
	// matched with path.Match. Requests without an Origin header (non-browser clients)
	// are allowed.
	AllowedOrigins []string
	// ReadLimit is the largest client frame; a larger one closes the connection with 1009.
	ReadLimit int64
	// Compression negotiates permessage-deflate with a client that offers it
	// (CHATD_COMPRESSION), without context takeover: each message of at least
	// CompressionThreshold bytes (snapshots, history pages, long tool output) is
	// compressed on its own, and a connection keeps no compressor between messages.
	Compression bool
	// SendQueueBytes bounds each connection's outbound queue (the transport.Outbox
	// budget); a connection whose queue overflows is closed with 4008.
	SendQueueBytes int
	// HelloTimeout is how long a connection may take to send hello (4000 after it).
	HelloTimeout time.Duration
	// PingInterval and PingTimeout: the server pings this often and closes a connection
	// that has not answered within the timeout.
	PingInterval time.Duration
	PingTimeout  time.Duration
	// CloseGrace is how long a closing connection may take to flush and finish the close
	// handshake before it is cut.
	CloseGrace time.Duration
	// MaxQueuedCommands bounds the commands of one connection that wait for its worker or
	// are being handled; one more is answered with error busy at once.
	MaxQueuedCommands int
	// CommandRate and CommandBurst are each connection's token bucket of commands (every
	// frame it sends counts); a command over it is answered error rate_limited and not
	// handled. rate.Inf turns it off.
	CommandRate  rate.Limit
	CommandBurst int
	// MaxConnsPerUser bounds the connections of one user, counted from a successful
	// authentication in hello; one more is closed with 4029. The anonymous user ("") is
	// not limited. Negative turns it off. Ignored when Users is set.
	MaxConnsPerUser int
	// Users counts each user's connections against a limit shared with the node's other
	// transports (the AI SDK's streams): nil counts WebSockets alone, up to
	// MaxConnsPerUser.
	Users *transport.UserStreams
	// MaxConnsPerAddr bounds the connections from one remote address (RemoteHost); one
	// more is closed with 4029 right after the upgrade. Negative turns it off.
	MaxConnsPerAddr int
	// HandshakeRate and HandshakeBurst are each remote address's token bucket of upgrade
	// requests; one over it is answered HTTP 429 with Retry-After. rate.Inf turns it off.
	HandshakeRate  rate.Limit
	HandshakeBurst int
	// RemoteHost is the address the per-address limits count a request under. Defaults
	// to the host of r.RemoteAddr: behind a reverse proxy, the proxy's address. Tests
	// and embedders that know better set it.
	RemoteHost func(r *http.Request) string
	// Metrics counts connections and frames. nil counts nothing.
	Metrics *transport.Metrics
	// Relay sends connections for sessions another live node holds to that node
	// (relay.go): after their hello, or as a whole when the upgrade's ?session= names
	// such a session. nil: one node, nothing is relayed.
	Relay *transport.Relay
}

func (c Config) withDefaults() Config {
	if c.Auth == nil {
		c.Auth = transport.Anonymous{}
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.ReadLimit == 0 {
		c.ReadLimit = DefaultReadLimit
	}
	if c.SendQueueBytes == 0 {
		c.SendQueueBytes = DefaultSendQueueBytes
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = DefaultHelloTimeout
	}
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.PingTimeout == 0 {
		c.PingTimeout = DefaultPingTimeout
	}
	if c.CloseGrace == 0 {
		c.CloseGrace = DefaultCloseGrace
	}
	if c.MaxQueuedCommands == 0 {
		c.MaxQueuedCommands = DefaultMaxQueuedCommands
	}
	if c.CommandRate == 0 {
		c.CommandRate = DefaultCommandRate
	}
	if c.CommandBurst == 0 {
		c.CommandBurst = DefaultCommandBurst
	}
	if c.MaxConnsPerUser == 0 {
		c.MaxConnsPerUser = DefaultMaxConnsPerUser
	}
	if c.MaxConnsPerAddr == 0 {
		c.MaxConnsPerAddr = DefaultMaxConnsPerAddr
	}
	if c.HandshakeRate == 0 {
		c.HandshakeRate = DefaultHandshakeRate
	}
	if c.HandshakeBurst == 0 {
		c.HandshakeBurst = DefaultHandshakeBurst
	}
	if c.RemoteHost == nil {
		c.RemoteHost = remoteHost
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Hub == nil:
		return errors.New("ws config: Hub is required")
	case c.ReadLimit < 1024:
		return fmt.Errorf("ws config: ReadLimit %d is below 1024", c.ReadLimit)
	case c.SendQueueBytes < 1024:
		return fmt.Errorf("ws config: SendQueueBytes %d is below 1024", c.SendQueueBytes)
	case c.HelloTimeout < 0 || c.PingInterval < 0 || c.PingTimeout < 0 || c.CloseGrace < 0:
		return errors.New("ws config: durations must not be negative")
	case c.MaxQueuedCommands < 0:
		return fmt.Errorf("ws config: MaxQueuedCommands %d is negative", c.MaxQueuedCommands)
	case c.CommandRate < 0 || c.HandshakeRate < 0:
		return errors.New("ws config: rates must not be negative")
	case c.CommandBurst < 1 || c.HandshakeBurst < 1:
		return errors.New("ws config: bursts must be at least 1")
	}
	for _, p := range c.AllowedOrigins {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("ws config: allowed origin %q is not a valid pattern: %w", p, err)
		}
	}
	return nil
}

// Server is the WebSocket endpoint, GET /v1/ws: a transport.Endpoint, mounted by
// transport.Server.
type Server struct {
	cfg   Config
	log   zerolog.Logger
	clock clockwork.Clock
	// out is shared by every connection's outbox.
	out transport.OutboxOptions

	mu       sync.Mutex
	conns    map[*conn]struct{}
	closing  bool
	handlers sync.WaitGroup
	// Connections per remote address (limits.go). Under mu.
	addrConns map[string]int
	// users counts connections per user (limits.go).
	users *transport.UserStreams

	// Handshake buckets per remote address (limits.go).
	hsMu       sync.Mutex
	handshakes map[string]*handshakeLimiter
	hsSwept    time.Time

	// proxies is cancelled by Shutdown: it cuts the upgrades proxied to other nodes.
	proxies     context.Context
	stopProxies context.CancelFunc
}

var _ transport.Endpoint = (*Server)(nil)

// New returns a Server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With().Str("component", "ws").Logger()
	users := cfg.Users
	if users == nil {
		users = transport.NewUserStreams(cfg.MaxConnsPerUser)
	}
	proxies, stopProxies := context.WithCancel(context.Background())
	return &Server{
		proxies:     proxies,
		stopProxies: stopProxies,
		cfg:         cfg,
		log:         log,
		clock:       cfg.Clock,
		out: transport.OutboxOptions{
			Format:        Format,
			EncodeCatchUp: EncodeCatchUp,
			Budget:        cfg.SendQueueBytes,
			CloseGrace:    cfg.CloseGrace,
			Clock:         cfg.Clock,
			Metrics:       cfg.Metrics,
			Logger:        log,
		},
		conns:      make(map[*conn]struct{}),
		addrConns:  make(map[string]int),
		users:      users,
		handshakes: make(map[string]*handshakeLimiter),
	}, nil
}

// ServeHTTP upgrades the request and serves the connection until it closes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Origins are checked after the upgrade so a refused browser sees close code 1008
	// (the protocol's policy code) instead of a failed handshake it cannot inspect. No
	// frame is read from a refused connection.
	host := s.cfg.RemoteHost(r)
	if ok, delay := s.allowHandshake(host); !ok {
		s.cfg.Metrics.RateLimited(transport.LimitHandshake)
		s.log.Debug().Str("remote", r.RemoteAddr).Msg("refused a handshake over its address's rate")
		refuseHandshake(w, delay)
		return
	}
	// The connection is the WebSocket's from here: its own pings and deadlines bound
	// it, not the HTTP server's timeouts (which the hijacked connection would keep).
	transport.Unbounded(w)
	if addr, ok := s.relayTarget(r); ok {
		s.proxyUpgrade(w, r, addr, host)
		return
	}
	s.serveHere(w, r, host)
}

// serveHere upgrades the request and serves the connection on this node (which relays
// it after its hello when another node holds its session). It returns once the
// connection is upgraded: the connection is served on a goroutine of its own, so
// net/http's connection goroutine (its stack, the request, its buffers) ends.
func (s *Server) serveHere(w http.ResponseWriter, r *http.Request, host string) {
	pongs := new(atomic.Int64)
	bw := &batchingWriter{ResponseWriter: w}
	opts := &websocket.AcceptOptions{
		Subprotocols:       []string{Subprotocol},
		InsecureSkipVerify: true,
		OnPongReceived:     func(context.Context, []byte) { pongs.Add(1) },
	}
	if s.cfg.Compression {
		opts.CompressionMode = websocket.CompressionNoContextTakeover
		opts.CompressionThreshold = CompressionThreshold
	}
	ws, err := websocket.Accept(bw, r, opts)
	if err != nil {
		return // Accept has answered the request
	}

	if !transport.OriginAllowed(r, s.cfg.AllowedOrigins) {
		s.log.Info().Str("origin", r.Header.Get("Origin")).Msg("refused a connection from an origin that is not allowed")
		_ = ws.Close(websocket.StatusPolicyViolation, "origin not allowed")
		_ = ws.CloseNow()
		return
	}
	ws.SetReadLimit(s.cfg.ReadLimit)

	c := newConn(s, ws, r)
	c.batch = bw.conn
	c.plain = w.Header().Get("Sec-WebSocket-Extensions") == ""
	c.pongs = pongs
	c.host = host
	if d, ok := s.track(c); !ok {
		if d == disconnectAddrConns {
			s.cfg.Metrics.RateLimited(transport.LimitAddrConns)
			s.log.Info().Str("remote", r.RemoteAddr).Msg("refused a connection over its address's connection limit")
		}
		_ = ws.Close(status(d), d.Reason)
		_ = ws.CloseNow()
		return
	}
	// From here writes made without a writer goroutine do not wait (WriteNow).
	c.batch.writeBehind(c.out.Kick)
	// Counted in s.handlers by track: Shutdown waits for this goroutine.
	go func() {
		defer ws.CloseNow()
		defer s.untrack(c)
		c.serve()
	}()
}

// track counts a new connection, unless the server is shutting down or the connection's
// address has MaxConnsPerAddr already: then it says how to close it.
func (s *Server) track(c *conn) (transport.Disconnect, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return transport.DisconnectShutdown, false
	}
	if s.cfg.MaxConnsPerAddr >= 0 && s.addrConns[c.host] >= s.cfg.MaxConnsPerAddr {
		return disconnectAddrConns, false
	}
	s.addrConns[c.host]++
	s.conns[c] = struct{}{}
	s.handlers.Add(1)
	s.cfg.Metrics.ConnectionOpened()
	return transport.Disconnect{}, true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if s.addrConns[c.host]--; s.addrConns[c.host] <= 0 {
		delete(s.addrConns, c.host)
	}
	s.mu.Unlock()
	s.cfg.Metrics.ConnectionClosed()
	s.handlers.Done()
}

// Shutdown closes every connection with 1001 after its queued frames and waits for the
// handlers to return; when ctx ends first, the remaining connections are cut.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.stopProxies()
	for c := range s.conns {
		c.out.Close(transport.DisconnectShutdown, true)
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() {
		s.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			c.cut()
		}
		s.mu.Unlock()
		<-done
		return fmt.Errorf("close connections: %w", ctx.Err())
	}
}
