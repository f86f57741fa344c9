package server

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/transport/wstest"
)

// privateDB is a PostgreSQL server of a test's own (scripts/devdb.sh on a data directory
// of its own, on a fixed port), which the test may stop and start again: an outage for
// its chatd only.
type privateDB struct {
	t    *testing.T
	env  []string
	url  string
	data string
}

func newPrivateDB(t *testing.T) *privateDB {
	t.Helper()
	dir, err := os.MkdirTemp("", "chatd-outage-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres user initdb runs as must reach it
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
	db := &privateDB{t: t, data: filepath.Join(dir, "data"), env: append(os.Environ(),
		"CHATD_PGDATA="+filepath.Join(dir, "data"), "CHATD_DEVDB_PORT="+port, "DATABASE_URL=")}
	db.url = strings.TrimSpace(db.devdb("url"))
	t.Cleanup(func() { db.devdb("stop") })
	return db
}

func (db *privateDB) devdb(cmd string) string {
	db.t.Helper()
	c := exec.Command("../scripts/devdb.sh", cmd)
	c.Env = db.env
	out, err := c.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	require.NoError(db.t, err, "devdb.sh %s: %s", cmd, stderr)
	return string(out)
}

// stop stops the server as an operator or a failover does (fast: clients are cut off).
func (db *privateDB) stop() { db.devdb("stop") }

// start starts it again, on the same port.
func (db *privateDB) start() { db.devdb("url") }

// metric reads one series (name with its labels, as /metrics prints it) from a chatd's
// admin listener; -1 when it is not there.
func metric(t *testing.T, admin, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return -1
}

// PostgreSQL stopped for longer than the lease TTL while runs stream and reach tool
// calls, then started again. The runs that reach a tool call while it is down cannot
// store the call before it runs, so they end as storage errors; the run that only
// streams text goes on and completes. Once the database is back, the queued writes are
// stored under the leases the node still holds (nobody took them): every tab's view is
// exactly the stored transcript, each run is stored as its tabs were told it ended, and
// no run is taken up and run again.
func TestDatabaseOutageLongerThanTheLeaseTTL(t *testing.T) {
	db := newPrivateDB(t)
	const ttl = time.Second
	env := map[string]string{
		"DATABASE_URL":     db.url,
		"CHATD_LEASE_TTL":  ttl.String(),
		"CHATD_DEMO_DELAY": "50ms",
		"CHATD_DEMO_WORDS": "40", // the tool call half way, at about 1 s
		"CHATD_RECOVER":    "continue",
	}
	proc := startChild(t, "chatd", env)
	st := openStore(t, db.url)

	type tab struct {
		c       *wstest.Client
		session string
		runID   string
	}
	var tabs []*tab
	for i, content := range []string{"use the tool please", "and the tool here too", "just talk to me"} {
		c := wstest.Dial(t, proc.wsURL(), nil)
		tb := &tab{c: c, session: c.Hello("").SessionID}
		ack := c.Chat(fmt.Sprintf("r%d", i), content)
		require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
		tb.runID = ack.RunID
		tabs = append(tabs, tb)
	}
	for _, tb := range tabs {
		tb.c.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })
	}

	db.stop()
	// Down for three lease TTLs: the tool calls come, and every lease expires by the
	// database's clock (were another node there, it could take the sessions).
	ends := make(map[string]wstest.Frame)
	for _, tb := range tabs {
		ends[tb.session] = tb.c.ReadTerminal()
	}
	outage := time.NewTimer(3 * ttl)
	<-outage.C
	db.start()

	// Stored once the node's writes are through: its queues empty.
	admin := proc.adminAddr()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for metric(t, admin, "chatd_journal_queued_writes") != 0 {
		require.True(t, time.Now().Before(deadline), "the queued writes were not stored after the database came back")
		<-tick.C
	}

	for i, tb := range tabs {
		end := ends[tb.session]
		run := getRun(t, st, tb.runID)
		want := chat.RunDone
		if i < 2 {
			require.Equal(t, "chat.error", end.Type, "%s", end.Raw)
			require.Equal(t, "storage", end.Run.Error.Code, "the tool call could not be stored before it ran")
			want = chat.RunError
		} else {
			require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
		}
		require.Equal(t, want, run.Status, "session %d is stored as its tab was told it ended", i)
		require.Zero(t, run.Recoveries, "session %d's run was not taken up again", i)
		stored := sessionMessages(t, st, tb.session)
		require.Empty(t, wstest.Diff(toWire(t, stored), tb.c.State.Sorted()), "session %d: the tab equals the database", i)
		for _, m := range stored {
			require.NotEqual(t, chat.MessageStreaming, m.Status, "session %d: nothing is left streaming", i)
		}
	}
	// The outage was one: renewals failed (for longer than a TTL), and writes waited.
	require.Positive(t, metric(t, admin, "chatd_lease_renewal_failures_total"))
	require.Contains(t, proc.log.String(), "renewing this node's session leases again")
	require.Positive(t, metric(t, admin, `chatd_journal_write_failures_total{failure="transient",sqlstate=""}`)+
		metric(t, admin, `chatd_journal_write_failures_total{failure="transient",sqlstate="57P01"}`))
	require.NotContains(t, proc.log.String(), "continuing a run from its checkpoint", "no run was run again")
	require.NotContains(t, proc.log.String(), "stopping: the session's lease is another node's", "no actor let its writes go")
}
