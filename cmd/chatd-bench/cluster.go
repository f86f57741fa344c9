package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The cluster scenario: three chatd nodes on one database. It measures how long a
// session's run stops streaming when the node that owns it is killed (until another
// node's lease on it lets the run continue from its checkpoint), what a client sees of
// the continued run, and what a connection relayed through a node that does not own its
// session costs against one made directly to the owner.

// defaultLeaseTTL is chatd's CHATD_LEASE_TTL default, to which the failover times
// measured with -lease-ttl are scaled.
const defaultLeaseTTL = 10 * time.Second

// Failover runs: segments of one second (a tool call between two), so a run has stored
// segment boundaries to continue from when its node dies.
const (
	failoverSegments = 10
	failoverKillAt   = 3 * time.Second // after the last run started
	reconnectBackoff = 100 * time.Millisecond
	reconnectLimit   = 60 * time.Second
)

type clusterResult struct {
	nodes, sessions    int
	rate, tokens, tool int
	ttl                time.Duration

	failover         hist // kill to the first token the new owner streamed, per session
	accepted         hist // kill to the hello a node accepted
	expiryWait       hist // kill to the dead node's lease expiry
	takeover         hist // lease expiry to the first token
	implied          hist // failover scaled to the default TTL (see impliedFailover)
	notRecovered     int
	moved            int64 // hellos answered moved
	attempts         int64 // hellos sent to reconnect
	takenBy          map[string]int
	gaps, dups       int64
	restreamed       int64 // tokens seen before the kill that the new owner streamed again
	snapOnly         int64 // tokens not seen before the kill that came in the snapshot's text
	offBoundary      int   // continued runs that did not go on from a segment boundary
	wrongResume      int   // continued runs whose first token was not the one the snapshot implies
	badText          int   // snapshots whose text skipped or repeated tokens
	incomplete       int   // runs that did not end with their last token
	interrupted      int   // assistant segments stored interrupted (the ones open at the kill that were kept)
	interruptedEmpty int
	firstFail        string

	relay *relayResult
}

type relayResult struct {
	sessions, tabs, rate int
	warmup, window       time.Duration
	rows                 []fanRow
	// via is, per relayed row, how the relaying node says it relayed the connections
	// (chatd_relayed_connections_total by "via"), to show each went the intended way.
	via     []string
	skipped string
}

// stepStarts returns the token indices where the synthetic model's steps start in a run
// of n tokens with k tool calls: step j streams [j·n/(k+1), (j+1)·n/(k+1)). A run continued
// from its checkpoint re-streams the step it was cut off in from its start.
func stepStarts(n, k int) []int {
	starts := make([]int, k+1)
	for j := range starts {
		starts[j] = j * n / (k + 1)
	}
	return starts
}

// continuation is what one client saw of a run whose node was killed, and that it then
// followed on another node.
type continuation struct {
	seenBefore int        // tokens 0..seenBefore-1 had arrived when the node died
	snap       transcript // the reconnect's snapshot's text (firstNew: since the kill)
	resumeIdx  int        // the first token streamed after the snapshot
	finalNext  int        // the token expected next once the run ended
}

type continuationCheck struct {
	restreamed  int  // tokens seen live before the kill and streamed again
	snapOnly    int  // tokens the client first saw in the snapshot's text
	offBoundary bool // the new owner did not go on from a step's start
	wrongResume bool // the first token after the snapshot does not follow its text
	badText     bool // the snapshot's text skips or repeats tokens
	incomplete  bool // the run did not end with its last token
}

// checkContinuation checks a continued run of n tokens with k tool calls. The stored text
// of a run is its finished segments (an open segment's text is stored when it ends), so
// the new owner must go on from a step's start: where the snapshot's text ends, or, when
// the new owner had streamed some before the client's hello, its first token stamped
// after the kill. The snapshot's text must hold every token once, and the first token
// after it must follow it. Tokens the client had seen past the continuation point are
// streamed again in a new segment (the old one ended with the dead node): they are
// reported, not counted as duplicates.
func checkContinuation(c continuation, n, k int) continuationCheck {
	from := c.snap.next
	if c.snap.firstNew >= 0 {
		from = c.snap.firstNew
	}
	return continuationCheck{
		restreamed:  max(c.seenBefore-from, 0),
		snapOnly:    max(from-c.seenBefore, 0),
		offBoundary: !slices.Contains(stepStarts(n, k), from),
		wrongResume: c.resumeIdx != c.snap.next,
		badText:     c.snap.gaps+c.snap.dups > 0,
		incomplete:  c.finalNext != n,
	}
}

// impliedFailover scales a failover measured with lease TTL ttl to TTL target: the wait
// for the dead node's lease to expire grows with the TTL (renewals every TTL/3, so it is
// between 2/3 of the TTL and all of it), the takeover after it does not.
func impliedFailover(killToExpiry, expiryToFirst, ttl, target time.Duration) time.Duration {
	return time.Duration(float64(killToExpiry)*float64(target)/float64(ttl)) + max(expiryToFirst, 0)
}

func (b *bench) cluster(ctx context.Context) error {
	o := b.opts
	dbURL, err := b.newDatabase(ctx)
	if err != nil {
		return err
	}
	var nodes []*server
	defer func() {
		for _, n := range nodes {
			select {
			case <-n.exited:
			default:
				n.kill()
			}
		}
	}()
	for i := 1; i <= 3; i++ {
		// One at a time: the first migrates the fresh database.
		n, err := b.startChatd(ctx, fmt.Sprintf("node%d", i), dbURL,
			fmt.Sprintf("CHATD_NODE_ID=node%d", i),
			fmt.Sprintf("CHATD_LEASE_TTL=%v", o.leaseTTL),
			"CHATD_COALESCE_DELTAS=0") // token latency is the pipeline's (and the relay's)
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	res := &clusterResult{nodes: len(nodes), ttl: o.leaseTTL}
	b.report.cluster = res
	if err := b.failover(ctx, dbURL, nodes, res); err != nil {
		return err
	}
	rel, err := b.relayCost(ctx, nodes[1], nodes[2])
	if err != nil {
		return err
	}
	res.relay = rel
	for _, n := range nodes[1:] {
		if err := n.stop(); err != nil {
			return err
		}
	}
	return nil
}

// failover opens sessions on nodes[0], kills it mid-run, and follows every session on
// the other nodes.
func (b *bench) failover(ctx context.Context, dbURL string, nodes []*server, res *clusterResult) error {
	o := b.opts
	res.sessions, res.rate = o.clusterSessions, o.rate
	res.tokens, res.tool = failoverSegments*o.rate, failoverSegments-1
	g := &gen{}
	first := nodes[0]
	logf("cluster: %d sessions on %s", res.sessions, first.name)
	ss, err := openSessions(ctx, g, first.addr, res.sessions, 1)
	if err != nil {
		return err
	}
	defer closeAll(ss)
	content := fmt.Sprintf("tokens=%d rate=%d tools=%d", res.tokens, res.rate, res.tool)
	logf("cluster: starting %d runs (%s)", len(ss), content)
	if err := startRuns(ctx, ss, content); err != nil {
		return err
	}
	tabs := allTabs(ss)
	ok, err := poll(ctx, 30*time.Second, func() (bool, error) {
		for _, t := range tabs {
			t.mu.Lock()
			got := t.gotFirst
			t.mu.Unlock()
			if !got {
				return false, nil
			}
		}
		return true, nil
	})
	if err == nil && !ok {
		err = errors.New("cluster: not every run streamed within 30s")
	}
	if err != nil {
		return err
	}
	time.Sleep(failoverKillAt)

	logf("cluster: SIGKILL %s", first.name)
	for _, t := range tabs {
		t.expected.Store(true)
	}
	killAt := time.Now()
	first.kill()
	seenBefore := make(map[*tab]int, len(tabs))
	for _, t := range tabs {
		<-t.readDone
		t.mu.Lock()
		seenBefore[t] = max(t.nextTok, 0)
		t.reconnectAt, t.caughtUpDone, t.caughtUp = killAt, false, 0
		t.mu.Unlock()
	}
	expiry, err := leases(ctx, dbURL) // final: the dead node renews nothing more
	if err != nil {
		return err
	}

	// Every tab reconnects at once, resuming, to node 2 or 3, and again every
	// reconnectBackoff while the answer is moved: until the dead node's lease expires
	// the session is its. Without a relay a node that does not hold the session
	// answers moved, so a tab alternates between the two live nodes (another node's
	// rescuer may have taken the session up first).
	others := nodes[1:]
	acceptedAt := make([]time.Time, len(tabs))
	var attempts, failures sync.Map
	var wg sync.WaitGroup
	for i, t := range tabs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				t.addr = others[(i+k)%len(others)].addr
				attempts.Store(t, k+1)
				err := t.connect(ctx, true)
				if err == nil {
					acceptedAt[i] = time.Now()
					return
				}
				if time.Since(killAt) > reconnectLimit || ctx.Err() != nil {
					failures.Store(t, err)
					return
				}
				time.Sleep(reconnectBackoff/2 + mrand.N(reconnectBackoff))
			}
		}()
	}
	wg.Wait()
	failures.Range(func(_, v any) bool {
		g.noteErr("cluster reconnect: %v", v)
		return false
	})
	attempts.Range(func(_, v any) bool {
		res.attempts += int64(v.(int))
		return true
	})
	if _, err := poll(ctx, 30*time.Second, func() (bool, error) {
		for _, t := range tabs {
			t.mu.Lock()
			done := t.caughtUpDone
			t.mu.Unlock()
			if !done {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	logf("cluster: waiting for the continued runs to end")
	runLeft := time.Duration(res.tokens)*time.Second/time.Duration(res.rate) + 30*time.Second
	if err := waitRuns(ctx, ss, 1, runLeft); err != nil {
		g.noteErr("%v", err) // reported below as runs that did not end
	}

	owners, err := leases(ctx, dbURL)
	if err != nil {
		return err
	}
	if res.interrupted, res.interruptedEmpty, err = interruptedSegments(ctx, dbURL); err != nil {
		return err
	}
	res.takenBy = map[string]int{}
	for i, t := range tabs {
		t.mu.Lock()
		done, caughtUp, resume, snap, final := t.caughtUpDone, t.caughtUp, t.resumeIdx, t.snap, t.nextTok
		t.mu.Unlock()
		res.takenBy[owners[t.sess.id].node]++
		if !acceptedAt[i].IsZero() {
			res.accepted.add(acceptedAt[i].Sub(killAt))
		}
		if !done {
			res.notRecovered++
			continue
		}
		res.failover.add(caughtUp)
		if e := expiry[t.sess.id].expires; !e.IsZero() {
			res.expiryWait.add(e.Sub(killAt))
			res.takeover.add(max(killAt.Add(caughtUp).Sub(e), 0))
			res.implied.add(impliedFailover(e.Sub(killAt), killAt.Add(caughtUp).Sub(e), res.ttl, defaultLeaseTTL))
		}
		c := checkContinuation(continuation{seenBefore: seenBefore[t], snap: snap, resumeIdx: resume, finalNext: final}, res.tokens, res.tool)
		if c.offBoundary || c.wrongResume || c.badText || c.incomplete || t.gaps.Load()+t.dups.Load() > 0 {
			logf("cluster: session %s: seen %d before the kill, snapshot %+v, then %d, ended expecting %d; gaps %d dups %d; held by %s",
				t.sess.id, seenBefore[t], snap, resume, final, t.gaps.Load(), t.dups.Load(), owners[t.sess.id].node)
		}
		if c.badText {
			res.badText++
		}
		res.restreamed += int64(c.restreamed)
		res.snapOnly += int64(c.snapOnly)
		if c.offBoundary {
			res.offBoundary++
		}
		if c.wrongResume {
			res.wrongResume++
		}
		if c.incomplete || t.runsDone.Load() < 1 {
			res.incomplete++
		}
	}
	after := sumCounts(tabs)
	res.gaps, res.dups = after.gaps, after.dups
	res.moved = 0
	for _, t := range tabs {
		res.moved += t.moved.Load()
	}
	if e := g.firstErr.Load(); e != nil {
		res.firstFail = *e
	}
	logf("cluster: failover p50 %v p99 %v max %v; %d not recovered, %d moved answers, gaps %d dups %d, re-streamed %d",
		res.failover.quantile(0.5), res.failover.quantile(0.99), res.failover.max, res.notRecovered, res.moved, res.gaps, res.dups, res.restreamed)
	return nil
}

type leaseRow struct {
	node    string
	expires time.Time
}

// leases reads every session's lease from the shared database.
func leases(ctx context.Context, dbURL string) (map[string]leaseRow, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT session_id::text, coalesce(node, ''), expires_at FROM session_leases")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]leaseRow{}
	for rows.Next() {
		var (
			id string
			l  leaseRow
			e  *time.Time
		)
		if err := rows.Scan(&id, &l.node, &e); err != nil {
			return nil, err
		}
		if e != nil {
			l.expires = *e
		}
		out[id] = l
	}
	return out, rows.Err()
}

// interruptedSegments counts the assistant text segments stored interrupted, and those
// of them that are empty.
func interruptedSegments(ctx context.Context, dbURL string) (all, empty int, err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE content = '')
		FROM messages WHERE role = 'assistant' AND status = 'interrupted'`).Scan(&all, &empty)
	return all, empty, err
}

// relayCost measures the same streaming sessions, owned by owner, with their tabs
// connected directly to owner, then to other (which relays each hello to the owner), then
// to other's /v1/ws?session=<id> (which reverse-proxies the connection to the owner). The
// server CPU is both nodes'.
func (b *bench) relayCost(ctx context.Context, owner, other *server) (*relayResult, error) {
	o := b.opts
	res := &relayResult{sessions: o.relaySessions, tabs: o.relayTabs, rate: o.rate}
	res.warmup, res.window = 2*time.Second, 6*time.Second
	if o.full {
		res.warmup, res.window = 5*time.Second, 20*time.Second
	}
	g := &gen{}
	logf("cluster: relay cost: %d sessions × %d tabs on %s", res.sessions, res.tabs, owner.name)
	ss, err := openSessions(ctx, g, owner.addr, res.sessions, res.tabs)
	if err != nil {
		return nil, err
	}
	defer closeAll(ss)
	runFor := 3*(res.warmup+res.window) + 30*time.Second
	content := fmt.Sprintf("tokens=%d rate=%d", int(runFor.Seconds())*o.rate, o.rate)
	if err := startRuns(ctx, ss, content); err != nil {
		return nil, err
	}
	tabs := allTabs(ss)
	row, err := measure(ctx, g, owner, ss, res.warmup, res.window, other)
	if err != nil {
		return nil, err
	}
	row.target = "direct to the owner"
	res.rows = append(res.rows, row)
	logf("cluster: direct: p50 %v p99 %v, %v CPU/frame", row.p50, row.p99, row.cpuPerFrame)

	for _, mode := range []struct{ name, query string }{
		{"relayed: hello on another node", ""},
		{"proxied: another node's /v1/ws?session=", "?session="},
	} {
		// Reconnect every tab to the other node, resuming: the owner's ring replays
		// what it missed.
		m0, err := scrape(other.adminAddr)
		if err != nil {
			return nil, err
		}
		var moved sync.Map
		err = parallel(ctx, 64, len(tabs), func(i int) error {
			t := tabs[i]
			t.close()
			t.addr, t.query = other.addr, ""
			if mode.query != "" {
				t.query = mode.query + t.sess.id
			}
			err := t.connect(ctx, true)
			if errors.Is(err, errMoved) {
				moved.Store(t, true)
				return nil
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		n := 0
		moved.Range(func(_, _ any) bool { n++; return true })
		if n > 0 {
			res.skipped = fmt.Sprintf("%s answered %d of %d hellos `moved` instead of relaying them: this chatd has no relay (branch `relay` not merged)", other.name, n, len(tabs))
			logf("cluster: %s", res.skipped)
			return res, nil
		}
		m1, err := scrape(other.adminAddr)
		if err != nil {
			return nil, err
		}
		via := relayedVia(m0, m1)
		logf("cluster: %s (%s)", mode.name, via)
		row, err := measure(ctx, g, owner, ss, res.warmup, res.window, other)
		if err != nil {
			return nil, err
		}
		row.target = mode.name
		res.rows = append(res.rows, row)
		res.via = append(res.via, via)
		logf("cluster: %s: p50 %v p99 %v, %v CPU/frame", mode.name, row.p50, row.p99, row.cpuPerFrame)
	}
	return res, nil
}

// relayedVia says how many connections a node relayed between two scrapes, by how.
func relayedVia(m0, m1 metrics) string {
	const name = "chatd_relayed_connections_total"
	d := m1.byLabel(name, "via")
	if len(d) == 0 {
		return "the node does not report chatd_relayed_connections_total"
	}
	for k, v := range m0.byLabel(name, "via") {
		d[k] -= v
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		parts = append(parts, fmt.Sprintf("%.0f via %s", d[k], k))
	}
	return "relayed " + strings.Join(parts, ", ")
}
