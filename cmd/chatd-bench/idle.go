package main

import (
	"context"
	"time"
)

// idleResult is the idle-density measurement.
type idleResult struct {
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
	rss0, err := srv.rss()
	if err != nil {
		return err
	}
	m0, err := scrape(srv.addr)
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
	time.Sleep(3 * time.Second) // let start-up garbage be collected
	rss1, err := srv.rss()
	if err != nil {
		return err
	}
	m1, err := scrape(srv.addr)
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
	b.report.idle = &res
	closeAll(ss)
	return srv.stop()
}
