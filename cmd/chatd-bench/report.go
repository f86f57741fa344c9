package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Each mode's latest results live between their own pair of markers: the single-node
// scenarios' in one block ("quick", "full"), the cluster's in another ("quick cluster",
// "full cluster"), so that running either leaves the other's results in place.
func markers(block string) (begin, end string) {
	return "<!-- chatd-bench " + block + " results: begin (generated; edit outside the markers) -->",
		"<!-- chatd-bench " + block + " results: end -->"
}

// resultBlock is the results of one run that go between one pair of markers.
type resultBlock struct{ name, text string }

// blocks returns the run's results block by block (see markers), only those of the
// scenarios that ran.
func (r *report) blocks() []resultBlock {
	mode := "quick"
	if r.opts.full {
		mode = "full"
	}
	var out []resultBlock
	if len(r.fanout) > 0 || r.storm != nil || r.snapStorm != nil || r.idle != nil || len(r.idleHistory) > 0 || len(r.cores) > 0 || r.peerStorm != nil || r.peerIdle != nil || len(r.storage) > 0 || r.delay != nil || r.scale != nil {
		out = append(out, resultBlock{mode, r.markdown()})
	}
	if r.cluster != nil {
		out = append(out, resultBlock{mode + " cluster", r.clusterMarkdown()})
	}
	if r.streamLog != nil {
		out = append(out, resultBlock{mode + " stream log", r.streamLogMarkdown()})
	}
	return out
}

func (r *report) header() string {
	mode := "quick"
	if r.opts.full {
		mode = "full"
	}
	return fmt.Sprintf("### Run of %s (%s mode, %v)\n\n- Machine: %s\n- Command: `make bench%s` (runs `%s`)\n",
		r.started.Format("2006-01-02 15:04 MST"), mode, r.elapsed.Round(time.Second), machine(), makeFlags(r.command), r.command)
}

type report struct {
	opts    options
	started time.Time
	elapsed time.Duration
	command string

	fanout  []fanRow
	storm   *stormResult
	idle    *idleResult
	storage []storageRow
	delay   *delayResult
	cluster *clusterResult

	snapStorm *stormResult
	scale     *scaleResult
	streamLog *streamLogResult

	// The Centrifuge peer's storm and idle density (peer.go), beside chatd's.
	peerStorm *stormResult
	peerIdle  *idleResult
	// cores: the cores sweep (coresSweep).
	cores []coresRow
	// idleCompressed: idle connections that negotiated permessage-deflate.
	idleCompressed *idleResult
	// idleHistory: idle connections to sessions with long conversations (idleHistories).
	idleHistory []*idleResult
}

func (r *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("%s", r.header())
	if len(r.fanout) > 0 {
		var base, peer *fanRow
		for i := range r.fanout {
			switch r.fanout[i].target {
			case "baseline":
				base = &r.fanout[i]
			case peerName:
				peer = &r.fanout[i]
			}
		}
		o := r.opts
		w("**Fan-out**: S=%d sessions × T=%d tabs (%d connections), R=%d tokens/s per run, %v window after %v warm-up.",
			o.sessions, o.tabs, o.sessions*o.tabs, o.rate, o.window, o.warmup)
		w("")
		w("| server | frames/s | tokens/frame | p50 | p99 | p999 | server CPU/frame | ×baseline CPU | ×baseline p99 | ×%s CPU | ×%s p99 | write syscalls/frame | bytes written/token | server cores | client cores | gaps | dups | dropped |", peerName, peerName)
		w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, f := range r.fanout {
			cpuRatio, p99Ratio := ratios(&f, base)
			peerCPU, peerP99 := "", ""
			if f.target != peerName {
				peerCPU, peerP99 = ratios(&f, peer)
			}
			w("| %s | %.0f | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %d | %d | %d |",
				f.target, f.framesPerSec, f.tokensPerFrame, ms(f.p50), ms(f.p99), ms(f.p999), us(f.cpuPerFrame),
				cpuRatio, p99Ratio, peerCPU, peerP99, writes(f.writesPerFrame), perToken(f.bytesPerToken), f.serverCPU, f.clientCPU, f.gaps, f.dups, f.closed)
		}
		w("")
		for _, f := range r.fanout {
			if f.firstClientFail != "" {
				w("- %s: first client problem: `%s`", f.target, f.firstClientFail)
			}
		}
	}
	if storms := nonNil(r.storm, r.peerStorm); len(storms) > 0 {
		s := storms[0]
		var on []string
		for _, s := range storms {
			on = append(on, s.target)
		}
		w("**Reconnect storm** (on the fan-out sessions of %s, runs still streaming): %d clients cut without a close handshake, down for %v, reconnected spread over %v, chatd's with `hello{epoch,lastSeq}`, %s's subscribing with `recover` from their offset and epoch.",
			strings.Join(on, " and of "), s.clients, s.down, s.spread, peerName)
		w("")
		w("| server | caught up p50 | p99 | max | not caught up | gaps | dups | replays (recovered) | snapshots (not recovered) | database reads | database writes |")
		w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, s := range storms {
			reads, writes := fmt.Sprintf("%.0f", s.dbReads), fmt.Sprintf("%.0f", s.dbWrites)
			if s.peer {
				reads, writes = "–", "–"
			}
			w("| %s | %s | %s | %s | %d | %d | %d | %d | %d | %s | %s |", s.target, ms(s.p50), ms(s.p99), ms(s.max), s.notCaughtUp,
				s.gaps, s.dups, s.replays, s.snapshots, reads, writes)
		}
		w("")
		var counted []string
		for _, s := range storms {
			if s.peer {
				counted = append(counted, fmt.Sprintf("%s counted %.0f recovered and %.0f not recovered subscriptions", s.target, s.serverReplays, s.serverSnapshots))
			} else {
				counted = append(counted, fmt.Sprintf("chatd counted %.0f replays and %.0f snapshots", s.serverReplays, s.serverSnapshots))
			}
		}
		w("Caught up: from the reconnect's start until the first token due after it arrives (so it includes up to 1/R of waiting for that token). %s.", strings.Join(counted, "; "))
		w("")
	}
	if r.snapStorm != nil {
		r.snapStormMarkdown(w)
	}
	if idles := nonNil(r.idle, r.idleCompressed, r.peerIdle); len(idles) > 0 {
		i := idles[0]
		w("**Idle density**: %d subscribed connections (%d sessions), nothing streaming.", i.conns, i.sessions)
		w("")
		w("| server | RSS/connection | heap in use/connection | stacks/connection | goroutines/connection | connections open (server's gauge) |")
		w("|---|---:|---:|---:|---:|---:|")
		for _, i := range idles {
			name := i.target
			if name == "" {
				name = "chatd"
			}
			w("| %s | %.1f KiB | %.1f KiB | %.1f KiB | %.2f | %.0f |", name, i.rssPerConn/1024, i.heapPerConn/1024, i.stackPerConn/1024, i.goroutinesPerCon, i.connsOpen)
		}
		w("")
	}
	if len(r.idleHistory) > 0 {
		i := r.idleHistory[0]
		last := ""
		if r.opts.idleLastTurn > 0 {
			last = fmt.Sprintf(" and a last turn of %d tokens streamed live to the tab", r.opts.idleLastTurn)
			if r.opts.idleLastTurnWaves > 1 {
				last += fmt.Sprintf(" (in %d waves, one after another)", r.opts.idleLastTurnWaves)
			}
		}
		w("**Idle density with histories**: %d subscribed connections, one to each of %d sessions with a finished conversation of %d turns (about %d KiB of text each)%s, nothing streaming; with what a quiet session keeps in memory kept, then released a second after each session went quiet (CHATD_QUIET_RELEASE).", i.conns, i.sessions, r.opts.idleHistory, r.opts.idleHistory*2000/1024, last)
		w("")
		w("| server | RSS/connection | heap in use/connection | stacks/connection | goroutines/connection | connections open (server's gauge) |")
		w("|---|---:|---:|---:|---:|---:|")
		for _, i := range r.idleHistory {
			w("| %s | %.1f KiB | %.1f KiB | %.1f KiB | %.2f | %.0f |", i.target, i.rssPerConn/1024, i.heapPerConn/1024, i.stackPerConn/1024, i.goroutinesPerCon, i.connsOpen)
		}
		w("")
	}
	if len(r.storage) > 0 {
		w("**Storage cost**: database statements per run (%d runs per row, streaming %d tokens/s each).", r.opts.storageRuns, storageRate)
		w("")
		w("| tokens/run | tool calls | segments | statements/run | bound 2×(segments+tools)+4 | statements |")
		w("|---:|---:|---:|---:|---:|---|")
		for _, s := range r.storage {
			w("| %d | %d | %d | %.2f | %d | %s |", s.tokens, s.tools, s.segments, s.perRun, s.bound, s.breakdown)
		}
		w("")
	}
	if d := r.delay; d != nil {
		w("**Slow database**: %d sessions (one tab each) at R=%d, coalescing off, with every database round trip delayed by %v (a TCP proxy between chatd and PostgreSQL), against the same load on a direct connection. Streaming is measured once every run has streamed its first token; the first token's wait (chat.send to first token, which waits for the run's row) is measured per run.", d.sessions, d.rate, d.delay)
		w("")
		if d.skipped != "" {
			w("Skipped: %s.", d.skipped)
		} else {
			w("| database | frames/s | token p50 | token p99 | token p999 | first token p50 | first token p99 | gaps | dups |")
			w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
			for _, f := range []struct {
				name  string
				row   fanRow
				first *hist
			}{{"direct", d.direct, &d.directFirst}, {fmt.Sprintf("+%v per round trip", d.delay), d.delayed, &d.delayedFirst}} {
				w("| %s | %.0f | %s | %s | %s | %s | %s | %d | %d |", f.name, f.row.framesPerSec, ms(f.row.p50), ms(f.row.p99), ms(f.row.p999),
					ms(f.first.quantile(0.5)), ms(f.first.quantile(0.99)), f.row.gaps, f.row.dups)
			}
		}
		w("")
	}
	if len(r.cores) > 0 {
		r.coresMarkdown(w)
	}
	if r.scale != nil {
		r.scale.markdown(w, r.opts.out)
	}
	return strings.TrimRight(b.String(), "\n")
}

// nonNil returns the results that are there, in order.
func nonNil[T any](rs ...*T) []*T {
	var out []*T
	for _, r := range rs {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// ratios returns f's CPU per token and p99 as multiples of ref's, or "" when there is no
// ref (or f is ref). Per token, not per frame: a coalesced frame carries several tokens,
// and the peer puts several publications in a frame when they queue.
func ratios(f, ref *fanRow) (cpu, p99 string) {
	if ref == nil || f.target == ref.target || ref.cpuPerFrame <= 0 || ref.p99 <= 0 || ref.tokensPerFrame <= 0 || f.tokensPerFrame <= 0 {
		return "", ""
	}
	cpu = fmt.Sprintf("%.2f", (float64(f.cpuPerFrame)/f.tokensPerFrame)/(float64(ref.cpuPerFrame)/ref.tokensPerFrame))
	p99 = fmt.Sprintf("%.2f", float64(f.p99)/float64(ref.p99))
	return cpu, p99
}

// clusterMarkdown is the cluster scenario's results, under their own heading.
func (r *report) clusterMarkdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	c := r.cluster
	w("%s", r.header())
	w("**Failover**: %d chatd nodes on one database, `CHATD_LEASE_TTL=%v`. %d sessions (one tab each) on node1, each streaming a run of %d tokens at R=%d in %d segments (%d tool calls); node1 is killed (SIGKILL) %v after the last run started, and every tab reconnects at once to node2 or node3 with `hello{sessionId, epoch, lastSeq}`, again every %v while the answer is `moved`.",
		c.nodes, c.ttl, c.sessions, c.tokens, c.rate, c.tool+1, c.tool, failoverKillAt, reconnectBackoff)
	w("")
	w("| | p50 | p99 | max |")
	w("|---|---:|---:|---:|")
	for _, row := range []struct {
		name string
		h    *hist
	}{
		{"kill → first token from the new owner", &c.failover},
		{"kill → hello accepted", &c.accepted},
		{"kill → dead node's lease expired", &c.expiryWait},
		{"lease expired → first token", &c.takeover},
		{fmt.Sprintf("implied with the default TTL (%v)", defaultLeaseTTL), &c.implied},
	} {
		w("| %s | %s | %s | %s |", row.name, ms(row.h.quantile(0.5)), ms(row.h.quantile(0.99)), ms(row.h.max))
	}
	w("")
	w("| not recovered | hellos | answered moved | gaps | dups | re-streamed tokens | tokens only in the snapshot | continued off a segment boundary | snapshot text with gaps or dups | first token not after the snapshot's | runs not ended | taken up by |")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
	var by []string
	for node, n := range c.takenBy {
		by = append(by, fmt.Sprintf("%s %d", node, n))
	}
	sort.Strings(by)
	w("| %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s |", c.notRecovered, c.attempts, c.moved, c.gaps, c.dups,
		c.restreamed, c.snapOnly, c.offBoundary, c.badText, c.wrongResume, c.incomplete, strings.Join(by, ", "))
	w("")
	w("Segments stored interrupted (open when node1 died, and kept because a client was subscribed when the run was taken up): %d, %d of them empty.", c.interrupted, c.interruptedEmpty)
	w("")
	w("Implied with the default TTL: each session's wait for the lease to expire scaled by %v/%v, plus its takeover after expiry. Re-streamed: tokens a tab had seen live before the kill that the new owner streamed again, in a new segment (the text of an open segment is stored when it ends, so the run continues from its last finished segment); they are not counted as duplicates.", defaultLeaseTTL, c.ttl)
	if c.firstFail != "" {
		w("")
		w("- first client problem: `%s`", c.firstFail)
	}
	w("")
	if rl := c.relay; rl != nil {
		w("**Relay cost**: %d sessions × %d tabs owned by node2, R=%d, coalescing off, %v window after %v warm-up; the same runs measured with every tab connected to node2 directly, then to node3 (which relays the hello to node2), then to node3's `/v1/ws?session=<id>` (reverse-proxied to node2). Server CPU is node2's and node3's together.",
			rl.sessions, rl.tabs, rl.rate, rl.window, rl.warmup)
		w("")
		w("| connection | frames/s | p50 | p99 | p999 | server CPU/frame | ×direct CPU | node2 cores | node3 cores | client cores | gaps | dups | dropped |")
		w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, f := range rl.rows {
			ratio := ""
			if d := rl.rows[0]; f.target != d.target && d.cpuPerFrame > 0 {
				ratio = fmt.Sprintf("%.2f", float64(f.cpuPerFrame)/float64(d.cpuPerFrame))
			}
			cores := append(f.nodeCores, 0, 0)
			w("| %s | %.0f | %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %d | %d | %d |", f.target, f.framesPerSec, ms(f.p50), ms(f.p99), ms(f.p999),
				us(f.cpuPerFrame), ratio, cores[0], cores[1], f.clientCPU, f.gaps, f.dups, f.closed)
		}
		w("")
		for i, v := range rl.via {
			w("- %s: node3 %s.", rl.rows[i+1].target, v)
		}
		if rl.skipped != "" {
			w("Relayed and proxied not measured: %s.", rl.skipped)
		}
		w("")
	}
	return strings.TrimRight(b.String(), "\n")
}

// write puts text between block's markers in path, keeping what is outside them; a file
// without them gets them appended.
func write(path, name, text string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	beginMarker, endMarker := markers(name)
	block := beginMarker + "\n\n" + text + "\n\n" + endMarker
	i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker)
	if i >= 0 && j > i {
		s = s[:i] + block + s[j+len(endMarker):]
	} else {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += "\n" + block + "\n"
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

func machine() string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
		f.Close()
	}
	mem := ""
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
				mem = fmt.Sprintf(", %.1f GiB memory", float64(kb)/(1<<20))
			}
		}
		f.Close()
	}
	return fmt.Sprintf("%d cores (%s)%s, %s %s/%s", runtime.NumCPU(), cpu, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func makeFlags(command string) string {
	// make bench passes -chatd bin/chatd and -peer bin/chatd-peer itself.
	var rest []string
	fields := strings.Fields(strings.TrimPrefix(command, "chatd-bench"))
	for i := 0; i < len(fields); i++ {
		if i+1 < len(fields) && (fields[i] == "-chatd" && fields[i+1] == "bin/chatd" || fields[i] == "-peer" && fields[i+1] == "bin/chatd-peer") {
			i++
			continue
		}
		rest = append(rest, fields[i])
	}
	if len(rest) == 0 {
		return ""
	}
	return " BENCH_FLAGS='" + strings.Join(rest, " ") + "'"
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// writes formats write system calls per frame ("n/a" when not known).
// perToken writes bytes per token, "n/a" when not known.
func perToken(b float64) string {
	if b < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f B", b)
}

func writes(perFrame float64) string {
	if perFrame < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", perFrame)
}

func us(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}
