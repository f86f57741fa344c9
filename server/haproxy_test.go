package server

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// ---------------------------------------------------------------------------------------
// HAProxy in front of chatd nodes

// shippedHAProxyConfig is the production configuration that startHAProxy runs.
const shippedHAProxyConfig = "../deploy/haproxy/chatd.cfg"

// haproxyTestTimeout is the client and server timeout of the tests' HAProxy: short, so a
// WebSocket that relied on them instead of the tunnel timeout would be cut within a test.
const haproxyTestTimeout = "2s"

// haproxyConfig turns the shipped configuration into the tests' one: the same defaults,
// frontend and backend (balancing, health checks, tunnel timeout, retries), with its own
// global section (logging to stderr, no system paths), the frontend bound to bind, the
// backend's servers replaced by backends, and client/server timeouts of
// haproxyTestTimeout. It fails when the shipped file no longer has the shape it edits.
func haproxyConfig(shipped, bind string, backends []string) (string, error) {
	var out strings.Builder
	out.WriteString("global\n\tlog stderr format raw local0 info\n\tmaxconn 1000\n")
	var section string
	found := map[string]int{}
	for _, line := range strings.Split(shipped, "\n") {
		trimmed := strings.TrimSpace(line)
		fields := strings.Fields(trimmed)
		if line != "" && line[0] != ' ' && line[0] != '\t' && line[0] != '#' {
			if section == "backend" {
				writeServers(&out, backends)
			}
			section = fields[0]
		}
		switch {
		case section == "global":
			continue
		case section == "defaults" && len(fields) == 3 && fields[0] == "timeout" && (fields[1] == "client" || fields[1] == "server"):
			line = fmt.Sprintf("\ttimeout %s %s", fields[1], haproxyTestTimeout)
			found["timeout "+fields[1]]++
		case section == "frontend" && len(fields) > 0 && fields[0] == "bind":
			line = "\tbind " + bind
			found["bind"]++
		case section == "backend" && len(fields) > 0 && fields[0] == "server":
			found["server"]++
			continue
		}
		out.WriteString(line + "\n")
	}
	if section == "backend" {
		writeServers(&out, backends)
	}
	for _, k := range []string{"timeout client", "timeout server", "bind"} {
		if found[k] != 1 {
			return "", fmt.Errorf("%s has %d %q lines where the tests expect one: adapt haproxyConfig", shippedHAProxyConfig, found[k], k)
		}
	}
	if found["server"] == 0 {
		return "", fmt.Errorf("%s has no server lines: adapt haproxyConfig", shippedHAProxyConfig)
	}
	return out.String(), nil
}

func writeServers(out *strings.Builder, backends []string) {
	for i, b := range backends {
		fmt.Fprintf(out, "\tserver chatd%d %s\n", i+1, b)
	}
}

// haproxyBin is the haproxy executable that CHATD_HAPROXY names (make test-go sets it).
func haproxyBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("CHATD_HAPROXY")
	if bin == "" {
		t.Fatal("CHATD_HAPROXY is not set: make test-go sets it; by hand, export CHATD_HAPROXY=$(scripts/haproxy.sh), which installs Debian's haproxy when missing")
	}
	return bin
}

// startHAProxy runs HAProxy with deploy/haproxy/chatd.cfg (see haproxyConfig) in front
// of backends (host:port each), in the foreground on a free loopback port, and returns
// that address once it accepts connections, and HAProxy's log. HAProxy is stopped when
// the test ends, and its configuration and log are printed when the test failed.
func startHAProxy(t *testing.T, backends []string) (addr string, log *syncBuffer) {
	t.Helper()
	// HAProxy cannot say which port the kernel gave it, so its port is picked beforehand
	// (freeAddr), and another process may take it before HAProxy binds it: then HAProxy
	// exits at once, and is started again on another.
	const attempts = 3
	for i := 1; ; i++ {
		addr, log, ok := startHAProxyOn(t, freeAddr(t), backends, i < attempts)
		if ok {
			return addr, log
		}
		t.Logf("haproxy found %s taken; trying another port", addr)
	}
}

// startHAProxyOn is startHAProxy listening on addr. When HAProxy exits because addr is
// taken and retry is set, it returns ok false instead of failing the test.
func startHAProxyOn(t *testing.T, addr string, backends []string, retry bool) (_ string, log *syncBuffer, ok bool) {
	t.Helper()
	bin := haproxyBin(t)
	shipped, err := os.ReadFile(shippedHAProxyConfig)
	require.NoError(t, err)
	cfg, err := haproxyConfig(string(shipped), addr, backends)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))

	log = &syncBuffer{}
	// -db: the foreground, no daemon and no master process; SIGTERM stops it at once.
	cmd := exec.Command(bin, "-db", "-f", path)
	cmd.Stdout = log
	cmd.Stderr = log
	require.NoError(t, cmd.Start(), "start %s", bin)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
		if t.Failed() {
			t.Logf("haproxy (%s, %s) with this configuration:\n%s\nits log:\n%s", addr, cmd.ProcessState, cfg, log.String())
		}
	})

	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	var lastErr error
	for {
		select {
		case <-done:
			if retry && strings.Contains(log.String(), "Address already in use") {
				return addr, log, false
			}
			t.Fatalf("haproxy exited before it accepted connections: %s\n%s", cmd.ProcessState, log.String())
		case <-deadline.C:
			t.Fatalf("haproxy did not accept connections on %s in time (last error: %v)\n%s", addr, lastErr, log.String())
		case <-ticker.C:
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			lastErr = err
			continue
		}
		_ = conn.Close()
		return addr, log, true
	}
}

// The tests' configuration is the shipped one with the test's addresses and short HTTP
// timeouts: what routes, checks and keeps WebSockets open is the shipped file's, and
// HAProxy accepts the result.
func TestHAProxyConfigIsTheShippedOne(t *testing.T) {
	bin := haproxyBin(t)
	shipped, err := os.ReadFile(shippedHAProxyConfig)
	require.NoError(t, err)
	cfg, err := haproxyConfig(string(shipped), "127.0.0.1:1", []string{"127.0.0.1:2", "127.0.0.1:3"})
	require.NoError(t, err)

	for _, d := range []string{
		"mode http",
		"balance url_param session",
		"hash-type consistent",
		"option httpchk GET /readyz",
		"timeout tunnel 1h",
		"option redispatch",
		"default-server check inter 1s fall 2 rise 2",
	} {
		re := regexp.MustCompile(`(?m)^\s+` + strings.ReplaceAll(regexp.QuoteMeta(d), " ", `\s+`) + `\s*$`)
		require.Regexp(t, re, string(shipped), "the shipped configuration says %q", d)
		require.Regexp(t, re, cfg, "the tests' configuration keeps %q", d)
	}
	require.Contains(t, cfg, "\tbind 127.0.0.1:1\n")
	require.Contains(t, cfg, "\tserver chatd1 127.0.0.1:2\n\tserver chatd2 127.0.0.1:3\n")
	require.Contains(t, cfg, "\ttimeout client "+haproxyTestTimeout+"\n")
	require.Contains(t, cfg, "\ttimeout server "+haproxyTestTimeout+"\n")
	require.NotContains(t, cfg, "10.0.0.")

	for name, text := range map[string]string{"shipped": string(shipped), "tests'": cfg} {
		path := filepath.Join(t.TempDir(), "haproxy.cfg")
		require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
		out, err := exec.Command(bin, "-c", "-f", path).CombinedOutput()
		require.NoError(t, err, "haproxy -c on the %s configuration:\n%s", name, out)
		require.NotContains(t, string(out), "WARNING", "haproxy -c on the %s configuration", name)
	}
}

// TestHAProxyRoutesBySessionParam runs three chatd nodes behind the shipped HAProxy
// configuration. Each node has its own database, so the node that served a connection is
// the one whose database holds the session its hello created.
func TestHAProxyRoutesBySessionParam(t *testing.T) {
	haproxyBin(t) // before starting the nodes
	const nodes = 3
	children := make([]*child, nodes)
	stores := make([]*store.Store, nodes)
	backends := make([]string, nodes)
	for i := range children {
		dbURL := storetest.NewURL(t)
		children[i] = startChild(t, fmt.Sprintf("chatd%d", i+1), map[string]string{
			"DATABASE_URL":      dbURL,
			"CHATD_SANDBOX_DIR": sandboxDir(t),
			"CHATD_DEMO_DELAY":  "0s",
			// No ping crosses the idle WebSocket below: it stays quiet for longer than
			// HAProxy's client and server timeouts.
			"CHATD_PING_INTERVAL": "1m",
		})
		stores[i] = openStore(t, dbURL)
		backends[i] = children[i].addr
	}
	addr, hapLog := startHAProxy(t, backends)

	// servedBy returns the index of the node whose database holds sessionID.
	servedBy := func(sessionID string) int {
		t.Helper()
		id := uuid.MustParse(sessionID)
		found := -1
		for i, st := range stores {
			_, err := st.SessionGet(dbCtx(t), id)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			require.NoError(t, err)
			require.Equal(t, -1, found, "session %s is in two nodes' databases", sessionID)
			found = i
		}
		require.NotEqual(t, -1, found, "session %s is in no node's database", sessionID)
		return found
	}
	wsURL := func(session string) string {
		u := "ws://" + addr + "/v1/ws"
		if session != "" {
			u += "?session=" + url.QueryEscape(session)
		}
		return u
	}
	// connect dials HAProxy, creates a session and returns the node that served it.
	connect := func(session string) int {
		t.Helper()
		c := wstest.Dial(t, wsURL(session), nil)
		defer c.WS.CloseNow()
		return servedBy(c.Hello("").SessionID)
	}

	// (a) One id always reaches the same node; different ids, and no id, are spread.
	fixed := uuid.NewString()
	owner := connect(fixed)
	for range 4 {
		require.Equal(t, owner, connect(fixed), "?session=%s went to another node", fixed)
	}
	spread := map[int]bool{}
	for i := 0; i < 30 && len(spread) < 2; i++ {
		spread[connect(uuid.NewString())] = true
	}
	require.Len(t, spread, 2, "30 different session ids all went to one node")
	spread = map[int]bool{}
	for range 6 {
		spread[connect("")] = true
	}
	require.Greater(t, len(spread), 1, "connections without ?session= all went to one node")

	// (c) An idle WebSocket outlives HAProxy's client and server timeouts (2 s): once
	// upgraded, the connection is a tunnel with its own timeout (1 h).
	idle := wstest.Dial(t, wsURL(fixed), nil)
	idle.Hello("")
	time.Sleep(3 * time.Second) // real idle time, past the 2 s timeouts, by nature
	require.Equal(t, "ack", idle.Chat("r1", "still there?").Type)
	require.Equal(t, "chat.done", idle.ReadTerminal().Type)
	idle.WS.CloseNow()

	// (b) The owner of the fixed id dies: a new connection for it reaches a live node
	// within seconds, first by the retry on another node, then by the health checks
	// taking the dead node out of the pool, after which the id has a new stable node.
	children[owner].signal(syscall.SIGKILL)
	children[owner].wait(10 * time.Second)
	liveNode := func() (int, error) {
		c, err := wstest.TryDial(t, wsURL(fixed), nil)
		if err != nil {
			return -1, err
		}
		defer c.WS.CloseNow()
		n := servedBy(c.Hello("").SessionID)
		require.NotEqual(t, owner, n, "a connection was served by the node that was killed")
		return n, nil
	}
	var lastErr error
	waitFor(t, 10*time.Second, func() bool {
		_, lastErr = liveNode()
		return lastErr == nil
	}, func() string { return fmt.Sprintf("no live node took ?session=%s (last error: %v)", fixed, lastErr) })

	down := regexp.MustCompile(fmt.Sprintf(`Server chatd/chatd%d is DOWN`, owner+1))
	waitFor(t, 10*time.Second, func() bool { return down.MatchString(hapLog.String()) },
		func() string { return fmt.Sprintf("HAProxy did not take chatd%d out of the pool", owner+1) })
	next, err := liveNode()
	require.NoError(t, err)
	for range 4 {
		n, err := liveNode()
		require.NoError(t, err)
		require.Equal(t, next, n, "?session=%s went to another node after the failover", fixed)
	}
}

// waitFor polls cond every 50 ms until it holds, failing the test with what() after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatal(what())
		case <-ticker.C:
		}
	}
}
