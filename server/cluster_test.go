package server

import (
	"fmt"
	"net/url"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// clusterTTL is the nodes' lease TTL in these tests: a dead node's runs continue
// elsewhere within it and a rescue pass (a third of it).
const clusterTTL = 1500 * time.Millisecond

// cluster is several chatd processes on one database, behind HAProxy.
type cluster struct {
	t     *testing.T
	dbURL string
	st    *store.Store
	env   map[string]string
	nodes []*child
	lb    string // HAProxy's address
}

func startCluster(t *testing.T, n int, env map[string]string) *cluster {
	t.Helper()
	c := &cluster{t: t, dbURL: storetest.NewURL(t)}
	c.st = openStore(t, c.dbURL)
	c.env = map[string]string{
		"DATABASE_URL":    c.dbURL,
		"CHATD_LEASE_TTL": clusterTTL.String(),
		"CHATD_RECOVER":   "continue",
		// Behind HAProxy every client is HAProxy's address (README, Deploying).
		"CHATD_MAX_CONNS_PER_ADDR": "0",
		"CHATD_HANDSHAKE_RATE":     "off",
	}
	for k, v := range env {
		c.env[k] = v
	}
	var backends []string
	for i := range n {
		node := startChild(t, fmt.Sprintf("chatd %d", i+1), c.nodeEnv())
		c.nodes = append(c.nodes, node)
		backends = append(backends, node.addr)
	}
	c.lb, _ = startHAProxy(t, backends)
	return c
}

// nodeEnv is a node's environment: the cluster's, with a sandbox directory of its own.
func (c *cluster) nodeEnv() map[string]string {
	env := map[string]string{"CHATD_SANDBOX_DIR": sandboxDir(c.t)}
	for k, v := range c.env {
		env[k] = v
	}
	return env
}

// lbURL is the WebSocket URL through HAProxy, with the session for its hashing.
func (c *cluster) lbURL(sessionID string) string {
	u := "ws://" + c.lb + "/v1/ws"
	if sessionID != "" {
		u += "?session=" + url.QueryEscape(sessionID)
	}
	return u
}

// owner is the node holding session id's lease, nil for none.
func (c *cluster) owner(id string) *child {
	c.t.Helper()
	l, err := c.st.LeaseGet(dbCtx(c.t), uuid.MustParse(id))
	require.NoError(c.t, err)
	if !l.Live {
		return nil
	}
	for _, n := range c.nodes {
		if n.addr == l.Node {
			return n
		}
	}
	return nil
}

// reconnect connects a tab with state to its session through HAProxy, as a client does
// after its connection dropped: until a node serves it (a node may answer "moved" while
// the session's lease still names a dead node), within a deadline.
func (c *cluster) reconnect(state *wstest.State) *wstest.Client {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for time.Now().Before(deadline) {
		cl, err := wstest.TryDial(c.t, c.lbURL(state.SessionID), nil)
		if err == nil {
			cl.State = state
			cl.Send(map[string]any{"type": "hello", "sessionId": state.SessionID, "epoch": state.Epoch, "lastSeq": state.LastSeq})
			f, err := cl.TryRead()
			switch {
			case err == nil && (f.Type == "snapshot" || f.Type == "resumed"):
				return cl
			case err == nil:
				last = string(f.Raw)
			default:
				last = err.Error()
			}
			cl.WS.CloseNow()
		} else {
			last = err.Error()
		}
		<-tick.C
	}
	c.t.Fatalf("no node served session %s through HAProxy within 20s (last: %s)", state.SessionID, last)
	return nil
}

// latestRun returns the session's latest run.
func (c *cluster) latestRun(id string) chat.Run {
	c.t.Helper()
	r, err := c.st.RunLatest(dbCtx(c.t), uuid.MustParse(id))
	require.NoError(c.t, err)
	return r
}

var demoClock = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)

// A node is killed mid-run: its sessions' runs continue on the other nodes by
// themselves, within the lease TTL and a few seconds, each once, from where they were
// stored; every client, reconnecting through HAProxy, ends equal to the database; and the
// text of every continued run is exactly that of an uninterrupted one.
func TestClusterFailoverThroughHAProxy(t *testing.T) {
	c := startCluster(t, 3, map[string]string{"CHATD_DEMO_DELAY": "15ms", "CHATD_DEMO_WORDS": "120"})
	const content = "please call the tool for me"

	// Sessions made through HAProxy land on every node; each streams a run with a
	// tool call. Each tab follows its own session.
	type tab struct {
		c      *wstest.Client
		ack    wstest.Frame
		victim bool // its session's node is killed
	}
	var tabs []*tab
	owners := map[*child]int{}
	for i := 0; len(owners) < len(c.nodes) || i < 6; i++ {
		require.Less(t, i, 30, "HAProxy spread 30 new sessions over fewer than 3 nodes")
		cl := wstest.Dial(t, c.lbURL(""), nil)
		cl.Hello("")
		ack := cl.Chat(fmt.Sprintf("r%d", i), content)
		require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
		o := c.owner(cl.State.SessionID)
		require.NotNil(t, o, "the node that made the session holds it")
		owners[o]++
		tabs = append(tabs, &tab{c: cl, ack: ack})
	}
	victim := c.owner(tabs[0].c.State.SessionID)
	var onVictim []*tab
	for _, tb := range tabs {
		if c.owner(tb.c.State.SessionID) == victim {
			tb.victim = true
			onVictim = append(onVictim, tb)
		}
	}

	// Kill the node while its runs stream after their tool calls.
	for _, tb := range onVictim {
		toolEnded := false
		tb.c.Await(func(f wstest.Frame) bool {
			require.False(t, f.Terminal(), "a run ended before the kill")
			toolEnded = toolEnded || f.Type == "tool.end"
			return toolEnded && f.Type == "chat.delta"
		})
	}
	victim.signal(syscall.SIGKILL)
	killed := time.Now()
	victim.wait(15 * time.Second)

	// No client does anything: the other nodes take the runs up and finish them.
	for _, tb := range onVictim {
		id := tb.c.State.SessionID
		waitFor(t, clusterTTL+10*time.Second, func() bool {
			o := c.owner(id)
			return o != nil && o != victim
		}, func() string { return "a live node to take session " + id + " over" })
		waitFor(t, 20*time.Second, func() bool { return c.latestRun(id).Status == chat.RunDone }, func() string {
			return fmt.Sprintf("the run of %s to finish; it is %s", id, c.latestRun(id).Status)
		})
		r := c.latestRun(id)
		require.Equal(t, tb.ack.RunID, r.ID.String(), "the same run")
		require.Equal(t, 1, r.Recoveries, "continued once")
		// Acquired by the dead node (1), then by one node once (2): never two takeovers,
		// so never two writers after the dead one, whose writes the token fences.
		l, err := c.st.LeaseGet(dbCtx(t), uuid.MustParse(id))
		require.NoError(t, err)
		require.EqualValues(t, 2, l.Token, "session %s was acquired once after the kill", id)
	}
	t.Logf("the dead node's %d runs were taken over within %s of the kill", len(onVictim), time.Since(killed).Round(100*time.Millisecond))

	// Every tab, reconnecting through HAProxy (the victim's) or still connected (the
	// others'), ends equal to the database.
	for _, tb := range tabs {
		cl := tb.c
		if tb.victim {
			cl = c.reconnect(tb.c.State)
		}
		if cl.State.ActiveRun != nil {
			cl.ReadTerminal()
		}
		stored := sessionMessages(t, c.st, cl.State.SessionID)
		require.Empty(t, wstest.Diff(toWire(t, stored), cl.State.Sorted()), "session %s", cl.State.SessionID)
		tools := 0
		for _, m := range stored {
			if m.Tool != nil {
				tools++
				require.Equal(t, chat.ToolOK, m.Tool.Status)
			}
		}
		require.Equal(t, 1, tools, "the tool call ran once")
	}

	// Nothing regenerated, nothing lost: a continued run's text is an uninterrupted one's.
	plain := tabs[len(tabs)-1]
	require.NotEqual(t, victim, c.owner(plain.c.State.SessionID))
	want := demoClock.ReplaceAllString(replyText(sessionMessages(t, c.st, plain.c.State.SessionID), plain.ack.RunID), "TIME")
	require.NotEmpty(t, want)
	for _, tb := range onVictim {
		got := demoClock.ReplaceAllString(replyText(sessionMessages(t, c.st, tb.c.State.SessionID), tb.ack.RunID), "TIME")
		require.Equal(t, want, got, "session %s", tb.c.State.SessionID)
	}
}

// Each node in turn is stopped with SIGTERM and started again, while runs stream: every
// run finishes, none ends interrupted and none is counted as recovered from a crash (a
// graceful stop hands its sessions over).
func TestClusterRollingRestart(t *testing.T) {
	c := startCluster(t, 3, map[string]string{"CHATD_DEMO_DELAY": "20ms", "CHATD_DEMO_WORDS": "300"})
	var sessions []string
	var runs []string
	for i := range 6 {
		cl := wstest.Dial(t, c.lbURL(""), nil)
		cl.Hello("")
		ack := cl.Chat(fmt.Sprintf("r%d", i), "tell me a long story")
		require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
		sessions = append(sessions, cl.State.SessionID)
		runs = append(runs, ack.RunID)
		cl.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })
		cl.WS.CloseNow() // the runs go on without anyone watching
	}
	for i, n := range c.nodes {
		n.signal(syscall.SIGTERM)
		ps := n.wait(20 * time.Second)
		require.True(t, ps.Success(), "node %d exits cleanly: %s", i+1, ps)
		c.nodes[i] = restartChild(t, n, fmt.Sprintf("chatd %d (restarted)", i+1), c.nodeEnv())
	}
	for i, id := range sessions {
		waitFor(t, 30*time.Second, func() bool { return !c.latestRun(id).Status.Active() }, func() string {
			return fmt.Sprintf("the run of session %s to end; it is %s", id, c.latestRun(id).Status)
		})
		r := c.latestRun(id)
		require.Equal(t, runs[i], r.ID.String())
		require.Equal(t, chat.RunDone, r.Status, "session %s: %+v", id, r.Error)
		require.Zero(t, r.Recoveries, "a graceful stop is not a crash")
	}
	// And a tab reconnecting through HAProxy sees each finished, equal to the database.
	for _, id := range sessions {
		cl := c.reconnect(&wstest.State{SessionID: id, Messages: map[string]*wstest.Message{}, Ended: map[string]*wstest.Run{}})
		require.Empty(t, wstest.Diff(toWire(t, sessionMessages(t, c.st, id)), cl.State.Sorted()))
	}
}
