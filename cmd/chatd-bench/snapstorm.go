package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The snapshot storm: the reconnect storm (bench.storm) again on the same live sessions,
// but every client's hello names an epoch that is not the session's (as a client would
// after its server restarted, or with a position from another node), with its real
// lastSeq. chatd cannot replay from a position in another epoch, so it answers every
// hello with a snapshot of the live session: its newest messages, with the open
// segment's text laid over them. The client replaces its view with the snapshot, as for
// any snapshot (tab.handle: epoch, lastSeq and the next token from its content), and
// checks every seq and token on from there. What the snapshots cost chatd is read from
// its statement histogram: database reads are the snapshots read from the database.

// staleEpoch is an epoch the session does not have.
func staleEpoch(epoch string) string { return "stale-" + epoch }

// seenTokens is, per tab whose reader has stopped, the next token it expected: it had
// seen every token before it.
func seenTokens(tabs []*tab) map[*tab]int {
	seen := make(map[*tab]int, len(tabs))
	for _, t := range tabs {
		seen[t] = max(t.nextTok, 0)
	}
	return seen
}

// caughtUpAfter is how long after its reconnect the tab had the first token due after it
// began: as a delta, or already in the text of a snapshot answering the reconnect,
// whichever came first. t.mu must be held.
func (t *tab) caughtUpAfter() (time.Duration, bool) {
	d, ok := t.caughtUp, t.caughtUpDone
	if !t.reconnectAt.IsZero() && t.snapAt.After(t.reconnectAt) && t.snap.firstNew >= 0 {
		if s := t.snapAt.Sub(t.reconnectAt); !ok || s < d {
			d, ok = s, true
		}
	}
	return d, ok
}

// snapCheck is what the snapshot storm checks of the snapshots the clients got.
type snapCheck struct {
	badText int // snapshots whose text skips or repeats a token
	// behind counts snapshots whose text ends before the last token the client had seen
	// live before it was cut: its view would step back.
	behind     int
	statements string // the database statements during the storm, by name
}

func checkSnapshots(tabs []*tab, seen map[*tab]int, stmts map[string]float64) *snapCheck {
	c := &snapCheck{}
	for _, t := range tabs {
		t.mu.Lock()
		if t.snapAt.After(t.reconnectAt) {
			if t.snap.gaps+t.snap.dups > 0 {
				c.badText++
			}
			if t.snap.next < seen[t] {
				c.behind++
			}
		}
		t.mu.Unlock()
	}
	c.statements = breakdown(stmts)
	return c
}

// breakdown lists statement counts by name ("none" for none).
func breakdown(stmts map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(stmts)) {
		if n := stmts[k]; n >= 0.5 {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func (r *report) snapStormMarkdown(w func(format string, args ...any)) {
	s := r.snapStorm
	after := ""
	if r.storm != nil {
		after = ", after the reconnect storm"
	}
	w("**Snapshot storm** (on the fan-out sessions of %s, runs still streaming%s): %d clients cut without a close handshake, down for %v, reconnected with `hello{epoch,lastSeq}` naming a stale epoch (their lastSeq as it was) spread over %v, so chatd answers each with a snapshot of the live session.",
		s.target, after, s.clients, s.down, s.spread)
	w("")
	w("| caught up p50 | p99 | max | not caught up | gaps | dups | replays | snapshots | database reads | database writes | snapshot text with gaps or dups | snapshot behind the client |")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var bad, behind int
	stmts := "not read"
	if s.snap != nil {
		bad, behind, stmts = s.snap.badText, s.snap.behind, s.snap.statements
	}
	w("| %s | %s | %s | %d | %d | %d | %d | %d | %.0f | %.0f | %d | %d |", ms(s.p50), ms(s.p99), ms(s.max), s.notCaughtUp,
		s.gaps, s.dups, s.replays, s.snapshots, s.dbReads, s.dbWrites, bad, behind)
	w("")
	w("Caught up: from the reconnect's start until the first token due after it arrives, in a delta or already in the snapshot's text. Each client replaces its view with the snapshot and checks every seq and token on from it; behind: the snapshot's text ends before the last token the client had seen live. chatd counted %.0f replays and %.0f snapshots. Database statements during the storm: %s.",
		s.serverReplays, s.serverSnapshots, stmts)
	w("")
}
