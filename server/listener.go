package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chatd/chatd/transport"
)

// The HTTP server's timeouts (CHATD_HTTP_*_TIMEOUT): a request has this long to arrive,
// body included; an answer that is not a stream this long to be written; a kept-alive
// connection waits this long for its next request. Headers alone get headerTimeout at
// most, so a client that trickles them is let go sooner.
const (
	defaultHTTPReadTimeout  = 60 * time.Second
	defaultHTTPWriteTimeout = 60 * time.Second
	defaultHTTPIdleTimeout  = 60 * time.Second
	headerTimeout           = 10 * time.Second
)

// defaultMaxSessionsPerUser is CHATD_MAX_SESSIONS_PER_USER's default.
const defaultMaxSessionsPerUser = 10000

// defaultMaxConns is CHATD_MAX_CONNS's default: three quarters of the process's
// open-file limit (which Go raises to its hard limit at start), so that a flood of
// connections leaves descriptors for the database, the sandboxes' pipes and the relay.
func defaultMaxConns() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return 768
	}
	return int(max(64, min(lim.Cur, 1<<22)*3/4))
}

// httpLimits are a listener's timeouts and connection limits.
type httpLimits struct {
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	Conns                                  transport.ConnLimits
}

// listener is the HTTP server as a service: Start listens and serves, Stop stops
// accepting, waits for the requests in progress and for Serve to return. Upgraded
// WebSocket connections are no longer the HTTP server's: the transport closes them.
type listener struct {
	addr   string
	srv    *http.Server
	limits httpLimits

	ln net.Listener
	// bound is ln's address once it listens: read by other goroutines (the lease
	// services ask for the node's address while the listeners start).
	bound atomic.Pointer[net.TCPAddr]
	// served receives Serve's result.
	served chan error
}

func newListener(addr string, h http.Handler, l httpLimits) *listener {
	return &listener{
		addr:   addr,
		limits: l,
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: min(headerTimeout, l.ReadTimeout),
			ReadTimeout:       l.ReadTimeout,
			WriteTimeout:      l.WriteTimeout,
			IdleTimeout:       l.IdleTimeout,
		},
	}
}

// Addr is the address it listens on, once started.
func (l *listener) Addr() net.Addr { return l.ln.Addr() }

// Bound is the address it listens on, nil before it has started. Safe from any
// goroutine.
func (l *listener) Bound() *net.TCPAddr { return l.bound.Load() }

func (l *listener) Start(ctx context.Context) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", l.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", l.addr, err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		l.bound.Store(a)
	}
	l.ln = transport.LimitListener(ln, l.limits.Conns)
	l.served = make(chan error, 1)
	go func() { l.served <- l.srv.Serve(l.ln) }()
	return nil
}

// Stop shuts the server down; requests still running when ctx ends are cut.
func (l *listener) Stop(ctx context.Context) error {
	var errs []error
	if err := l.srv.Shutdown(ctx); err != nil {
		errs = append(errs, err, l.srv.Close())
	}
	if err := <-l.served; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
