package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The scale curve: the fan-out at several session counts S (T tabs, R tokens/s each), on
// a fresh process of each server per point, so the curve shows where each one leaves the
// physical limit behind, and how CPU per token and p99 grow on the way.

type scaleOptions struct {
	points         []int // S
	warmup, window time.Duration
	plot           string // -plot: where the PNG goes; "" to derive it from -out
}

// scaleFlags registers the scale curve's flags; the function it returns checks them and
// fills o.scale once they are parsed.
func scaleFlags(fs *flag.FlagSet) func(o *options) error {
	points := fs.String("scale", "100,300,1000,3000", "scale curve: session counts S to measure the fan-out at (T=-tabs, R=-rate)")
	warmup := fs.Duration("scale-warmup", 0, "scale curve: warm-up before each point's window (default 2s, full 5s)")
	window := fs.Duration("scale-window", 0, "scale curve: each point's measurement window (default 4s, full 15s)")
	plot := fs.String("plot", "", "scale curve: write its PNG here (default: beside -out, as <out without .md>-scale-<mode>.png; none when -out is empty)")
	return func(o *options) error {
		o.scale = scaleOptions{warmup: *warmup, window: *window, plot: *plot}
		if o.scale.warmup == 0 {
			o.scale.warmup = map[bool]time.Duration{false: 2 * time.Second, true: 5 * time.Second}[o.full]
		}
		if o.scale.window == 0 {
			o.scale.window = map[bool]time.Duration{false: 4 * time.Second, true: 15 * time.Second}[o.full]
		}
		for _, s := range strings.Split(*points, ",") {
			var n int
			if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 {
				return fmt.Errorf("-scale: %q is not a positive number", s)
			}
			o.scale.points = append(o.scale.points, n)
		}
		return nil
	}
}

// scaleServer is one line of the scale curve: how to start a fresh server for a point,
// how to connect the point's sessions to it and start their runs, and how to stop it.
// Another server is one more entry in scaleServers.
type scaleServer struct {
	name  string
	start func(ctx context.Context) (*server, error)
	// open connects s sessions of t tabs each to srv and starts one run per session,
	// content being the synthetic model's spec (tokens, rate). nil: openAndStart, in
	// the server's own protocol (openFor: chatd's, which the baseline speaks too, or the
	// Centrifuge peer's).
	open func(ctx context.Context, g *gen, srv *server, s, t int, content string) ([]*session, error)
	// stop ends the server once its point is measured; nil: SIGTERM and a clean exit
	// (server.stop).
	stop func(srv *server) error
}

// scaleServers are the curve's lines: the baseline, chatd with coalescing off, adaptive
// (its default) and a fixed 25 ms window, and the Centrifuge peer (peer.go) unless -peer
// is empty.
func (b *bench) scaleServers() []scaleServer {
	chatd := func(name string, coalesce time.Duration) scaleServer {
		return scaleServer{name: name, start: func(ctx context.Context) (*server, error) {
			return b.startChatd(ctx, name, "", coalesceEnv(coalesce))
		}}
	}
	servers := []scaleServer{
		{name: "baseline", start: b.startBaseline, stop: killServer},
		chatd("chatd, coalesce off", 0),
		chatd("chatd, adaptive", adaptive),
		chatd("chatd, coalesce 25ms", 25*time.Millisecond),
	}
	if b.opts.peer != "" {
		// Its clients speak Centrifuge's protocol (openFor, from srv.peer); it shuts
		// down cleanly on SIGTERM like chatd.
		servers = append(servers, scaleServer{name: peerName, start: b.startPeer, open: openAndStart})
	}
	return servers
}

// openAndStart connects s sessions of t tabs each to srv in its protocol (openFor) and
// starts one run per session.
func openAndStart(ctx context.Context, g *gen, srv *server, s, t int, content string) ([]*session, error) {
	sessions, err := openFor(srv)(ctx, g, srv.addr, s, t)
	if err != nil {
		return nil, err
	}
	if err := startRuns(ctx, sessions, content); err != nil {
		dropAll(sessions)
		return nil, err
	}
	return sessions, nil
}

// killServer stops a server that has nothing to shut down cleanly.
func killServer(s *server) error { s.kill(); return nil }

// scaleRow is one point of one server's line.
type scaleRow struct {
	sessions int
	fanRow
	failed string // why the point was not measured; "" when it was
}

// cpuPerToken is the server CPU per delivered token (a coalesced frame carries several).
func (r scaleRow) cpuPerToken() time.Duration {
	if r.failed != "" || r.tokensPerFrame <= 0 {
		return 0
	}
	return time.Duration(float64(r.cpuPerFrame) / r.tokensPerFrame)
}

type scaleResult struct {
	tabs, rate     int
	warmup, window time.Duration
	points         []int
	servers        []string
	rows           []scaleRow // by S, then server, in the order of servers
	plot           string     // the PNG written; "" for none
	plotErr        string
}

func (b *bench) scale(ctx context.Context) error {
	o := b.opts
	servers := b.scaleServers()
	res := &scaleResult{tabs: o.tabs, rate: o.rate, warmup: o.scale.warmup, window: o.scale.window, points: o.scale.points}
	for _, sv := range servers {
		res.servers = append(res.servers, sv.name)
	}
	b.report.scale = res
	var lim syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	for _, s := range o.scale.points {
		for _, sv := range servers {
			row := scaleRow{sessions: s, fanRow: fanRow{target: sv.name}}
			// Each connection is a descriptor here and one in the server, which
			// inherits this process's limit.
			if need := uint64(s*o.tabs + 512); lim.Cur > 0 && lim.Cur < need {
				row.failed = fmt.Sprintf("needs about %d open files, the limit is %d", need, lim.Cur)
			} else {
				var err error
				row.fanRow, err = b.scalePoint(ctx, sv, s)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err != nil {
					row.fanRow = fanRow{target: sv.name}
					row.failed = err.Error()
				}
			}
			if row.failed != "" {
				logf("scale: S=%d %s: not measured: %s", s, sv.name, row.failed)
			}
			res.rows = append(res.rows, row)
		}
	}
	if path := scalePlotPath(o.out, o.scale.plot, o.full); path != "" {
		if err := writePlot(path, res.panels(), 1280, 560); err != nil {
			res.plotErr = err.Error()
			logf("scale: %v", err)
		} else {
			res.plot = path
			logf("scale: plot written to %s", path)
		}
	}
	return nil
}

// scalePoint measures one server at S sessions, on a fresh process.
func (b *bench) scalePoint(ctx context.Context, sv scaleServer, s int) (row fanRow, err error) {
	o := b.opts
	srv, err := sv.start(ctx)
	if err != nil {
		return fanRow{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.kill()
		}
		// measure panics when it cannot read the server's CPU time: the server died,
		// which at the top of the curve is a result, not the end of the run.
		if p := recover(); p != nil {
			err = fmt.Errorf("%s failed during the point: %v\n%s", sv.name, p, tail(srv.logs.String(), 1000))
		}
	}()
	runFor := o.scale.warmup + o.scale.window + 5*time.Second
	content := fmt.Sprintf("tokens=%d rate=%d", int(math.Ceil(runFor.Seconds()*float64(o.rate))), o.rate)
	g := &gen{}
	logf("scale: S=%d %s: connecting %d × %d tabs, then %s", s, sv.name, s, o.tabs, content)
	open := sv.open
	if open == nil {
		open = openAndStart
	}
	sessions, err := open(ctx, g, srv, s, o.tabs, content)
	if err != nil {
		return fanRow{}, err
	}
	row, err = measure(ctx, g, srv, sessions, o.scale.warmup, o.scale.window)
	// Cut, not closed: the server is stopped next, and thousands of close handshakes
	// with a saturated server would take longer than the point.
	dropAll(sessions)
	if err != nil {
		return fanRow{}, err
	}
	stop := sv.stop
	if stop == nil {
		stop = (*server).stop
	}
	stopped = true
	if err := stop(srv); err != nil {
		return fanRow{}, err
	}
	row.target = sv.name
	logf("scale: S=%d %s: %.0f frames/s, p50 %v p99 %v, %v CPU/frame, %.2f writes/frame, gaps %d dups %d",
		s, sv.name, row.framesPerSec, row.p50, row.p99, row.cpuPerFrame, row.writesPerFrame, row.gaps, row.dups)
	return row, nil
}

// dropAll cuts every tab's connection that is open.
func dropAll(sessions []*session) {
	_ = parallel(context.Background(), 64, len(sessions), func(i int) error {
		for _, t := range sessions[i].tabs {
			if t.ws != nil {
				t.drop()
			}
		}
		return nil
	})
}

// scalePlotPath is where the scale curve's PNG goes: -plot, else beside -out (none when
// -out is empty), one per mode like the results blocks.
func scalePlotPath(out, plot string, full bool) string {
	if plot != "" {
		return plot
	}
	if out == "" {
		return ""
	}
	mode := "quick"
	if full {
		mode = "full"
	}
	return strings.TrimSuffix(out, filepath.Ext(out)) + "-scale-" + mode + ".png"
}

// row returns the row of server at S, if any.
func (r *scaleResult) row(s int, server string) (scaleRow, bool) {
	for _, row := range r.rows {
		if row.sessions == s && row.target == server {
			return row, true
		}
	}
	return scaleRow{}, false
}

// ratios returns row's CPU per token and p99 as multiples of ref's at the same S, or ""
// when ref was not measured there (or row is ref).
func (r *scaleResult) ratios(row scaleRow, ref string) (cpu, p99 string) {
	base, ok := r.row(row.sessions, ref)
	if !ok || row.target == ref || base.failed != "" || base.cpuPerToken() <= 0 || base.p99 <= 0 {
		return "", ""
	}
	return fmt.Sprintf("%.2f", float64(row.cpuPerToken())/float64(base.cpuPerToken())),
		fmt.Sprintf("%.2f", float64(row.p99)/float64(base.p99))
}

// panels are the plot's: CPU per token against S, p99 against S, a line per server.
func (r *scaleResult) panels() []plotPanel {
	xs := make([]float64, len(r.points))
	for i, s := range r.points {
		xs[i] = float64(s)
	}
	xLabel := fmt.Sprintf("sessions S (T=%d tabs, R=%d tokens/s)", r.tabs, r.rate)
	cpu := plotPanel{title: "server CPU per delivered token", xLabel: xLabel, yLabel: "µs", xTicks: xs}
	p99 := plotPanel{title: "p99 token latency", xLabel: xLabel, yLabel: "ms (log)", logY: true, xTicks: xs}
	for _, name := range r.servers {
		c := plotSeries{name: name, x: xs}
		p := plotSeries{name: name, x: xs}
		for _, s := range r.points {
			row, ok := r.row(s, name)
			if !ok || row.failed != "" || row.latencySamples == 0 {
				c.y, p.y = append(c.y, math.NaN()), append(p.y, math.NaN())
				continue
			}
			c.y = append(c.y, float64(row.cpuPerToken())/float64(time.Microsecond))
			p.y = append(p.y, float64(row.p99)/float64(time.Millisecond))
		}
		cpu.series, p99.series = append(cpu.series, c), append(p99.series, p)
	}
	return []plotPanel{cpu, p99}
}

// markdown writes the scale curve's table (and the plot's link, relative to the results
// file out).
func (r *scaleResult) markdown(w func(format string, args ...any), out string) {
	pts := make([]string, len(r.points))
	for i, s := range r.points {
		pts[i] = fmt.Sprint(s)
	}
	w("**Scale curve**: the fan-out at S = %s sessions × T=%d tabs, R=%d tokens/s per run, each point on a fresh process of each server, %v window after %v warm-up. CPU per token is the server's CPU per delivered frame divided by the tokens a frame carries.",
		strings.Join(pts, ", "), r.tabs, r.rate, r.window, r.warmup)
	w("")
	w("| S | server | frames/s | tokens/frame | p50 | p99 | server CPU/token | ×baseline CPU/token | ×baseline p99 | ×%s CPU/token | ×%s p99 | write syscalls/frame | bytes written/token | server cores | client cores | gaps | dups | dropped |", peerName, peerName)
	w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var notes []string
	for _, row := range r.rows {
		if row.failed != "" {
			w("| %d | %s | not measured | | | | | | | | | | | | | | | |", row.sessions, row.target)
			notes = append(notes, fmt.Sprintf("- S=%d, %s: not measured: `%s`", row.sessions, row.target, oneLine(row.failed)))
			continue
		}
		cpuRatio, p99Ratio := r.ratios(row, "baseline")
		peerCPU, peerP99 := r.ratios(row, peerName)
		w("| %d | %s | %.0f | %.2f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f | %.2f | %d | %d | %d |",
			row.sessions, row.target, row.framesPerSec, row.tokensPerFrame, ms(row.p50), ms(row.p99), us(row.cpuPerToken()),
			cpuRatio, p99Ratio, peerCPU, peerP99, writes(row.writesPerFrame), perToken(row.bytesPerToken), row.serverCPU, row.clientCPU, row.gaps, row.dups, row.closed)
		if row.firstClientFail != "" {
			notes = append(notes, fmt.Sprintf("- S=%d, %s: first client problem: `%s`", row.sessions, row.target, oneLine(row.firstClientFail)))
		}
	}
	w("")
	for _, n := range notes {
		w("%s", n)
	}
	if len(notes) > 0 {
		w("")
	}
	switch {
	case r.plot != "":
		link := r.plot
		if out != "" {
			if rel, err := filepath.Rel(filepath.Dir(out), r.plot); err == nil {
				link = filepath.ToSlash(rel)
			}
		}
		w("![Scale curve: server CPU per delivered token and p99 token latency against S, one line per server](%s)", link)
		w("")
	case r.plotErr != "":
		w("Plot not written: %s.", r.plotErr)
		w("")
	}
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
