package main

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/chatd/chatd/internal/delayproxy"
)

// storageRate is the storage runs' pace in tokens per second.
const storageRate = 2000

type storageRow struct {
	tokens, tools, segments int
	perRun                  float64
	bound                   int
	breakdown               string
}

type delayResult struct {
	delay                     time.Duration
	sessions, rate            int
	direct, delayed           fanRow
	directFirst, delayedFirst hist // chat.send to the run's first token
	skipped                   string
}

// storage counts the database statements runs cost as their length grows, then measures
// token latency with a slow database.
func (b *bench) storage(ctx context.Context) error {
	o := b.opts
	// Coalescing off, so token latency is the pipeline's alone.
	srv, err := b.startChatd(ctx, "chatd (storage)", "", "CHATD_COALESCE_DELTAS=0")
	if err != nil {
		return err
	}
	defer srv.kill()
	g := &gen{}
	ss, err := openSessions(ctx, g, srv.addr, o.storageRuns, 1)
	if err != nil {
		return err
	}
	var done int64
	for _, tools := range []int{0, 2} {
		for _, tokens := range o.storageTokens {
			m0, err := scrape(srv.adminAddr)
			if err != nil {
				return err
			}
			logf("storage: %d runs of %d tokens with %d tool calls", len(ss), tokens, tools)
			// Fast, but not so fast that a client falls 1 MiB behind and is dropped (4008).
			if err := startRuns(ctx, ss, fmt.Sprintf("tokens=%d rate=%d tools=%d", tokens, storageRate, tools)); err != nil {
				return err
			}
			done++
			if err := waitRuns(ctx, ss, done, 2*time.Minute); err != nil {
				return err
			}
			m1, err := scrape(srv.adminAddr)
			if err != nil {
				return err
			}
			row := storageRow{tokens: tokens, tools: tools, segments: tools + 1, bound: 2*(tools+1+tools) + 4}
			var parts []string
			for name, n := range m1.statementsSince(m0) {
				if name == "StreamLogSync" {
					// The node's, one per interval whatever the runs: not a run's
					// statement (the stream log scenario measures it).
					continue
				}
				if d := n / float64(len(ss)); d > 0 {
					row.perRun += d
					parts = append(parts, fmt.Sprintf("%s %.3g", name, d))
				}
			}
			sort.Strings(parts)
			row.breakdown = strings.Join(parts, ", ")
			b.report.storage = append(b.report.storage, row)
		}
	}
	if c := sumCounts(allTabs(ss)); c.gaps+c.dups > 0 {
		return fmt.Errorf("storage runs: %d gaps and %d duplicates", c.gaps, c.dups)
	}
	closeAll(ss)
	res, err := b.slowDatabase(ctx, srv)
	if err != nil {
		return err
	}
	b.report.delay = res
	return srv.stop()
}

// slowDatabase measures token latency on direct, then on a chatd whose database is
// behind a proxy that delays every round trip.
func (b *bench) slowDatabase(ctx context.Context, direct *server) (*delayResult, error) {
	o := b.opts
	res := &delayResult{delay: o.dbDelay, sessions: o.delaySessions, rate: o.rate}
	warmup, window := 2*time.Second, 6*time.Second
	if o.full {
		warmup, window = 5*time.Second, 20*time.Second
	}
	content := fmt.Sprintf("tokens=%d rate=%d", int((warmup+window+20*time.Second).Seconds())*o.rate, o.rate)
	// Streaming is measured once every run has started, the runs' starts separately.
	measureOn := func(srv *server, first *hist) (fanRow, error) {
		g := &gen{}
		ss, err := openSessions(ctx, g, srv.addr, o.delaySessions, 1)
		if err != nil {
			return fanRow{}, err
		}
		defer closeAll(ss)
		if err := startRuns(ctx, ss, content); err != nil {
			return fanRow{}, err
		}
		started := 0
		ok, err := poll(ctx, time.Minute, func() (bool, error) {
			started = 0
			for _, s := range ss {
				t := s.tabs[0]
				t.mu.Lock()
				if t.gotFirst {
					started++
				}
				t.mu.Unlock()
			}
			return started == len(ss), nil
		})
		if err == nil && !ok {
			err = fmt.Errorf("only %d of %d runs streamed within a minute", started, len(ss))
		}
		if err != nil {
			return fanRow{}, err
		}
		for _, s := range ss {
			first.add(s.tabs[0].firstToken)
		}
		return measure(ctx, g, srv, ss, warmup, window)
	}
	logf("storage: %d sessions streaming, database direct", o.delaySessions)
	var err error
	if res.direct, err = measureOn(direct, &res.directFirst); err != nil {
		return nil, err
	}
	dbURL, err := b.newDatabase(ctx)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(dbURL)
	if err != nil || u.Port() == "" {
		res.skipped = "the database URL has no TCP host:port to put a proxy in front of"
		return res, nil
	}
	proxy, err := delayproxy.Start(u.Host, o.dbDelay)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	slow, err := b.startChatd(ctx, fmt.Sprintf("chatd (database +%v)", o.dbDelay), u.String(), "CHATD_COALESCE_DELTAS=0")
	if err != nil {
		return nil, err
	}
	defer slow.kill()
	logf("storage: %d sessions streaming, database behind a %v delay", o.delaySessions, o.dbDelay)
	if res.delayed, err = measureOn(slow, &res.delayedFirst); err != nil {
		return nil, err
	}
	return res, slow.stop()
}
