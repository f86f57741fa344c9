package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

type bench struct {
	opts   options
	report *report
	dbs    []string
}

// newDatabase creates an empty database for one chatd process (chatd migrates it).
func (b *bench) newDatabase(ctx context.Context) (string, error) {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "chatd_bench_" + hex.EncodeToString(rnd[:])
	conn, err := pgx.Connect(ctx, b.opts.databaseURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redact(b.opts.databaseURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database: %w", err)
	}
	b.dbs = append(b.dbs, name)
	u, err := url.Parse(b.opts.databaseURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func (b *bench) dropDatabases() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.opts.databaseURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for _, name := range b.dbs {
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
}

func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// startChatd starts chatd with the synthetic model on a fresh database (dbURL "" makes
// one).
func (b *bench) startChatd(ctx context.Context, name, dbURL string, env ...string) (*server, error) {
	if dbURL == "" {
		var err error
		if dbURL, err = b.newDatabase(ctx); err != nil {
			return nil, err
		}
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// Metrics and profiles are served on chatd's admin listener, not beside the API.
	adminAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "chatd-bench-sandboxes-")
	if err != nil {
		return nil, err
	}
	env = append([]string{
		"CHATD_ADDR=" + addr,
		"CHATD_ADMIN_ADDR=" + adminAddr,
		"DATABASE_URL=" + dbURL,
		"CHATD_AGENT=synth",
		"CHATD_LOG_LEVEL=warn",
		"CHATD_LOG_FORMAT=json",
		"CHATD_SANDBOX_DIR=" + dir,
		"CHATD_SHELL_TOOL=off",
		"CHATD_PPROF=on", // for -profile-dir and forceGC; the admin listener is on loopback
		// Every simulated client comes from 127.0.0.1, thousands of them at once: the
		// per-address and per-connection limits would measure themselves, not chatd.
		// The total's default, three quarters of the open-file limit, would refuse the
		// biggest scale points a machine can hold (S=6000 is 18,000 connections, a
		// limit of 20,000 allows 15,000); the scale curve checks the limit itself.
		"CHATD_MAX_CONNS_PER_ADDR=0",
		"CHATD_MAX_CONNS=0",
		"CHATD_HANDSHAKE_RATE=off",
		"CHATD_COMMAND_RATE=off",
	}, env...)
	logf("starting %s", name)
	srv, err := startServer(ctx, name, addr, "/readyz", env, b.opts.chatd)
	if err != nil {
		return nil, err
	}
	srv.adminAddr = adminAddr
	return srv, nil
}

func (b *bench) startBaseline(ctx context.Context) (*server, error) {
	return b.startBaselineEnv(ctx, nil)
}

// startBaselineEnv is startBaseline with env added to its environment.
func (b *bench) startBaselineEnv(ctx context.Context, env []string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logf("starting the baseline server")
	srv, err := startServer(ctx, "baseline", addr, "/healthz", env, self, "-serve-baseline", addr)
	if err == nil {
		srv.adminAddr = addr // its /debug/pprof/, for -profile-dir
	}
	return srv, err
}

// openSessions connects S sessions of T tabs each, every tab said hello.
func openSessions(ctx context.Context, g *gen, addr string, s, t int) ([]*session, error) {
	sessions := make([]*session, s)
	for i := range sessions {
		sess := &session{}
		for range t {
			sess.tabs = append(sess.tabs, &tab{g: g, sess: sess, addr: addr})
		}
		sessions[i] = sess
	}
	return connectAll(ctx, sessions)
}

// connectAll connects every tab of sessions (64 sessions at a time); on an error it
// closes what it opened.
func connectAll(ctx context.Context, sessions []*session) ([]*session, error) {
	err := parallel(ctx, 64, len(sessions), func(i int) error {
		for _, tb := range sessions[i].tabs {
			if err := tb.connect(ctx, false); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		closeAll(sessions)
		return nil, err
	}
	return sessions, nil
}

// parallel runs f(0..n-1) on up to workers goroutines and returns the first error.
func parallel(ctx context.Context, workers, n int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan int)
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for i := range n {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func allTabs(sessions []*session) []*tab {
	var tabs []*tab
	for _, s := range sessions {
		tabs = append(tabs, s.tabs...)
	}
	return tabs
}

func closeAll(sessions []*session) {
	_ = parallel(context.Background(), 64, len(sessions), func(i int) error {
		for _, t := range sessions[i].tabs {
			if t.ws != nil {
				t.close()
			}
		}
		return nil
	})
}

// startRuns sends one chat.send per session from its first tab, spread over a second so
// the runs do not tick in step.
func startRuns(ctx context.Context, sessions []*session, content string) error {
	order := mrand.Perm(len(sessions))
	start := time.Now()
	for k, i := range order {
		if d := time.Until(start.Add(time.Duration(k) * time.Second / time.Duration(len(sessions)))); d > 0 {
			time.Sleep(d)
		}
		t := sessions[i].tabs[0]
		t.mu.Lock()
		t.sentAt, t.gotFirst = time.Now(), false
		t.mu.Unlock()
		var err error
		if t.cf != nil {
			err = t.cfSend(ctx, content, uuid.NewString())
		} else {
			err = t.send(ctx, map[string]any{"type": "chat.send", "requestId": uuid.NewString(), "content": content})
		}
		if err != nil {
			return fmt.Errorf("chat.send: %w", err)
		}
	}
	return nil
}

// waitRuns waits until every session's first tab has seen want runs end.
func waitRuns(ctx context.Context, sessions []*session, want int64, limit time.Duration) error {
	done := 0
	ok, err := poll(ctx, limit, func() (bool, error) {
		done = 0
		for _, s := range sessions {
			t := s.tabs[0]
			if t.runsDone.Load() >= want {
				done++
			} else if code := t.closeCode.Load(); code != 0 {
				return false, fmt.Errorf("a client was disconnected (close code %d) before its run ended", code)
			}
		}
		return done == len(sessions), nil
	})
	if err == nil && !ok {
		err = fmt.Errorf("only %d of %d runs ended within %v", done, len(sessions), limit)
	}
	return err
}

type counts struct{ frames, gaps, dups, replays, snapshots, errors, closed int64 }

func sumCounts(tabs []*tab) counts {
	var c counts
	for _, t := range tabs {
		c.frames += t.frames.Load()
		c.gaps += t.gaps.Load()
		c.dups += t.dups.Load()
		c.replays += t.replays.Load()
		c.snapshots += t.snapshots.Load()
		c.errors += t.errors.Load()
		if t.closeCode.Load() != 0 {
			c.closed++
		}
	}
	return c
}

// fanRow is one fan-out measurement.
type fanRow struct {
	target          string
	conns           int
	framesPerSec    float64
	p50, p99, p999  time.Duration
	cpuPerFrame     time.Duration
	serverCPU       float64 // cores used by the server
	clientCPU       float64 // cores used by the load generator
	gaps, dups      int64
	closed, errors  int64
	tokensPerFrame  float64
	latencySamples  int64
	serverRSS       int64
	firstClientFail string
	// nodeCores is the cores each measured server used (srv, then the others), when
	// more than one is measured.
	nodeCores []float64
	// writesPerFrame is the write system calls the servers made during the window per
	// frame delivered (/proc/<pid>/io's syscw); -1 when not known.
	writesPerFrame float64
	// bytesPerToken is what the servers wrote during the window (wchar: the frames on
	// the wire, WebSocket headers included, and their few database and log writes) per
	// token delivered; -1 when not known.
	bytesPerToken float64
}

// measure waits out the warm-up, then measures the window. The server CPU is srv's and
// the others' together (the nodes of a cluster that a frame passes through).
func measure(ctx context.Context, g *gen, srv *server, sessions []*session, warmup, window time.Duration, others ...*server) (fanRow, error) {
	return measureAround(ctx, g, srv, sessions, warmup, window, nil, nil, others...)
}

// measureAround is measure, with before and after (when not nil) called as the window
// begins and ends, to take figures of the same window.
func measureAround(ctx context.Context, g *gen, srv *server, sessions []*session, warmup, window time.Duration, before, after func() error, others ...*server) (fanRow, error) {
	srvs := append([]*server{srv}, others...)
	cpus := func() []time.Duration {
		c := make([]time.Duration, len(srvs))
		for i, s := range srvs {
			c[i] = must(s.cpu())
		}
		return c
	}
	tabs := allTabs(sessions)
	select {
	case <-time.After(warmup):
	case <-ctx.Done():
		return fanRow{}, ctx.Err()
	}
	for _, t := range tabs { // forget warm-up samples
		t.mu.Lock()
		t.lat = hist{}
		t.mu.Unlock()
	}
	if before != nil {
		if err := before(); err != nil {
			return fanRow{}, err
		}
	}
	c0, cpus0, self0, w0, t0 := sumCounts(tabs), cpus(), selfCPU(), writeSyscalls(srvs), time.Now()
	b0 := writtenBytes(srvs)
	g.measuring.Store(true)
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return fanRow{}, ctx.Err()
	}
	g.measuring.Store(false)
	c1, cpus1, self1, w1, t1 := sumCounts(tabs), cpus(), selfCPU(), writeSyscalls(srvs), time.Now()
	b1 := writtenBytes(srvs)
	if after != nil {
		if err := after(); err != nil {
			return fanRow{}, err
		}
	}
	var cpu0, cpu1 time.Duration
	var nodeCores []float64
	for i := range srvs {
		cpu0, cpu1 = cpu0+cpus0[i], cpu1+cpus1[i]
		nodeCores = append(nodeCores, (cpus1[i]-cpus0[i]).Seconds()/t1.Sub(t0).Seconds())
	}
	var h hist
	for _, t := range tabs {
		t.mu.Lock()
		h.merge(&t.lat)
		t.mu.Unlock()
	}
	elapsed := t1.Sub(t0).Seconds()
	frames := c1.frames - c0.frames
	row := fanRow{
		target:         srv.name,
		conns:          len(tabs),
		framesPerSec:   float64(frames) / elapsed,
		p50:            h.quantile(0.5),
		p99:            h.quantile(0.99),
		p999:           h.quantile(0.999),
		serverCPU:      (cpu1 - cpu0).Seconds() / elapsed,
		clientCPU:      (self1 - self0).Seconds() / elapsed,
		gaps:           c1.gaps,
		dups:           c1.dups,
		closed:         c1.closed,
		errors:         c1.errors,
		latencySamples: h.n,
		writesPerFrame: -1,
		bytesPerToken:  -1,
	}
	if len(srvs) > 1 {
		row.nodeCores = nodeCores
	}
	if frames > 0 {
		row.cpuPerFrame = (cpu1 - cpu0) / time.Duration(frames)
		row.tokensPerFrame = float64(h.n) / float64(frames)
		if w0 >= 0 && w1 >= 0 {
			row.writesPerFrame = float64(w1-w0) / float64(frames)
		}
		if b0 >= 0 && b1 >= 0 && h.n > 0 {
			row.bytesPerToken = float64(b1-b0) / float64(h.n)
		}
	}
	row.serverRSS, _ = srv.rss()
	if e := g.firstErr.Load(); e != nil {
		row.firstClientFail = *e
	}
	return row, nil
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func (b *bench) fanout(ctx context.Context) error {
	o := b.opts
	runFor := o.warmup + o.window + 3*time.Second
	content := func(extra time.Duration) string {
		return fmt.Sprintf("tokens=%d rate=%d", int(math.Ceil((runFor+extra).Seconds()*float64(o.rate))), o.rate)
	}
	if o.scenarios["fanout"] {
		srv, err := b.startBaseline(ctx)
		if err != nil {
			return err
		}
		row, err := b.fanoutOne(ctx, srv, content(0), false)
		if err != nil {
			srv.kill()
			return err
		}
		srv.kill() // the baseline has nothing to shut down cleanly
		b.report.fanout = append(b.report.fanout, row)
	}
	if err := b.peerFanout(ctx, content); err != nil {
		return err
	}
	stormOn := o.coalesce[0] // the storm runs on chatd with -storm-coalesce if it is measured
	for _, c := range o.coalesce {
		if c == o.stormCoalesce {
			stormOn = c
		}
	}
	for _, c := range o.coalesce {
		storm := c == stormOn && (o.scenarios["storm"] || o.scenarios["snapstorm"])
		if !o.scenarios["fanout"] && !storm {
			continue
		}
		name := coalesceName(c)
		srv, err := b.startChatd(ctx, name, "", coalesceEnv(c))
		if err != nil {
			return err
		}
		extra := time.Duration(0)
		if storm {
			extra = o.stormDown + o.stormSpread + 15*time.Second
			if o.scenarios["storm"] && o.scenarios["snapstorm"] {
				extra *= 2
			}
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
	}
	if o.compression && o.scenarios["fanout"] {
		// chatd as configured by default, with CHATD_COMPRESSION=on and clients that offer
		// permessage-deflate: what it costs per token and per connection.
		srv, err := b.startChatd(ctx, "chatd, compressed", "", "CHATD_COMPRESSION=on")
		if err != nil {
			return err
		}
		srv.compress = true
		row, err := b.fanoutOne(ctx, srv, content(0), false)
		if err != nil {
			srv.kill()
			return err
		}
		if err := srv.stop(); err != nil {
			return err
		}
		b.report.fanout = append(b.report.fanout, row)
	}
	return nil
}

func (b *bench) fanoutOne(ctx context.Context, srv *server, content string, storm bool) (fanRow, error) {
	o := b.opts
	g := &gen{compress: srv.compress}
	logf("%s: connecting %d sessions × %d tabs", srv.name, o.sessions, o.tabs)
	sessions, err := openFor(srv)(ctx, g, srv.addr, o.sessions, o.tabs)
	if err != nil {
		return fanRow{}, err
	}
	defer closeAll(sessions)
	logf("%s: starting %d runs (%s)", srv.name, len(sessions), content)
	if err := startRuns(ctx, sessions, content); err != nil {
		return fanRow{}, err
	}
	if o.profileDir != "" {
		go func() {
			time.Sleep(o.warmup)
			seconds := max(int(o.window/time.Second)-1, 1)
			saveProfile(srv, o.profileDir, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), "cpu")
			// What was allocated since the start, most of it by the window's tokens:
			// go tool pprof -sample_index=alloc_objects.
			saveProfile(srv, o.profileDir, "/debug/pprof/allocs", "allocs")
		}()
	}
	row, err := measure(ctx, g, srv, sessions, o.warmup, o.window)
	if err != nil {
		return fanRow{}, err
	}
	logf("%s: %.0f frames/s, p50 %v p99 %v p999 %v, %v CPU/frame, gaps %d dups %d",
		srv.name, row.framesPerSec, row.p50, row.p99, row.p999, row.cpuPerFrame, row.gaps, row.dups)
	if storm && o.scenarios["storm"] {
		if err := b.storm(ctx, g, srv, sessions, false); err != nil {
			return fanRow{}, err
		}
	}
	// The snapshot storm's stale epochs and its checks of the snapshots are chatd's
	// protocol; the peer has no such answer to check (see snapstorm.go).
	if storm && o.scenarios["snapstorm"] && !srv.peer {
		if err := b.storm(ctx, g, srv, sessions, true); err != nil {
			return fanRow{}, err
		}
	}
	return row, nil
}

// stormResult is the reconnect storm's outcome.
type stormResult struct {
	target             string
	clients            int
	down, spread       time.Duration
	p50, p99, max      time.Duration
	notCaughtUp        int
	gaps, dups         int64
	replays, snapshots int64
	dbReads, dbWrites  float64
	serverReplays      float64
	serverSnapshots    float64
	snap               *snapCheck // the snapshot storm's checks of the snapshots
	// peer: the storm ran on the Centrifuge peer (no database; its replays are
	// recovered subscriptions, its snapshots subscriptions it could not recover).
	peer bool
}

var readStatements = map[string]bool{
	"SessionGet": true, "MessagesListBefore": true, "MessagesListByRun": true,
	"RunGet": true, "RunGetByRequest": true, "RunLatest": true, "StreamLogRead": true,
}

// storm cuts every client and reconnects them resuming; stale (the snapshot storm, see
// snapstorm.go) makes every hello name an epoch that is not the session's, so each is
// answered with a snapshot.
func (b *bench) storm(ctx context.Context, g *gen, srv *server, sessions []*session, stale bool) error {
	o := b.opts
	tabs := allTabs(sessions)
	logf("%s: reconnect storm (stale epochs: %v): dropping %d clients", srv.name, stale, len(tabs))
	m0, err := scrape(srv.adminAddr)
	if err != nil {
		return err
	}
	before := sumCounts(tabs)
	_ = parallel(ctx, 64, len(tabs), func(i int) error { tabs[i].drop(); return nil })
	seen := seenTokens(tabs)
	time.Sleep(o.stormDown)
	how := "hello{epoch,lastSeq}"
	if srv.peer {
		how = "subscribe{recover,offset,epoch}"
	}
	logf("%s: reconnecting them over %v with %s", srv.name, o.stormSpread, how)
	var wg sync.WaitGroup
	var failed sync.Map
	start := time.Now()
	for _, i := range mrand.Perm(len(tabs)) {
		t := tabs[i]
		at := start.Add(time.Duration(mrand.Int64N(int64(o.stormSpread) + 1)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(at))
			t.mu.Lock()
			t.reconnectAt, t.caughtUpDone, t.caughtUp = time.Now(), false, 0
			t.mu.Unlock()
			if stale {
				t.epoch = staleEpoch(t.epoch) // the reader is stopped: the tab is ours
			}
			if err := t.connect(ctx, true); err != nil {
				failed.Store(t, err)
			}
		}()
	}
	wg.Wait()
	var (
		res stormResult
		h   hist
	)
	// Clients not caught up within 30 s are reported as such, not as an error.
	if _, err := poll(ctx, 30*time.Second, func() (bool, error) {
		h, res.notCaughtUp = hist{}, 0
		for _, t := range tabs {
			t.mu.Lock()
			if d, ok := t.caughtUpAfter(); ok {
				h.add(d)
			} else {
				res.notCaughtUp++
			}
			t.mu.Unlock()
		}
		return res.notCaughtUp == 0, nil
	}); err != nil {
		return err
	}
	res.p50, res.p99, res.max = h.quantile(0.5), h.quantile(0.99), h.max
	m1, err := scrape(srv.adminAddr)
	if err != nil {
		return err
	}
	after := sumCounts(tabs)
	res.target, res.clients, res.down, res.spread = srv.name, len(tabs), o.stormDown, o.stormSpread
	res.gaps, res.dups = after.gaps-before.gaps, after.dups-before.dups
	res.replays, res.snapshots = after.replays-before.replays, after.snapshots-before.snapshots
	for name, n := range m1.statementsSince(m0) {
		if readStatements[name] {
			res.dbReads += n
		} else {
			res.dbWrites += n
		}
	}
	k0, k1 := m0.byLabel("chatd_catchups_total", "kind"), m1.byLabel("chatd_catchups_total", "kind")
	res.serverReplays, res.serverSnapshots = k1["replay"]-k0["replay"], k1["snapshot"]-k0["snapshot"]
	if srv.peer {
		res.peer = true
		r0, r1 := m0.byLabel("centrifuge_client_recover", "recovered"), m1.byLabel("centrifuge_client_recover", "recovered")
		res.serverReplays, res.serverSnapshots = r1["yes"]-r0["yes"], r1["no"]-r0["no"]
	}
	failed.Range(func(_, v any) bool {
		g.noteErr("reconnect: %v", v) // such a tab is also counted as not caught up
		return false
	})
	logf("%s: storm: caught up p50 %v p99 %v, gaps %d dups %d, %d replays %d snapshots, %.0f db reads",
		srv.name, res.p50, res.p99, res.gaps, res.dups, res.replays, res.snapshots, res.dbReads)
	switch {
	case stale:
		res.snap = checkSnapshots(tabs, seen, m1.statementsSince(m0))
		b.report.snapStorm = &res
	case srv.peer:
		b.report.peerStorm = &res
	default:
		b.report.storm = &res
	}
	return nil
}
