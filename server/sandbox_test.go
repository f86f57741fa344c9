package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// sandboxDir is a directory for CHATD_SANDBOX_DIR that bwrap can reach: when the tests
// run as root, bwrap runs as nobody, and t.TempDir's directories are root's alone.
func sandboxDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	require.NoError(t, os.Chmod(dir, 0o711))
	return dir
}

// With the shell tool on, chatd runs its commands under bubblewrap; without bubblewrap
// it refuses to start and says what to install.
func TestRefusesShellToolWithoutBubblewrap(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"CHATD_BWRAP names nothing": {"CHATD_BWRAP": filepath.Join(t.TempDir(), "bwrap")},
		"no bwrap in PATH":          {},
		"the flag names nothing":    {"CHATD_SANDBOX": "bwrap", "CHATD_SHELL_TOOL": "off"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("PATH", t.TempDir()) // no bwrap there
			full := map[string]string{
				"DATABASE_URL":      "postgres://127.0.0.1:1/never-reached",
				"CHATD_SHELL_TOOL":  "on",
				"CHATD_SANDBOX_DIR": sandboxDir(t),
				"CHATD_LOG_FORMAT":  "json",
			}
			for k, v := range env {
				full[k] = v
			}
			var stderr bytes.Buffer
			code := Command(nil, envMap(full), &stderr)
			require.Equal(t, 1, code, stderr.String())
			require.Contains(t, stderr.String(), "chatd could not start")
			require.Contains(t, stderr.String(), "bubblewrap")
			require.Contains(t, stderr.String(), "apt-get install bubblewrap")
		})
	}
}

// The shell tool off, chatd does not need bubblewrap (the demo agent's sandbox tool runs
// in the local provider).
func TestStartsWithoutBubblewrapWhenShellToolOff(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	m, logBuf := startInProcess(t, map[string]string{"CHATD_SANDBOX_DIR": t.TempDir()})
	require.Contains(t, logBuf.String(), `"sandbox":"local"`)
	require.NotNil(t, m)
}

// An approved shell command, end to end through chatd (a scripted model asks for it, a
// person approves over the WebSocket), tries to escape its bubblewrap sandbox: read
// chatd's environment and files, signal it, reach other workspaces, write outside its
// own, reach a listener on the host. Each attempt fails; the model gets the output.
func TestShellToolSandboxEndToEnd(t *testing.T) {
	secret := fmt.Sprintf("chatd-secret-%d", time.Now().UnixNano())
	t.Setenv("CHATD_TEST_SECRET", secret)
	data := t.TempDir() // chatd's data, readable by anyone on the host
	require.NoError(t, os.Chmod(data, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(data, "secret.txt"), []byte(secret), 0o644))
	sandboxes := sandboxDir(t)
	other := filepath.Join(sandboxes, "bwrap-0000000000000000", "workspace")
	require.NoError(t, os.MkdirAll(other, 0o777))
	require.NoError(t, os.WriteFile(filepath.Join(other, "notes"), []byte(secret), 0o644))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	pid := strconv.Itoa(os.Getpid())
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	command := strings.Join([]string{
		"cat /proc/" + pid + "/environ",
		"cat /proc/*/environ | tr '\\0' '\\n' | grep CHATD_TEST_SECRET",
		"kill -0 " + pid,
		"kill -TERM " + pid,
		"cat " + data + "/secret.txt",
		"cat " + other + "/notes",
		"ls " + sandboxes,
		"echo x > /usr/evil",
		"mkdir -p " + data + " && echo x > " + data + "/evil",
		"bash -c 'echo hi > /dev/tcp/127.0.0.1/" + port + "'",
		"echo reached the end",
	}, "; ")
	input, err := json.Marshal(map[string]string{"command": command})
	require.NoError(t, err)
	args, err := json.Marshal(string(input))
	require.NoError(t, err)

	srv := agenttest.NewServer(t,
		agenttest.SSE(agenttest.Data(
			openAIChunk(`{"role":"assistant","content":"Trying."}`, ""),
			openAIChunk(`{"tool_calls":[{"index":0,"id":"call_escape","type":"function","function":{"name":"shell","arguments":`+string(args)+`}}]}`, ""),
			openAIChunk(`{}`, "tool_calls"),
			"[DONE]",
		)...),
		agenttest.SSE(agenttest.Data(
			openAIChunk(`{"role":"assistant","content":"No luck."}`, ""),
			openAIChunk(`{}`, "stop"),
			"[DONE]",
		)...),
	)
	m, _ := startInProcess(t, map[string]string{
		"CHATD_AGENT": "openai", "OPENAI_BASE_URL": srv.URL + "/v1", "CHATD_MODEL": "gpt-e2e",
		"CHATD_SHELL_TOOL": "on", "CHATD_SANDBOX_DIR": sandboxes,
	})
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	sessionID := c.Hello("").SessionID
	require.Equal(t, "ack", c.Chat("r1", "escape").Type)
	st := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.PendingApproval != nil })
	c.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "toolCallId": st.Run.PendingApproval.ToolCallID, "decision": "approve"})
	require.Equal(t, "ack", c.ReadReply("d1").Type)
	end := c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)

	// What the command printed went back to the model.
	require.Len(t, srv.Requests(), 2)
	msgs := srv.Body(1)["messages"].([]any)
	result := msgs[len(msgs)-1].(map[string]any)["content"].(string)
	t.Logf("the command's output:\n%s", result)
	require.Contains(t, result, "reached the end")
	require.NotContains(t, result, secret)
	require.Contains(t, result, "No such process")
	require.Contains(t, result, "Read-only file system")
	require.Contains(t, result, "Connection refused")
	require.NoFileExists(t, filepath.Join(data, "evil"))
	require.NoFileExists(t, "/usr/evil")
	select {
	case <-accepted:
		t.Fatal("the sandbox reached a listener on the host")
	default:
	}
	id, err := m.db.Store().SessionSandbox(dbCtx(t), uuid.MustParse(sessionID))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(id, "bwrap-"), "the command ran in %q", id)
}

// chatd refuses a CHATD_SANDBOX_DIR that is a symbolic link or that others can write to,
// with either provider, naming the setting.
func TestRefusesUnsafeSandboxDir(t *testing.T) {
	base := t.TempDir()
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(t.TempDir(), link))
	open := filepath.Join(base, "open")
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o777))
	for _, dir := range []string{link, open} {
		for _, shell := range []string{"on", "off"} {
			var stderr bytes.Buffer
			code := Command(nil, envMap(map[string]string{
				"DATABASE_URL":      "postgres://127.0.0.1:1/never-reached",
				"CHATD_SHELL_TOOL":  shell,
				"CHATD_SANDBOX_DIR": dir,
				"CHATD_BWRAP":       os.Getenv("CHATD_BWRAP"),
				"CHATD_LOG_FORMAT":  "json",
			}), &stderr)
			require.Equal(t, 1, code, stderr.String())
			require.Contains(t, stderr.String(), "CHATD_SANDBOX_DIR", stderr.String())
		}
	}
}

// By default the sandboxes are not in the shared /tmp: another user could make the
// directory first.
func TestDefaultSandboxDir(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return envMap(m)
	}
	require.Equal(t, "/var/cache/chatd/sandboxes", defaultSandboxDir(env("HOME", "/root"), 0))
	require.Equal(t, "/home/ann/.cache/chatd/sandboxes", defaultSandboxDir(env("HOME", "/home/ann"), 1000))
	require.Equal(t, "/xdg/chatd/sandboxes", defaultSandboxDir(env("HOME", "/home/ann", "XDG_CACHE_HOME", "/xdg"), 1000))
	require.Equal(t, "/home/ann/.cache/chatd/sandboxes", defaultSandboxDir(env("HOME", "/home/ann", "XDG_CACHE_HOME", "rel"), 1000))
	require.Equal(t, filepath.Join(os.TempDir(), "chatd-sandboxes-1000"), defaultSandboxDir(env(), 1000))
}

// With CHATD_SANDBOX_NETWORK=on chatd warns at start-up that sandboxes share the host's
// network, naming what they can then reach: its own listeners and the database
// (TestEscapeNetwork in agent/sandbox/bwrap shows a networked sandbox reaching a
// listener on the host's loopback). Without it, no warning.
func TestSandboxNetworkWarns(t *testing.T) {
	m, logBuf := startInProcess(t, map[string]string{
		"CHATD_SHELL_TOOL": "on", "CHATD_SANDBOX_DIR": sandboxDir(t), "CHATD_SANDBOX_NETWORK": "on",
	})
	var warning map[string]any
	for _, line := range strings.Split(logBuf.String(), "\n") {
		if strings.Contains(line, "CHATD_SANDBOX_NETWORK=on") {
			require.NoError(t, json.Unmarshal([]byte(line), &warning))
		}
	}
	require.NotNil(t, warning, "no warning in the log:\n%s", logBuf.String())
	require.Equal(t, "warn", warning["level"])
	msg := warning["message"].(string)
	require.Contains(t, msg, m.Addr())
	require.Contains(t, msg, m.AdminAddr())
	require.Contains(t, msg, "loopback")
	require.Contains(t, msg, "PostgreSQL at "+databaseAddr(os.Getenv("DATABASE_URL")))

	_, quiet := startInProcess(t, map[string]string{"CHATD_SHELL_TOOL": "on", "CHATD_SANDBOX_DIR": sandboxDir(t)})
	require.NotContains(t, quiet.String(), "CHATD_SANDBOX_NETWORK=on")
}

func TestDatabaseAddr(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgres://u:p@127.0.0.1:5433/chatd":          "127.0.0.1:5433",
		"postgresql://db.internal/chatd":               "db.internal:5432",
		"postgres://[::1]:6000/chatd":                  "[::1]:6000",
		"postgres:///chatd?host=/var/run/postgresql":   "",
		"postgres:///chatd":                            "",
		"host=localhost port=5999 dbname=chatd":        "localhost:5999",
		"host=/tmp dbname=chatd":                       "",
		"postgres://u@/chatd?host=10.0.0.5&sslmode=no": "10.0.0.5:5432",
	} {
		require.Equal(t, want, databaseAddr(dsn), dsn)
	}
}

// approvedSandboxCall runs a demo session on m whose approved call ran in a sandbox, and
// returns the session's id and the sandbox's.
func approvedSandboxCall(t *testing.T, m *Server) (sessionID, sandboxID string) {
	t.Helper()
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	sessionID = c.Hello("").SessionID
	require.Equal(t, "ack", c.Chat("r1", "please approve a sandbox call").Type)
	wait := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.PendingApproval != nil })
	c.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "toolCallId": wait.Run.PendingApproval.ToolCallID, "decision": "approve"})
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	sandboxID, err := m.db.Store().SessionSandbox(dbCtx(t), uuid.MustParse(sessionID))
	require.NoError(t, err)
	require.NotEmpty(t, sandboxID, "the approved call ran in a sandbox")
	// Gone, so that a shutdown does not wait for it to answer its close.
	_ = c.WS.CloseNow()
	return sessionID, sandboxID
}

// deleteSession deletes a session through m's sessions API and returns the status.
func deleteSession(t *testing.T, m *Server, id string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(dbCtx(t), http.MethodDelete, "http://"+m.Addr()+"/v1/sessions/"+id, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	return resp.StatusCode
}

// Several nodes: a session deleted through node B, whose sandbox node A made, loses its
// workspace all the same. B cannot reach A's sandboxes; the deletion marks the workspace
// for removal, and A's janitor removes it at its next pass (here the one at A's start).
func TestSessionsAPIDeletesTheSandboxOfAnotherNode(t *testing.T) {
	dbURL := storetest.NewURL(t)
	dirA := t.TempDir()
	envA := map[string]string{"DATABASE_URL": dbURL, "CHATD_NODE_ID": "node-a", "CHATD_SANDBOX_DIR": dirA, "CHATD_DEMO_DELAY": "0s"}
	a, _ := startInProcess(t, envA)
	id, sandboxID := approvedSandboxCall(t, a)
	workspace := filepath.Join(dirA, sandboxID)
	require.DirExists(t, workspace)
	// A stops, giving its sessions back, so that B handles the deletion itself.
	require.NoError(t, a.Shutdown(dbCtx(t)))

	b, _ := startInProcess(t, map[string]string{"DATABASE_URL": dbURL, "CHATD_NODE_ID": "node-b", "CHATD_DEMO_DELAY": "0s"})
	require.Equal(t, http.StatusNoContent, deleteSession(t, b, id))
	require.DirExists(t, workspace, "B cannot reach A's sandbox")

	a, _ = startInProcess(t, envA)
	// The removal is counted once the workspace is gone and forgotten.
	waitFor(t, 10*time.Second, func() bool {
		status, body := adminGet(t, a, "/metrics")
		return status == http.StatusOK && strings.Contains(body, `chatd_workspaces_removed_total{reason="deleted"} 1`)
	}, func() string { return "A's janitor did not remove the deleted session's workspace" })
	require.NoDirExists(t, workspace)
}

// shellCall is a scripted model's turn that asks for the shell tool to run command.
func shellCall(t *testing.T, id, command string) agenttest.Answer {
	t.Helper()
	input, err := json.Marshal(map[string]string{"command": command})
	require.NoError(t, err)
	args, err := json.Marshal(string(input))
	require.NoError(t, err)
	return agenttest.SSE(agenttest.Data(
		openAIChunk(`{"tool_calls":[{"index":0,"id":"`+id+`","type":"function","function":{"name":"shell","arguments":`+string(args)+`}}]}`, ""),
		openAIChunk(`{}`, "tool_calls"),
		"[DONE]",
	)...)
}

// The sandbox's limits, set through chatd's settings, end to end: approved commands
// cross the open-file limit and the CPU time limit, and write more than the tool keeps;
// the model is told which limit each crossed, gets the head and the real end of the
// long output with its exit code, and chatd carries on.
func TestShellToolLimitsEndToEnd(t *testing.T) {
	srv := agenttest.NewServer(t,
		shellCall(t, "call_files", "for i in $(seq 20); do touch f$i; done; paste f* > /dev/null; "+
			"echo BEGIN; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo END-MARKER; exit 3"),
		shellCall(t, "call_cpu", "for i in 1 2 3 4; do (while :; do :; done) & done; wait"),
		agenttest.SSE(agenttest.Data(
			openAIChunk(`{"role":"assistant","content":"Done."}`, ""),
			openAIChunk(`{}`, "stop"),
			"[DONE]",
		)...),
	)
	m, _ := startInProcess(t, map[string]string{
		"CHATD_AGENT": "openai", "OPENAI_BASE_URL": srv.URL + "/v1", "CHATD_MODEL": "gpt-e2e",
		"CHATD_SHELL_TOOL": "on", "CHATD_SANDBOX_DIR": sandboxDir(t),
		"CHATD_SANDBOX_OPEN_FILES": "16", "CHATD_SANDBOX_CPU_TIME": "1s",
	})
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	c.Hello("")
	require.Equal(t, "ack", c.Chat("r1", "cross the limits").Type)
	for i := range 2 {
		st := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.PendingApproval != nil })
		id := fmt.Sprintf("d%d", i)
		c.Send(map[string]any{"type": "tool.decide", "requestId": id, "toolCallId": st.Run.PendingApproval.ToolCallID, "decision": "approve"})
		require.Equal(t, "ack", c.ReadReply(id).Type)
	}
	end := c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)

	require.Len(t, srv.Requests(), 3)
	result := func(req int) string {
		msgs := srv.Body(req)["messages"].([]any)
		return msgs[len(msgs)-1].(map[string]any)["content"].(string)
	}
	files := result(1)
	t.Logf("the first command's result, %d bytes: %.300q … %q", len(files), files, files[max(0, len(files)-200):])
	require.Contains(t, files, "Too many open files")
	require.Contains(t, files, "BEGIN\nxxx")
	require.Contains(t, files, "… [output truncated: ")
	require.True(t, strings.HasSuffix(files, "xxx\nEND-MARKER\n\n[exit code 3]\n[error: the command exited with code 3]"), "%q", files[max(0, len(files)-200):])
	require.Less(t, len(files), 70<<10)

	cpu := result(2)
	t.Logf("the second command's result: %q", cpu)
	require.True(t, strings.HasPrefix(cpu, "the command was stopped at a limit of the sandbox: its processes used "), cpu)
	require.True(t, strings.HasSuffix(cpu, "of CPU time together, over the limit of 1s"), cpu)

	// chatd carries on.
	status, _ := adminGet(t, m, "/healthz")
	require.Equal(t, http.StatusOK, status)
}
