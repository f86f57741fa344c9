package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Endpoint is a transport's handler of long-lived connections (transport/ws's Server).
type Endpoint interface {
	http.Handler
	// Shutdown closes every connection after what is queued on it and waits for them to
	// end; when ctx ends first, it cuts the rest and returns ctx's error. Connections
	// that arrive afterwards are turned away.
	Shutdown(ctx context.Context) error
}

// Config configures the HTTP surface.
type Config struct {
	// WebSocket serves GET /v1/ws (a *ws.Server). Required.
	WebSocket Endpoint
	// AISDK serves the Vercel AI SDK's chat transport under /v1/aisdk/ (an
	// *aisdk.Handler); nil for none.
	AISDK http.Handler
	// API serves the HTTP JSON API, everything under /v1/sessions (an *httpapi.API).
	// Optional.
	API http.Handler
	// Ready reports whether the server can serve (the database answers); /readyz calls it.
	Ready func(context.Context) error
	// App, when set, serves every path that is not the server's own (the browser app,
	// package web). Paths under /v1/ and /healthz, /readyz stay the server's: an unknown
	// one is a plain 404 whatever App would say.
	App http.Handler
	// Logger is the parent logger.
	Logger zerolog.Logger
}

// Server serves chatd's HTTP surface: /v1/ws (the WebSocket endpoint it is given), the
// JSON API under /v1/sessions (the API it is given), /healthz, /readyz, and the app at
// every other path when it is given one.
type Server struct {
	cfg Config
	log zerolog.Logger

	mu      sync.Mutex
	closing bool
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.WebSocket == nil {
		return nil, errors.New("transport config: WebSocket is required")
	}
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) error { return nil }
	}
	return &Server{cfg: cfg, log: cfg.Logger.With().Str("component", "transport").Logger()}, nil
}

// Handler returns the HTTP handler of every endpoint.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/ws", s.cfg.WebSocket)
	if s.cfg.API != nil {
		mux.Handle("/v1/sessions", s.cfg.API)
		mux.Handle("/v1/sessions/", s.cfg.API)
		mux.Handle("/v1/users/", s.cfg.API)
	}
	if s.cfg.AISDK != nil {
		mux.Handle("/v1/aisdk/", s.cfg.AISDK)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	if s.cfg.App != nil {
		mux.Handle("/", appOnly(s.cfg.App))
	}
	return mux
}

// appOnly keeps the server's own paths from the app: a request under /v1/, /healthz or
// /readyz that no route takes (an unknown path, another method) reaches "/", and is a
// plain 404 there rather than the app's page.
func appOnly(app http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if p == "/v1" || strings.HasPrefix(p, "/v1/") || p == "/healthz" || p == "/readyz" {
			http.NotFound(w, r)
			return
		}
		app.ServeHTTP(w, r)
	})
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

// Shutdown makes /readyz answer 503 and closes every connection with 1001 after its
// queued frames, waiting for them to end; when ctx ends first, the remaining connections
// are cut. Call it after the hub has stopped, so the final events of interrupted runs
// are queued before the close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	return s.cfg.WebSocket.Shutdown(ctx)
}
