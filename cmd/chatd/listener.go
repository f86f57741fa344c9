package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// listener is the HTTP server as a service: Start listens and serves, Stop stops
// accepting, waits for the requests in progress and for Serve to return. Upgraded
// WebSocket connections are no longer the HTTP server's: the transport closes them.
type listener struct {
	addr string
	srv  *http.Server

	ln net.Listener
	// bound is ln's address once it listens: read by other goroutines (the lease
	// services ask for the node's address while the listeners start).
	bound atomic.Pointer[net.TCPAddr]
	// served receives Serve's result.
	served chan error
}

func newListener(addr string, h http.Handler) *listener {
	return &listener{
		addr: addr,
		srv:  &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
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
	l.ln = ln
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		l.bound.Store(a)
	}
	l.served = make(chan error, 1)
	go func() { l.served <- l.srv.Serve(ln) }()
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
