package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"time"
)

// coresRow is one server's fan-out with its process limited to cores (GOMAXPROCS).
type coresRow struct {
	cores int
	fanRow
}

// parseCores reads -cores: core counts, each at least 1.
func parseCores(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
			return nil, fmt.Errorf("-cores: %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// coresSweep is the fan-out (S=-sessions, T=-tabs, R=-rate) of the baseline, chatd with
// coalescing off and chatd as configured by default (adaptive), each server process
// limited to each of -cores (GOMAXPROCS): the curve of cost against cores in one
// command. A count above the machine's is measured at the machine's and says so.
func (b *bench) coresSweep(ctx context.Context) error {
	o := b.opts
	runFor := o.warmup + o.window + 3*time.Second
	content := fmt.Sprintf("tokens=%d rate=%d", int(math.Ceil(runFor.Seconds()*float64(o.rate))), o.rate)
	for _, n := range o.cores {
		if n > runtime.NumCPU() {
			logf("cores: %d asked, the machine has %d; measured at %d", n, runtime.NumCPU(), runtime.NumCPU())
			n = runtime.NumCPU()
		}
		limit := fmt.Sprintf("GOMAXPROCS=%d", n)
		starts := []struct {
			name  string
			start func() (*server, error)
		}{
			{"baseline", func() (*server, error) { return b.startBaselineEnv(ctx, []string{limit}) }},
			{"chatd, coalesce off", func() (*server, error) {
				return b.startChatd(ctx, fmt.Sprintf("chatd, coalesce off, %d cores", n), "", coalesceEnv(0), limit)
			}},
			{"chatd, adaptive", func() (*server, error) {
				return b.startChatd(ctx, fmt.Sprintf("chatd, adaptive, %d cores", n), "", coalesceEnv(adaptive), limit)
			}},
		}
		for _, s := range starts {
			srv, err := s.start()
			if err != nil {
				return err
			}
			row, err := b.fanoutOne(ctx, srv, content, false)
			if err != nil {
				srv.kill()
				return err
			}
			row.target = s.name
			if s.name == "baseline" {
				srv.kill() // the baseline has nothing to shut down cleanly
			} else if err := srv.stop(); err != nil {
				return err
			}
			b.report.cores = append(b.report.cores, coresRow{cores: n, fanRow: row})
		}
	}
	return nil
}

// coresMarkdown writes the sweep's table: per core count, each server against the
// baseline of the same count.
func (r *report) coresMarkdown(w func(format string, args ...any)) {
	o := r.opts
	w("**Cores sweep**: the fan-out at S=%d × T=%d, R=%d tokens/s per run, each server process limited to each core count (GOMAXPROCS; the load generator is not), %v window after %v warm-up.",
		o.sessions, o.tabs, o.rate, o.window, o.warmup)
	w("")
	w("| cores | server | frames/s | tokens/frame | p50 | p99 | server CPU/token | ×baseline CPU/token | ×baseline p99 | bytes written/token | server cores used | gaps | dups |")
	w("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, row := range r.cores {
		var base *fanRow
		for i := range r.cores {
			if r.cores[i].cores == row.cores && r.cores[i].target == "baseline" {
				base = &r.cores[i].fanRow
			}
		}
		cpu, p99 := "", ""
		if row.target != "baseline" {
			cpu, p99 = ratios(&row.fanRow, base)
		}
		w("| %d | %s | %.0f | %.2f | %s | %s | %s | %s | %s | %s | %.2f | %d | %d |", row.cores, row.target, row.framesPerSec, row.tokensPerFrame,
			ms(row.p50), ms(row.p99), us(perTokenCPU(row.fanRow)), cpu, p99, perToken(row.bytesPerToken), row.serverCPU, row.gaps, row.dups)
	}
	w("")
}

// perTokenCPU is a fan-out row's server CPU per delivered token.
func perTokenCPU(f fanRow) time.Duration {
	if f.tokensPerFrame <= 0 {
		return 0
	}
	return time.Duration(float64(f.cpuPerFrame) / f.tokensPerFrame)
}
