// Command chatd-bench measures chatd: it starts chatd as its own process on a real
// PostgreSQL with the synthetic model (CHATD_AGENT=synth), drives it with real WebSocket
// clients on this machine, and measures a minimal WebSocket server pushing the same
// frames in the same run, so every figure has the physical limit beside it, and, with
// -peer, a server built on the Centrifuge library (bench/centrifuge). It prints a
// table and writes it to docs/benchmarks.md. See docs/benchmarks.md for what each
// scenario does and how to read it.
//
//	make bench                         # quick mode, about 5 minutes on 2 cores
//	make bench BENCH_FLAGS=-full       # longer windows and more cases
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"strings"
	"syscall"
	"time"
)

type options struct {
	chatd       string
	peer        string // the Centrifuge peer's binary; "" skips it
	databaseURL string
	out         string
	full        bool
	scenarios   map[string]bool

	sessions int
	tabs     int
	rate     int
	warmup   time.Duration
	window   time.Duration
	coalesce []time.Duration

	idle        int
	idleTabs    int
	compression bool
	cores       []int // the cores sweep's core counts
	// idleHistory is the turns of each session's conversation in the idle scenario with
	// histories (0: skipped), over idleHistorySessions sessions; idleLastTurn the tokens
	// of one more turn each session streams live before it goes idle (0: none), in
	// idleLastTurnWaves waves one after another.
	idleHistory, idleHistorySessions, idleLastTurn, idleLastTurnWaves int

	stormDown     time.Duration
	stormCoalesce time.Duration
	stormSpread   time.Duration

	storageRuns   int
	storageTokens []int
	dbDelay       time.Duration
	delaySessions int

	clusterSessions int
	leaseTTL        time.Duration
	relaySessions   int
	relayTabs       int

	scale scaleOptions

	profileDir string
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-serve-baseline" {
		if err := serveBaseline(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "baseline:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatd-bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "chatd-bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("chatd-bench", flag.ContinueOnError)
	fs.StringVar(&o.chatd, "chatd", "bin/chatd", "the chatd binary to measure")
	fs.StringVar(&o.peer, "peer", "", "the Centrifuge peer's binary (bench/centrifuge, make bench builds bin/chatd-peer), measured beside chatd in fan-out, storm, idle and the scale curve; empty to skip it")
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL server URL; a fresh database is created on it for each chatd process (DATABASE_URL)")
	fs.StringVar(&o.out, "out", "docs/benchmarks.md", "file whose generated section gets the results; empty to only print them")
	fs.BoolVar(&o.full, "full", false, "full mode: longer windows, larger storage runs, more coalescing windows")
	scen := fs.String("scenarios", "fanout,storm,snapstorm,idle,storage,scale", "scenarios to run, comma-separated: fanout, storm, snapstorm, idle, storage, scale, cluster, streamlog, cores (storm and snapstorm run on the fan-out's sessions; cluster, three chatd nodes on one database, streamlog, the stream log's cost, and cores, the fan-out at each -cores, are not in the default set)")
	fs.IntVar(&o.sessions, "sessions", 1000, "fan-out: sessions (S)")
	fs.IntVar(&o.tabs, "tabs", 3, "fan-out: tabs per session (T)")
	fs.IntVar(&o.rate, "rate", 50, "fan-out: tokens per second per run (R)")
	fs.DurationVar(&o.warmup, "warmup", 0, "fan-out: time after the runs start before measuring (default 3s, full 5s)")
	fs.DurationVar(&o.window, "window", 0, "fan-out: measurement window (default 8s, full 30s)")
	coalesce := fs.String("coalesce", "", "fan-out: CHATD_COALESCE_DELTAS values to measure chatd with: adaptive, 0 (off) or a window (default 0,adaptive,25ms; full 0,adaptive,10ms,25ms,50ms)")
	fs.IntVar(&o.idle, "idle", 10000, "idle density: idle subscribed connections (N)")
	fs.IntVar(&o.idleTabs, "idle-tabs", 1, "idle density: connections per session")
	cores := fs.String("cores", "2,4,8,16", "cores sweep (scenario cores): server core counts (GOMAXPROCS) to measure the fan-out at")
	fs.BoolVar(&o.compression, "compression", false, "fan-out: also measure chatd with CHATD_COMPRESSION=on and clients that offer permessage-deflate")
	fs.IntVar(&o.idleHistory, "idle-history", 30, "idle density with histories: turns of each session's conversation (about 2 KiB of text each), measured with CHATD_QUIET_RELEASE off and 1s; 0 skips it")
	fs.IntVar(&o.idleHistorySessions, "idle-history-sessions", 2000, "idle density with histories: sessions (one tab each)")
	fs.IntVar(&o.idleLastTurn, "idle-last-turn", 300, "idle density with histories: tokens of a last turn each session streams live to its tab before it goes idle, as a tab left open after an answer (0: none)")
	fs.IntVar(&o.idleLastTurnWaves, "idle-last-turn-waves", 1, "idle density with histories: the last turns stream in this many waves, one after another, so that at most sessions/waves stream at once (1: all at once)")
	fs.DurationVar(&o.stormDown, "storm-down", time.Second, "reconnect storm: how long every client stays disconnected")
	stormCoalesce := fs.String("storm-coalesce", "adaptive", "reconnect storm: runs on the fan-out of chatd with this CHATD_COALESCE_DELTAS (the first measured if it is not)")
	fs.DurationVar(&o.stormSpread, "storm-spread", 2*time.Second, "reconnect storm: the reconnects are spread over this long")
	fs.IntVar(&o.storageRuns, "storage-runs", 20, "storage cost: runs per case")
	tokens := fs.String("storage-tokens", "", "storage cost: tokens per run to compare (default 10,100,1000; full adds 10000)")
	fs.DurationVar(&o.dbDelay, "db-delay", 200*time.Millisecond, "storage cost: delay injected between chatd and PostgreSQL")
	fs.IntVar(&o.delaySessions, "delay-sessions", 100, "storage cost: sessions streaming (one tab each, at -rate) while the database is slow")
	fs.IntVar(&o.clusterSessions, "cluster-sessions", 50, "cluster: sessions (one tab each) streaming on the node that is killed")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 2*time.Second, "cluster: the nodes' CHATD_LEASE_TTL (failover times are also scaled to the default, 10s)")
	fs.IntVar(&o.relaySessions, "relay-sessions", 100, "cluster: sessions streaming (at -rate) for the relay's cost")
	fs.IntVar(&o.relayTabs, "relay-tabs", 3, "cluster: tabs per session for the relay's cost")
	finishScale := scaleFlags(fs)
	fs.StringVar(&o.profileDir, "profile-dir", "", "save the CPU profile of each server's fan-out window (chatd's, the baseline's and the peer's) and what it allocated by then, and chatd's heap and goroutine profiles with the idle connections here (go tool pprof reads them)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.databaseURL == "" {
		return o, errors.New("no database: set DATABASE_URL or -database-url (make bench starts the project's PostgreSQL)")
	}
	o.scenarios = map[string]bool{}
	for _, s := range strings.Split(*scen, ",") {
		switch s = strings.TrimSpace(s); s {
		case "fanout", "storm", "snapstorm", "idle", "storage", "scale", "cluster", "streamlog", "cores":
			o.scenarios[s] = true
		case "":
		default:
			return o, fmt.Errorf("-scenarios: unknown scenario %q", s)
		}
	}
	def := func(d *time.Duration, quick, full time.Duration) {
		if *d == 0 {
			*d = quick
			if o.full {
				*d = full
			}
		}
	}
	def(&o.warmup, 3*time.Second, 5*time.Second)
	def(&o.window, 8*time.Second, 30*time.Second)
	if *coalesce == "" {
		*coalesce = "0,adaptive,25ms"
		if o.full {
			*coalesce = "0,adaptive,10ms,25ms,50ms"
		}
	}
	for _, s := range strings.Split(*coalesce, ",") {
		d, err := parseCoalesce(s)
		if err != nil {
			return o, fmt.Errorf("-coalesce: %w", err)
		}
		o.coalesce = append(o.coalesce, d)
	}
	var err error
	if o.stormCoalesce, err = parseCoalesce(*stormCoalesce); err != nil {
		return o, fmt.Errorf("-storm-coalesce: %w", err)
	}
	if err := finishScale(&o); err != nil {
		return o, err
	}
	if o.cores, err = parseCores(*cores); err != nil {
		return o, err
	}
	if *tokens == "" {
		*tokens = "10,100,1000"
		if o.full {
			*tokens += ",10000"
		}
	}
	for _, s := range strings.Split(*tokens, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 1 {
			return o, fmt.Errorf("-storage-tokens: %q is not a positive number", s)
		}
		o.storageTokens = append(o.storageTokens, n)
	}
	switch {
	case o.sessions < 1 || o.tabs < 1 || o.rate < 1:
		return o, errors.New("-sessions, -tabs and -rate must be at least 1")
	case o.idle < 1 || o.idleTabs < 1 || o.storageRuns < 1 || o.delaySessions < 1:
		return o, errors.New("-idle, -idle-tabs, -storage-runs and -delay-sessions must be at least 1")
	case o.clusterSessions < 1 || o.relaySessions < 1 || o.relayTabs < 1:
		return o, errors.New("-cluster-sessions, -relay-sessions and -relay-tabs must be at least 1")
	case o.leaseTTL < 300*time.Millisecond:
		return o, errors.New("-lease-ttl must be at least 300ms (chatd refuses less)")
	}
	return o, nil
}

func run(ctx context.Context, o options) error {
	raiseFileLimit()
	started := time.Now()
	r := &report{opts: o, started: started, command: commandLine()}
	b := &bench{opts: o, report: r}
	defer b.dropDatabases()

	if o.scenarios["fanout"] || o.scenarios["storm"] || o.scenarios["snapstorm"] {
		if err := b.fanout(ctx); err != nil {
			return err
		}
	}
	if o.scenarios["idle"] {
		if err := b.idleDensity(ctx); err != nil {
			return err
		}
		if err := b.peerIdle(ctx); err != nil {
			return err
		}
	}
	if o.scenarios["storage"] {
		if err := b.storage(ctx); err != nil {
			return err
		}
	}
	if o.scenarios["scale"] {
		if err := b.scale(ctx); err != nil {
			return err
		}
	}
	if o.scenarios["cores"] {
		if err := b.coresSweep(ctx); err != nil {
			return err
		}
	}
	if o.scenarios["cluster"] {
		if err := b.cluster(ctx); err != nil {
			return err
		}
	}
	if o.scenarios["streamlog"] {
		if err := b.streamLog(ctx); err != nil {
			return err
		}
	}
	r.elapsed = time.Since(started)
	for _, blk := range r.blocks() {
		fmt.Println(blk.text)
		fmt.Println()
		if o.out != "" {
			if err := write(o.out, blk.name, blk.text); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "chatd-bench: %s results written to %s\n", blk.name, o.out)
		}
	}
	return nil
}

// raiseFileLimit lifts the soft limit on open files to the hard one: each connection is a
// descriptor here and one in the server, which inherits the limit.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

func commandLine() string {
	args := make([]string, 0, len(os.Args)-1)
	for _, a := range os.Args[1:] {
		if a == "" {
			a = `""` // -out "" must still read as such
		}
		args = append(args, a)
	}
	return strings.TrimSpace("chatd-bench " + strings.Join(args, " "))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// adaptive is chatd's adaptive coalescing (conversation.CoalesceAdaptive) among the
// -coalesce values.
const adaptive time.Duration = -1

// parseCoalesce reads a CHATD_COALESCE_DELTAS value: adaptive, 0 or off, or a window.
func parseCoalesce(s string) (time.Duration, error) {
	switch s = strings.TrimSpace(s); s {
	case "adaptive":
		return adaptive, nil
	case "off":
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not adaptive, off or a duration", s)
	}
	return d, nil
}

// coalesceEnv is CHATD_COALESCE_DELTAS for d.
func coalesceEnv(d time.Duration) string {
	if d == adaptive {
		return "CHATD_COALESCE_DELTAS=adaptive"
	}
	return fmt.Sprintf("CHATD_COALESCE_DELTAS=%v", d)
}

// coalesceName is how the report names chatd measured with d.
func coalesceName(d time.Duration) string {
	switch {
	case d == adaptive:
		return "chatd, adaptive"
	case d > 0:
		return fmt.Sprintf("chatd, coalesce %v", d)
	}
	return "chatd"
}
