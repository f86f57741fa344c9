package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The stream log's cost (issue 23): the fan-out (S sessions × T tabs, R tokens/s, no
// coalescing) on chatd with CHATD_STREAM_SYNC=off and with the default 50ms, in turns
// (off, on, off, on: the machine's drift falls on both), each on a fresh process and
// database. Per window: the server's CPU per token, the statements per second (the
// stream log's and the rest), the bytes the stream log stored per streamed byte, and
// the write-ahead log PostgreSQL wrote per streamed byte (the whole server's, so the
// rows' cost too).

// streamLogSyncs are the CHATD_STREAM_SYNC values measured, in the order they run.
var streamLogSyncs = []time.Duration{0, 50 * time.Millisecond, 0, 50 * time.Millisecond}

type streamLogRow struct {
	sync          time.Duration // 0: off
	fan           fanRow
	cpuPerToken   time.Duration
	logPerSec     float64 // StreamLogSync statements per second
	otherPerSec   float64 // every other statement per second
	streamedBytes float64 // text the model streamed during the window (one tab's count per session)
	loggedBytes   float64 // bytes the stream log stored during the window
	walBytes      float64 // write-ahead log the database server wrote during the window
	dbCPUPerToken time.Duration
	seconds       float64
}

type streamLogResult struct {
	sessions, tabs, rate int
	rows                 []streamLogRow
}

func (b *bench) streamLog(ctx context.Context) error {
	o := b.opts
	res := &streamLogResult{sessions: o.sessions, tabs: o.tabs, rate: o.rate}
	runFor := o.warmup + o.window + 3*time.Second
	content := fmt.Sprintf("tokens=%d rate=%d", int(math.Ceil(runFor.Seconds()*float64(o.rate))), o.rate)
	for _, sync := range streamLogSyncs {
		name := "chatd, stream log off"
		value := "off"
		if sync > 0 {
			name, value = fmt.Sprintf("chatd, stream log %v", sync), sync.String()
		}
		dbURL, err := b.newDatabase(ctx)
		if err != nil {
			return err
		}
		srv, err := b.startChatd(ctx, name, dbURL, "CHATD_COALESCE_DELTAS=0", "CHATD_STREAM_SYNC="+value)
		if err != nil {
			return err
		}
		row, err := b.streamLogOne(ctx, srv, dbURL, content)
		srv.kill() // its runs need not finish
		if err != nil {
			return err
		}
		row.sync = sync
		logf("%s: %v CPU/token, %.1f stream log and %.1f other statements/s, %.2f logged and %.1f WAL bytes per streamed byte",
			name, row.cpuPerToken, row.logPerSec, row.otherPerSec, row.loggedBytes/row.streamedBytes, row.walBytes/row.streamedBytes)
		res.rows = append(res.rows, row)
	}
	b.report.streamLog = res
	return nil
}

func (b *bench) streamLogOne(ctx context.Context, srv *server, dbURL, content string) (streamLogRow, error) {
	o := b.opts
	g := &gen{}
	logf("%s: connecting %d sessions × %d tabs", srv.name, o.sessions, o.tabs)
	sessions, err := openSessions(ctx, g, srv.addr, o.sessions, o.tabs)
	if err != nil {
		return streamLogRow{}, err
	}
	defer closeAll(sessions)
	if err := startRuns(ctx, sessions, content); err != nil {
		return streamLogRow{}, err
	}
	if o.profileDir != "" {
		go func() {
			time.Sleep(o.warmup)
			seconds := max(int(o.window/time.Second)-1, 1)
			saveProfile(srv, o.profileDir, fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds), "cpu")
		}()
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return streamLogRow{}, err
	}
	defer conn.Close(ctx)
	streamed := func() float64 {
		var n int64
		for _, s := range sessions {
			n += s.tabs[0].textBytes.Load()
		}
		return float64(n)
	}
	var wal0, wal1 string
	var m0, m1 metrics
	var bytes0, bytes1 float64
	var t0, t1 time.Time
	var db0, db1 time.Duration
	row := streamLogRow{}
	row.fan, err = measureAround(ctx, g, srv, sessions, o.warmup, o.window,
		func() error {
			m0, err = scrape(srv.adminAddr)
			bytes0, t0, db0 = streamed(), time.Now(), postgresCPU()
			if err == nil {
				err = conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&wal0)
			}
			return err
		},
		func() error {
			m1, err = scrape(srv.adminAddr)
			bytes1, t1, db1 = streamed(), time.Now(), postgresCPU()
			if err == nil {
				err = conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&wal1)
			}
			return err
		})
	if err != nil {
		return streamLogRow{}, err
	}
	if err := conn.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8", wal1, wal0).Scan(&row.walBytes); err != nil {
		return streamLogRow{}, err
	}
	row.seconds = t1.Sub(t0).Seconds()
	for name, n := range m1.statementsSince(m0) {
		if name == "StreamLogSync" {
			row.logPerSec += n / row.seconds
		} else {
			row.otherPerSec += n / row.seconds
		}
	}
	row.streamedBytes = bytes1 - bytes0
	row.loggedBytes = m1.sum("chatd_stream_log_bytes_total") - m0.sum("chatd_stream_log_bytes_total")
	if row.fan.tokensPerFrame > 0 {
		row.cpuPerToken = time.Duration(float64(row.fan.cpuPerFrame) / row.fan.tokensPerFrame)
		// Per delivered token, as chatd's column: frames times the tokens a frame carries.
		if tokens := row.fan.framesPerSec * row.seconds * row.fan.tokensPerFrame; tokens > 0 {
			row.dbCPUPerToken = time.Duration(float64(db1-db0) / tokens)
		}
	}
	if c := sumCounts(allTabs(sessions)); c.gaps+c.dups > 0 {
		return streamLogRow{}, fmt.Errorf("%s: %d gaps and %d duplicates", srv.name, c.gaps, c.dups)
	}
	return row, nil
}

func (r *report) streamLogMarkdown() string {
	res := r.streamLog
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("%s", r.header())
	w("**Stream log** (`CHATD_STREAM_SYNC`): the fan-out at S=%d sessions × T=%d tabs, R=%d tokens/s per run, coalescing off, on chatd with the stream log off and at 50 ms in turns, each on a fresh process and database. CPU per token is the server's CPU per delivered frame divided by the tokens a frame carries; statements per second are chatd's (the stream log's, and every other); the byte ratios are per byte of text the model streamed (one tab's count per session): what the stream log stored, and the write-ahead log PostgreSQL wrote in the window (all of it, the segments' rows included). PostgreSQL's CPU per token is its processes' CPU in the window per delivered token, like chatd's.",
		res.sessions, res.tabs, res.rate)
	w("")
	w("| stream log | frames/s | CPU/token | PostgreSQL CPU/token | p99 | stream log statements/s | other statements/s | logged bytes / streamed byte | WAL bytes / streamed byte |")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	var off, on []time.Duration
	for _, row := range res.rows {
		name := "off"
		if row.sync > 0 {
			name = row.sync.String()
			on = append(on, row.cpuPerToken)
		} else {
			off = append(off, row.cpuPerToken)
		}
		w("| %s | %.0f | %s | %s | %s | %.1f | %.1f | %.2f | %.1f |", name, row.fan.framesPerSec, us(row.cpuPerToken), us(row.dbCPUPerToken), ms(row.fan.p99),
			row.logPerSec, row.otherPerSec, row.loggedBytes/row.streamedBytes, row.walBytes/row.streamedBytes)
	}
	if mOff, mOn := meanDuration(off), meanDuration(on); mOff > 0 && mOn > 0 {
		w("")
		w("Mean CPU per token: %s with the stream log off, %s at 50 ms: **%+.1f%%** (target: within 5%%).", us(mOff), us(mOn), 100*(float64(mOn)/float64(mOff)-1))
	}
	return b.String()
}

func meanDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}
