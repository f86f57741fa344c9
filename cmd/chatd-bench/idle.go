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
	srv, err := b.startChatd(ctx, "chatd (idle)", "")
	if err != nil {
		return err
	}
	defer srv.kill()
	res, err := b.measureIdle(ctx, srv, "chatd_connections_open", nil, false)
	if err != nil {
		return err
	}
	b.report.idle = res
	if err := srv.stop(); err != nil {
		return err
	}
	if b.opts.compression {
		srv, err := b.startChatd(ctx, "chatd, compressed (idle)", "", "CHATD_COMPRESSION=on")
		if err != nil {
			return err
		}
		srv.compress = true
		res, err := b.measureIdle(ctx, srv, "chatd_connections_open", nil, false)
		if err != nil {
			srv.kill()
			return err
		}
		res.target = "chatd, compressed"
		b.report.idleCompressed = res
		if err := srv.stop(); err != nil {
			return err
		}
	}
	return b.idleHistories(ctx)
}

// idleHistories measures idle connections to sessions with a long finished conversation
// each (seedHistory), once with what a quiet session keeps in memory kept
// (CHATD_QUIET_RELEASE=off) and once released a second after the session is quiet (loaded, no run).
func (b *bench) idleHistories(ctx context.Context) error {
	o := b.opts
	if o.idleHistory <= 0 {
		return nil
	}
	for _, release := range []string{"off", "1s"} {
		dbURL, err := b.newDatabase(ctx)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("chatd, %d-turn histories, quiet release %s", o.idleHistory, release)
		srv, err := b.startChatd(ctx, name, dbURL, "CHATD_QUIET_RELEASE="+release)
		if err != nil {
			return err
		}
		logf("%s: seeding %d sessions", name, o.idleHistorySessions)
		ids, err := seedHistory(ctx, dbURL, o.idleHistorySessions, o.idleHistory)
		if err != nil {
			srv.kill()
			return err
		}
		res, err := b.measureIdle(ctx, srv, "chatd_connections_open", ids, release != "off")
		if err != nil {
			srv.kill()
			return fmt.Errorf("%s: %w\nchatd's log ends:\n%s", name, err, tail(srv.logs.String(), 3000))
		}
		res.target = name
		b.report.idleHistory = append(b.report.idleHistory, res)
		if err := srv.stop(); err != nil {
			return err
		}
	}
	return nil
}

// measureIdle opens b.opts.idle connections to srv (in sessions of b.opts.idleTabs),
// subscribed and then doing nothing, and returns what srv's memory and goroutines grew
// by per connection; connsGauge is the server's own gauge of its open connections. With
// ids, it opens one connection to each of those sessions instead; with released, it
// measures once every one of them dropped its messages and chatd then returned its free
// memory (chatd_memory_returned_total), as a server left alone for a while would. With
// ids and -idle-last-turn, each session first streams one more turn to its tab.
func (b *bench) measureIdle(ctx context.Context, srv *server, connsGauge string, ids []string, released bool) (*idleResult, error) {
	o := b.opts
	time.Sleep(time.Second)
	if err := forceGC(srv); err != nil {
		return nil, err
	}
	rss0, err := srv.rss()
	if err != nil {
		return nil, err
	}
	m0, err := scrape(srv.adminAddr)
	if err != nil {
		return nil, err
	}
	g := &gen{compress: srv.compress}
	sessions := (o.idle + o.idleTabs - 1) / o.idleTabs
	var ss []*session
	if ids != nil {
		sessions = len(ids)
		logf("%s idle: opening %d connections to existing sessions", srv.name, sessions)
		ss = make([]*session, len(ids))
		for i, id := range ids {
			ss[i] = &session{id: id}
			ss[i].tabs = []*tab{{g: g, sess: ss[i], addr: srv.addr}}
		}
		ss, err = connectAll(ctx, ss)
	} else {
		logf("%s idle: opening %d connections (%d sessions)", srv.name, o.idle, sessions)
		ss, err = openFor(srv)(ctx, g, srv.addr, sessions, o.idleTabs)
	}
	if err != nil {
		return nil, err
	}
	defer closeAll(ss)
	releases := len(ids)
	if ids != nil && o.idleLastTurn > 0 {
		// The last turn streams live, as the answer a tab was left open on: the session
		// then holds its events for replay too, not only its messages.
		// The sessions that drop what their hello loaded (a second after it, with the
		// release on) have done so; after its run each drops what it keeps once more.
		time.Sleep(1500 * time.Millisecond)
		m, err := scrape(srv.adminAddr)
		if err != nil {
			return nil, err
		}
		releases = int(m.sum("chatd_conversation_memory_released_total")) + len(ids)
		waves := max(1, min(o.idleLastTurnWaves, len(ss)))
		logf("%s idle: each session streams a last turn of %d tokens (in %d waves)", srv.name, o.idleLastTurn, waves)
		for w := range waves {
			wave := ss[w*len(ss)/waves : (w+1)*len(ss)/waves]
			if err := startRuns(ctx, wave, fmt.Sprintf("tokens=%d rate=100", o.idleLastTurn)); err != nil {
				return nil, err
			}
			if err := waitRuns(ctx, wave, 1, 3*time.Minute); err != nil {
				return nil, err
			}
		}
	}
	if released {
		if err := awaitReturn(ctx, srv, releases); err != nil {
			return nil, err
		}
	}
	// Collect what answering 10,000 hellos left behind, as any later activity would, so
	// what is measured is what the connections hold. (Stacks shrink during collections.)
	time.Sleep(time.Second)
	for range 4 {
		if err := forceGC(srv); err != nil {
			return nil, err
		}
	}
	time.Sleep(2 * time.Second)
	rss1, err := srv.rss()
	if err != nil {
		return nil, err
	}
	m1, err := scrape(srv.adminAddr)
	if err != nil {
		return nil, err
	}
	n := float64(len(allTabs(ss)))
	res := &idleResult{
		conns:            len(allTabs(ss)),
		sessions:         sessions,
		rssPerConn:       float64(rss1-rss0) / n,
		heapPerConn:      (m1.sum("go_memstats_heap_inuse_bytes") - m0.sum("go_memstats_heap_inuse_bytes")) / n,
		stackPerConn:     (m1.sum("go_memstats_stack_inuse_bytes") - m0.sum("go_memstats_stack_inuse_bytes")) / n,
		goroutinesPerCon: (m1.sum("go_goroutines") - m0.sum("go_goroutines")) / n,
		connsOpen:        m1.sum(connsGauge),
	}
	logf("%s idle: %.1f KiB RSS and %.2f goroutines per connection", srv.name, res.rssPerConn/1024, res.goroutinesPerCon)
	if m1.sum("go_memstats_sys_bytes") > 0 { // chatd: where the RSS that is not the heap's objects went
		per := func(name string) float64 { return (m1.sum(name) - m0.sum(name)) / n / 1024 }
		logf("%s idle: per connection, KiB: heap objects %.1f, heap idle not returned %.1f, span structures %.1f, GC metadata %.1f, other runtime %.1f",
			srv.name, per("go_memstats_heap_alloc_bytes"),
			per("go_memstats_heap_idle_bytes")-per("go_memstats_heap_released_bytes"),
			per("go_memstats_mspan_inuse_bytes"), per("go_memstats_gc_sys_bytes"), per("go_memstats_other_sys_bytes"))
	}
	if o.profileDir != "" {
		saveProfile(srv, o.profileDir, "/debug/pprof/heap", "heap")
		saveProfile(srv, o.profileDir, "/debug/pprof/goroutine", "goroutine")
	}
	if e := g.firstErr.Load(); e != nil {
		logf("%s idle: first client problem: %s", srv.name, *e)
	}
	return res, nil
}

// forceGC runs a garbage collection in the server (through pprof's heap endpoint).
// awaitReturn waits until n sessions of srv dropped their messages, then for srv to
// return its free memory to the system after the last of them: for its next return, or
// 25 s (two and a half of chatd's intervals) if none comes, for then it came between the
// last drop and the scrape that saw it.
func awaitReturn(ctx context.Context, srv *server, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var returns float64
	var since time.Time
	for {
		m, err := scrape(srv.adminAddr)
		if err != nil {
			return err
		}
		switch {
		case m.sum("chatd_conversation_memory_released_total") < float64(n):
		case since.IsZero():
			returns, since = m.sum("chatd_memory_returned_total"), time.Now()
		case m.sum("chatd_memory_returned_total") > returns || time.Since(since) > 25*time.Second:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: its sessions did not all drop their messages: %w", srv.name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

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
