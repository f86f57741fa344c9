package transport

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/hub"
)

// Defaults for Config's zero fields.
const (
	DefaultReadLimit      = 256 << 10
	DefaultSendQueueBytes = 1 << 20
	DefaultHelloTimeout   = 15 * time.Second
	DefaultPingInterval   = 25 * time.Second
	DefaultPingTimeout    = 10 * time.Second
	DefaultCloseGrace     = 5 * time.Second

	defaultHistoryLimit = 50

	// Subprotocol is accepted when a client offers it.
	Subprotocol = "chatd.v1"
)

// Authenticator maps a hello's token (and the upgrade request) to a user id. Sessions
// belong to the user that created them.
type Authenticator interface {
	Authenticate(ctx context.Context, r *http.Request, token string) (userID string, err error)
}

// Anonymous accepts everyone as the same user, "". It is the default: chatd runs behind
// whatever authenticates its users, or alone on a developer's machine.
type Anonymous struct{}

// Authenticate returns "" and no error.
func (Anonymous) Authenticate(context.Context, *http.Request, string) (string, error) { return "", nil }

// Config configures the HTTP and WebSocket endpoints.
type Config struct {
	// Hub finds the conversation of a session. Required.
	Hub *hub.Hub
	// Ready reports whether the server can serve (the database answers); /readyz calls it.
	Ready func(context.Context) error
	// Auth authenticates hellos. Defaults to Anonymous.
	Auth Authenticator
	// Logger is the parent logger.
	Logger zerolog.Logger
	// Clock drives the hello deadline and pings. Defaults to the real clock.
	Clock clockwork.Clock

	// AllowedOrigins lists origins allowed besides the server's own, as host patterns
	// ("app.example.com", "*.example.com") or with a scheme ("https://app.example.com"),
	// matched with path.Match. Requests without an Origin header (non-browser clients)
	// are allowed.
	AllowedOrigins []string
	// ReadLimit is the largest client frame; a larger one closes the connection with 1009.
	ReadLimit int64
	// SendQueueBytes bounds each connection's outbound queue; a connection whose queue
	// overflows is closed with 4008.
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
	// Metrics counts connections and frames. nil counts into metrics nobody exposes.
	Metrics *Metrics
}

func (c Config) withDefaults() Config {
	if c.Auth == nil {
		c.Auth = Anonymous{}
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Metrics == nil {
		c.Metrics = discardMetrics()
	}
	if c.Ready == nil {
		c.Ready = func(context.Context) error { return nil }
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
	return c
}

func (c Config) validate() error {
	switch {
	case c.Hub == nil:
		return errors.New("transport config: Hub is required")
	case c.ReadLimit < 1024:
		return fmt.Errorf("transport config: ReadLimit %d is below 1024", c.ReadLimit)
	case c.SendQueueBytes < 1024:
		return fmt.Errorf("transport config: SendQueueBytes %d is below 1024", c.SendQueueBytes)
	case c.HelloTimeout < 0 || c.PingInterval < 0 || c.PingTimeout < 0 || c.CloseGrace < 0:
		return errors.New("transport config: durations must not be negative")
	}
	for _, p := range c.AllowedOrigins {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("transport config: allowed origin %q is not a valid pattern: %w", p, err)
		}
	}
	return nil
}

// Server serves /v1/ws, /healthz and /readyz.
type Server struct {
	cfg   Config
	log   zerolog.Logger
	clock clockwork.Clock

	mu       sync.Mutex
	conns    map[*conn]struct{}
	closing  bool
	handlers sync.WaitGroup
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Server{
		cfg:   cfg,
		log:   cfg.Logger.With().Str("component", "transport").Logger(),
		clock: cfg.Clock,
		conns: make(map[*conn]struct{}),
	}, nil
}

// Handler returns the HTTP handler of every endpoint.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ws", s.serveWS)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	return mux
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("shutting down\n"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Ready(ctx); err != nil {
		s.log.Warn().Err(err).Msg("not ready")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("database unavailable\n"))
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	// Origins are checked after the upgrade so a refused browser sees close code 1008
	// (the protocol's policy code) instead of a failed handshake it cannot inspect. No
	// frame is read from a refused connection.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols:       []string{Subprotocol},
		InsecureSkipVerify: true,
	})
	if err != nil {
		return // Accept has answered the request
	}
	defer ws.CloseNow()

	if !originAllowed(r, s.cfg.AllowedOrigins) {
		s.log.Info().Str("origin", r.Header.Get("Origin")).Msg("refused a connection from an origin that is not allowed")
		_ = ws.Close(websocket.StatusPolicyViolation, "origin not allowed")
		return
	}
	ws.SetReadLimit(s.cfg.ReadLimit)

	c := newConn(s, ws, r)
	if !s.track(c) {
		_ = ws.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	defer s.untrack(c)
	c.serve()
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	s.handlers.Add(1)
	s.cfg.Metrics.connectionsOpen.Inc()
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.cfg.Metrics.connectionsOpen.Dec()
	s.handlers.Done()
}

// Shutdown closes every connection with 1001 after its queued frames and waits for the
// handlers to return; when ctx ends first, the remaining connections are cut. Call it after
// the hub has stopped, so the final events of interrupted runs are queued before the close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for c := range s.conns {
		c.requestClose(websocket.StatusGoingAway, "server shutting down", true)
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
			c.cancel()
		}
		s.mu.Unlock()
		<-done
		return fmt.Errorf("close connections: %w", ctx.Err())
	}
}

// originAllowed allows requests without an Origin (non-browser clients), from the
// server's own host, and from the allowed patterns.
func originAllowed(r *http.Request, patterns []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}
