package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/rs/zerolog"

	"github.com/chatd/chatd/agent"
)

// Option changes what New builds.
type Option func(*options)

// options are New's options.
type options struct {
	tools      []agent.Tool
	model      agent.Model
	modelName  string
	log        *zerolog.Logger
	noListener bool
}

// WithTools offers the model these tools besides the built-in ones (current_time; shell
// with Config.ShellTool; demo_sandbox with the demo agent). A tool whose name is taken,
// by a built-in one or another of these, or is not a valid tool name, is New's error.
// Their calls run in the session's run, as the built-in tools' do: a tool that needs a
// person's approval says so in its spec (agent.ToolSpec.NeedsApproval).
func WithTools(tools ...agent.Tool) Option {
	return func(o *options) { o.tools = append(o.tools, tools...) }
}

// WithModel makes model answer instead of the provider Config.Agent names; name is
// stored on each run as its model (the Config's Agent and Model are then not used, but
// still checked). The model is shared by every run of the Server and called from many
// goroutines at once.
func WithModel(model agent.Model, name string) Option {
	return func(o *options) { o.model, o.modelName = model, name }
}

// WithLogger makes chatd log to log. By default it logs to standard error, at
// Config.LogLevel, in Config.LogFormat.
func WithLogger(log zerolog.Logger) Option {
	return func(o *options) { o.log = &log }
}

// WithoutListener makes Start listen on nothing public: the program serves Handler from
// its own http.Server. Config.Addr must then be the address that server listens on,
// with its port: chatd checks it (CHATD_AUTH=none is for loopback addresses), and it is
// the node's address for the other nodes of a cluster unless Config.NodeAddr says
// otherwise. The admin listener is not affected (Config.AdminAddr, or AdminOff).
func WithoutListener() Option {
	return func(o *options) { o.noListener = true }
}

// New checks cfg and builds chatd from it and opts: every part, connected to nothing and
// running nothing until Start. It returns an error when cfg is not valid (naming the
// setting by its variable, as ConfigFromEnv does), when a tool of WithTools is refused,
// or when a part cannot be built (the sandboxes' directory, bubblewrap for the shell
// tool). A Config built in Go starts from DefaultConfig.
func New(cfg Config, opts ...Option) (*Server, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if o.model != nil && o.modelName == "" {
		return nil, errors.New("WithModel: the model needs a name, which is stored on each run")
	}
	if o.noListener && cfg.NodeAddr == "" {
		if _, port, err := net.SplitHostPort(cfg.Addr); err != nil || port == "0" {
			return nil, fmt.Errorf("WithoutListener: Config.Addr is %q; give the host:port your server listens on (or set Config.NodeAddr)", cfg.Addr)
		}
	}
	log := o.log
	if log == nil {
		l, err := newLogger(cfg, os.Stderr)
		if err != nil {
			return nil, err
		}
		log = &l
	}
	s := newServer(cfg, *log)
	s.opts = o
	if err := s.build(); err != nil {
		return nil, err
	}
	return s, nil
}

// Run starts the Server, serves until ctx is done, then shuts it down gracefully with
// Config.ShutdownTimeout for each step (see Shutdown). It returns Start's error, after
// undoing what Start began, or Shutdown's.
func (m *Server) Run(ctx context.Context) error {
	if err := m.Start(ctx); err != nil {
		return errors.Join(err, m.Shutdown(context.WithoutCancel(ctx)))
	}
	<-ctx.Done()
	m.log.Info().Stringer("timeout", m.cfg.ShutdownTimeout).Msg("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ShutdownTimeout)
	defer cancel()
	if err := m.Shutdown(sctx); err != nil {
		return err
	}
	m.log.Info().Msg("stopped")
	return nil
}

// Handler is what the public listener serves: chatd's WebSocket (/v1/ws), its HTTP API
// (/v1/...), the AI SDK's endpoints, /healthz and /readyz, and the web app at every other
// path. It does not include what the admin listener serves (/metrics, /debug/pprof/),
// nor the listener's own limits: its connection limits (Config.MaxConns,
// MaxConnsPerAddr) and HTTP timeouts, which a program serving it sets on its own
// http.Server (HTTP timeouts that bound writes must spare the streams). It answers only
// once Start has returned, and Shutdown closes its WebSockets and streams; a program
// serving it shuts its own server down after Shutdown. Mount it at the root: its paths
// are absolute.
func (m *Server) Handler() http.Handler { return m.srv.Handler() }
