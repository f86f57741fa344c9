package main

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// The peer is a real-time server built on Centrifuge (github.com/centrifugal/centrifuge,
// the engine inside Centrifugo), in its own module (bench/centrifuge, built to
// bin/chatd-peer by make bench). It streams the baseline's frames on the same schedule,
// published with history to one channel per session, and its clients recover after a
// reconnect from their offset and epoch. It is measured by the same clients, in the same
// windows, as chatd and the baseline (-peer; skipped when empty).

// peerName is the peer's row in every table.
const peerName = "centrifuge"

// startPeer starts the peer process (-peer). Its one listener serves the WebSocket,
// /metrics and /debug/pprof/, so it is also the server's admin address.
func (b *bench) startPeer(ctx context.Context) (*server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logf("starting the Centrifuge peer")
	srv, err := startServer(ctx, peerName, addr, "/healthz", nil, b.opts.peer, "-addr", addr)
	if err != nil {
		return nil, err
	}
	srv.adminAddr, srv.peer = addr, true
	return srv, nil
}

// openPeerSessions connects S sessions of T tabs each to the peer, every tab subscribed to
// its session's channel. The harness names the sessions (a channel needs no creating).
func openPeerSessions(ctx context.Context, g *gen, addr string, s, t int) ([]*session, error) {
	sessions := make([]*session, s)
	for i := range sessions {
		sess := &session{id: uuid.NewString()}
		for range t {
			sess.tabs = append(sess.tabs, &tab{g: g, sess: sess, addr: addr, cf: &cfState{channel: peerChannel(sess.id)}})
		}
		sessions[i] = sess
	}
	return connectAll(ctx, sessions)
}

// openFor returns how to open sessions on srv: the peer's clients speak Centrifuge's
// protocol, chatd's and the baseline's chatd's.
func openFor(srv *server) func(ctx context.Context, g *gen, addr string, s, t int) ([]*session, error) {
	if srv.peer {
		return openPeerSessions
	}
	return openSessions
}

// peerFanout measures the peer's fan-out (and its reconnect storm, on the same sessions,
// when the storm scenario runs), with content(extra) asking for runs long enough.
func (b *bench) peerFanout(ctx context.Context, content func(extra time.Duration) string) error {
	o := b.opts
	storm := o.scenarios["storm"]
	// fanout also runs for the snapshot storm alone, which the peer has no part in.
	if o.peer == "" || !o.scenarios["fanout"] && !storm {
		return nil
	}
	srv, err := b.startPeer(ctx)
	if err != nil {
		return err
	}
	extra := time.Duration(0)
	if storm {
		extra = o.stormDown + o.stormSpread + 15*time.Second
	}
	row, err := b.fanoutOne(ctx, srv, content(extra), storm)
	if err != nil {
		srv.kill()
		return err
	}
	if err := srv.stop(); err != nil {
		return err
	}
	if o.scenarios["fanout"] {
		b.report.fanout = append(b.report.fanout, row)
	}
	return nil
}

// peerIdle is the idle density of the peer: N connections, one channel each, subscribed
// with recovery, doing nothing; measured as chatd's are.
func (b *bench) peerIdle(ctx context.Context) error {
	if b.opts.peer == "" {
		return nil
	}
	srv, err := b.startPeer(ctx)
	if err != nil {
		return err
	}
	defer srv.kill()
	res, err := b.measureIdle(ctx, srv, "centrifuge_client_connections_inflight", nil, false)
	if err != nil {
		return err
	}
	res.target = peerName
	b.report.peerIdle = res
	return nil
}
