package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// idleResult is the idle-density measurement.
type idleResult struct {
	target           string // "" for chatd
	conns, sessions  int
	rssPerConn       float64 // bytes
	heapPerConn      float64
	stackPerConn     float64
	goroutinesPerCon float64
	connsOpen        float64 // as chatd's own gauge says
}

// idleDensity opens N subscribed connections that then do nothing, and divides what the
// server's memory and goroutines grew by N.
func (b *bench) idleDensity(ctx context.Context) error {
	o := b.opts
	srv, err := b.startChatd(ctx, "chatd (idle)", "")
	if err != nil {
		return err
	}
	defer srv.kill()
	time.Sleep(time.Second)
	if err := forceGC(srv); err != nil {
		return err
	}
	rss0, err := srv.rss()
	if err != nil {
		return err
	}
	m0, err := scrape(srv.adminAddr)
	if err != nil {
		return err
	}
	g := &gen{}
	sessions := (o.idle + o.idleTabs - 1) / o.idleTabs
	logf("idle: opening %d connections (%d sessions)", o.idle, sessions)
	ss, err := openSessions(ctx, g, srv.addr, sessions, o.idleTabs)
	if err != nil {
		return err
	}
	// Collect what answering 10,000 hellos left behind, as any later activity would, so
	// what is measured is what the connections hold. (Stacks shrink during collections.)
	time.Sleep(time.Second)
	for range 4 {
		if err := forceGC(srv); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second)
	rss1, err := srv.rss()
	if err != nil {
		return err
	}
	m1, err := scrape(srv.adminAddr)
	if err != nil {
		return err
	}
	n := float64(len(allTabs(ss)))
	res := idleResult{
		conns:            len(allTabs(ss)),
		sessions:         sessions,
		rssPerConn:       float64(rss1-rss0) / n,
		heapPerConn:      (m1.sum("go_memstats_heap_inuse_bytes") - m0.sum("go_memstats_heap_inuse_bytes")) / n,
		stackPerConn:     (m1.sum("go_memstats_stack_inuse_bytes") - m0.sum("go_memstats_stack_inuse_bytes")) / n,
		goroutinesPerCon: (m1.sum("go_goroutines") - m0.sum("go_goroutines")) / n,
		connsOpen:        m1.sum("chatd_connections_open"),
	}
	logf("idle: %.1f KiB RSS and %.2f goroutines per connection", res.rssPerConn/1024, res.goroutinesPerCon)
	if o.profileDir != "" {
		saveProfile(srv, o.profileDir, "/debug/pprof/heap", "heap")
		saveProfile(srv, o.profileDir, "/debug/pprof/goroutine", "goroutine")
	}
	b.report.idle = &res
	closeAll(ss)
	return srv.stop()
}

// forceGC runs a garbage collection in the server (through pprof's heap endpoint).
func forceGC(srv *server) error {
	resp, err := http.Get("http://" + srv.adminAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("force a collection: %s", resp.Status)
	}
	return nil
}
