package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/store/storetest"
)

// clusterScript is scripts/cluster.sh, run by TestClusterScript as a user would.
const clusterScript = "../scripts/cluster.sh"

// The commands docs/cluster.md gives, run as a user runs them: scripts/cluster.sh
// start, status, kill 2, start 2, status, stop. Each node and HAProxy answer after
// start; after kill 2 node 2 does not and HAProxy takes it out of its pool; after
// start 2 it answers again and is back in the pool; after stop nothing answers. The
// cluster gets its own directory, binary and ports (the script's CHATD_CLUSTER_*
// settings), so it runs beside a user's, on a fresh database.
func TestClusterScript(t *testing.T) {
	haproxyBin(t) // scripts/haproxy.sh would install haproxy without it
	dir := t.TempDir()
	base := freePortBlock(t, 14)
	proxy := fmt.Sprintf("127.0.0.1:%d", base)
	nodeAddr := func(n int) string { return fmt.Sprintf("127.0.0.1:%d", base+n) }
	env := append(os.Environ(),
		"DATABASE_URL="+storetest.NewURL(t),
		"CHATD_CLUSTER_DIR="+dir,
		"CHATD_CLUSTER_BIN="+filepath.Join(dir, "chatd"),
		"CHATD_CLUSTER_PORT="+strconv.Itoa(base),
		"CHATD_CLUSTER_NODE_PORT="+strconv.Itoa(base),
		"CHATD_CLUSTER_ADMIN_PORT="+strconv.Itoa(base+10),
	)

	// script runs scripts/cluster.sh with args and returns what it said; tryScript
	// returns its error too.
	tryScript := func(args ...string) (string, error) {
		t.Helper()
		// start builds chatd: on two busy cores, a cold build takes minutes.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, clusterScript, args...)
		cmd.Env = env
		// The nodes and HAProxy it leaves running write to their logs, not to this pipe;
		// WaitDelay bounds the wait should one keep it open all the same.
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		t.Logf("scripts/cluster.sh %v:\n%s", args, out)
		return string(out), err
	}
	script := func(args ...string) string {
		t.Helper()
		out, err := tryScript(args...)
		require.NoError(t, err, "scripts/cluster.sh %v", args)
		return out
	}
	t.Cleanup(func() {
		if _, err := tryScript("stop"); err != nil {
			t.Errorf("scripts/cluster.sh stop: %v", err)
		}
		if t.Failed() {
			for _, name := range []string{"node1.log", "node2.log", "node3.log", "haproxy.log", "haproxy.cfg"} {
				b, _ := os.ReadFile(filepath.Join(dir, name))
				t.Logf("%s:\n%s", name, b)
			}
		}
	})

	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	healthz := func(addr string) error {
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /healthz: %s", resp.Status)
		}
		return nil
	}
	answers := func(what, addr string) {
		t.Helper()
		require.NoError(t, healthz(addr), "%s (%s) answers /healthz", what, addr)
	}
	haproxyLog := func() string {
		b, err := os.ReadFile(filepath.Join(dir, "haproxy.log"))
		require.NoError(t, err)
		return string(b)
	}
	// inPool waits for HAProxy to say that chatd2 went down or came back up: the n-th
	// such line (counting from 1) of its log.
	inPool := func(state string, n int) {
		t.Helper()
		re := regexp.MustCompile(`Server chatd/chatd2 is ` + state)
		waitFor(t, 15*time.Second, func() bool { return len(re.FindAllString(haproxyLog(), -1)) >= n },
			func() string { return "HAProxy to log that chatd2 is " + state })
	}

	script("start")
	for n := 1; n <= 3; n++ {
		answers(fmt.Sprintf("node %d", n), nodeAddr(n))
	}
	answers("HAProxy", proxy)
	out := script("status")
	for n := 1; n <= 3; n++ {
		require.Regexp(t, fmt.Sprintf(`node %d runs \(pid \d+\), holds 0 sessions`, n), out)
	}
	require.Contains(t, out, "HAProxy runs on "+proxy)

	script("kill", "2")
	waitFor(t, 5*time.Second, func() bool { return healthz(nodeAddr(2)) != nil },
		func() string { return "node 2 to stop answering after kill 2" })
	answers("node 1", nodeAddr(1))
	answers("node 3", nodeAddr(3))
	answers("HAProxy", proxy) // a request for node 2 is retried on another
	require.Contains(t, script("status"), "node 2 is down")
	inPool("DOWN", 1)

	script("start", "2")
	answers("node 2", nodeAddr(2))
	out = script("status")
	for n := 1; n <= 3; n++ {
		require.Regexp(t, fmt.Sprintf(`node %d runs \(pid \d+\)`, n), out)
	}
	inPool("UP", 1)
	answers("HAProxy", proxy)

	require.Contains(t, script("stop"), "stopped")
	for n := 1; n <= 3; n++ {
		require.Error(t, healthz(nodeAddr(n)), "node %d answers after stop", n)
	}
	require.Error(t, healthz(proxy), "HAProxy answers after stop")
	out = script("status")
	for n := 1; n <= 3; n++ {
		require.Contains(t, out, fmt.Sprintf("node %d is down", n))
	}
	require.Contains(t, out, "HAProxy is down")
}

// freePortBlock returns a port p such that p to p+n-1 are free on the loopback
// interface right now, for a program that takes a base port. It picks below the
// kernel's ephemeral range (32768 and up, by default), where the ports that connections
// get, such as the tests' own connections to PostgreSQL, do not come from; nothing
// keeps them free afterwards.
func freePortBlock(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(12000-n)
		var lns []net.Listener
		for p := base; p < base+n; p++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			require.NoError(t, ln.Close())
		}
		if len(lns) == n {
			return base
		}
	}
	t.Fatalf("found no %d free consecutive ports", n)
	return 0
}
