package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/agent/mcp/mcptest"
	"github.com/chatd/chatd/auth/authtest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// mcpFile writes an MCP configuration for the test and returns its path.
func mcpFile(t *testing.T, cfg string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mcp.json")
	require.NoError(t, os.WriteFile(p, []byte(cfg), 0o600))
	return p
}

// toolCallerEnv points chatd at a model that calls the tools messages name.
func toolCallerEnv(model *agenttest.ToolCaller, mcpConfig string) map[string]string {
	return map[string]string{
		"CHATD_AGENT":      "openai",
		"OPENAI_BASE_URL":  model.URL + "/v1",
		"OPENAI_API_KEY":   "sk-test",
		"CHATD_MODEL":      "tool-caller",
		"CHATD_MCP_CONFIG": mcpConfig,
	}
}

// toolOf returns the stored tool message of run runID.
func toolOf(t *testing.T, msgs []chat.Message, runID string) chat.Message {
	t.Helper()
	for _, m := range msgs {
		if m.Tool != nil && m.RunID != nil && m.RunID.String() == runID {
			return m
		}
	}
	t.Fatalf("run %s has no tool message", runID)
	return chat.Message{}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// MCP tools through chatd, as users meet them: the model calls a server's tool by its
// <server>__<tool> name and reads its result; a tool that is not read-only waits for a
// person, whose approval card names the tool and its exact arguments; each user's calls
// carry that user (forwardUser), never another; the admin listener reports the server.
func TestMCPToolsThroughChatd(t *testing.T) {
	srv := mcptest.Start(t)
	model := agenttest.NewToolCaller(t)
	env := toolCallerEnv(model, mcpFile(t, `{"mcpServers": {"t": {"url": "`+srv.URL+`", "forwardUser": "token"}}}`))
	env["CHATD_AUTH"], env["CHATD_JWT_SECRET"], env["CHATD_JWT_AUDIENCE"] = "jwt", testSecret, "chatd"
	m, _ := startInProcess(t, env)
	st := openStore(t, m.cfg.DatabaseURL)
	wsURL := "ws://" + m.Addr() + "/v1/ws"
	tokens := map[string]string{}
	dial := func(user string) (*wstest.Client, string) {
		c := wstest.Dial(t, wsURL, nil)
		c.Token = authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: user, Audience: "chatd", ExpiresAt: time.Now().Add(time.Hour)})
		tokens[user] = c.Token
		return c, c.Hello("").SessionID
	}
	alice, aliceSession := dial("alice")
	bob, bobSession := dial("bob")

	ack := alice.Chat("e1", `call t__echo {"text":"hi"}`)
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	end := alice.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	stored := sessionMessages(t, st, aliceSession)
	tool := toolOf(t, stored, ack.RunID)
	require.Equal(t, "t__echo", tool.Tool.Name)
	require.Equal(t, chat.ToolOK, tool.Tool.Status)
	require.Equal(t, "echo: hi", deref(tool.Tool.Output))
	require.Equal(t, "t__echo said: echo: hi", replyText(stored, ack.RunID))
	require.Equal(t, tool.Tool.CallID, srv.Calls()[0].Key, "the call id is the idempotency key")

	// Each user's calls carry that user only.
	for i := range 3 {
		for _, u := range []struct {
			c       *wstest.Client
			session string
			name    string
		}{{alice, aliceSession, "alice"}, {bob, bobSession, "bob"}} {
			ack := u.c.Chat("w"+u.name+string(rune('0'+i)), `call t__whoami {}`)
			require.Equal(t, "chat.done", u.c.ReadTerminal().Type)
			out := deref(toolOf(t, sessionMessages(t, st, u.session), ack.RunID).Tool.Output)
			require.Equal(t, "header="+u.name+" meta="+u.name, out)
		}
	}

	// forwardUser "token": each call also carries the token its user's message came with.
	for _, call := range srv.Calls() {
		if call.Tool != "whoami" {
			continue
		}
		require.Equal(t, tokens[call.UserHeader], call.TokenHeader, "the header: %s's own token", call.UserHeader)
		require.Equal(t, tokens[call.UserMeta], call.TokenMeta)
		require.NotEmpty(t, call.TokenHeader)
	}

	// Not read-only: a person decides, shown the server's tool and its exact arguments.
	ack = alice.Chat("c1", `call t__charge {"amount":5}`)
	waiting := alice.Await(func(f wstest.Frame) bool {
		return f.Type == "run.status" && f.Run.Status == "awaiting_approval"
	})
	pa := waiting.Run.PendingApproval
	require.NotNil(t, pa)
	require.Equal(t, "t__charge", pa.Name)
	require.JSONEq(t, `{"amount":5}`, string(pa.Input))
	for _, call := range srv.Calls() {
		require.NotEqual(t, "charge", call.Tool, "not called before the decision")
	}
	alice.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "runId": ack.RunID, "toolCallId": pa.ToolCallID, "decision": "approve", "inputHash": pa.InputHash})
	require.Equal(t, "ack", alice.ReadReply("d1").Type)
	require.Equal(t, "chat.done", alice.ReadTerminal().Type)
	last := srv.Calls()[len(srv.Calls())-1]
	require.Equal(t, "charge", last.Tool)
	require.Equal(t, pa.ToolCallID, last.Key)

	// The admin listener: the server, connected, and its tools.
	resp, err := http.Get("http://" + m.AdminAddr() + "/mcp")
	require.NoError(t, err)
	var status struct {
		Servers []struct {
			Name      string
			Connected bool
			Tools     []string
		}
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&status))
	resp.Body.Close()
	require.Len(t, status.Servers, 1)
	require.True(t, status.Servers[0].Connected)
	require.Contains(t, status.Servers[0].Tools, "t__charge")
	metrics, err := http.Get("http://" + m.AdminAddr() + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	require.Contains(t, string(body), `chatd_mcp_server_up{server="t"} 1`)
	require.Contains(t, string(body), `chatd_mcp_tools{server="t"} 7`)
}

// A server that goes away mid-call: the model gets a failed call with the reason, and
// the run completes.
func TestMCPServerGoneMidCall(t *testing.T) {
	srv := mcptest.Start(t)
	model := agenttest.NewToolCaller(t)
	m, _ := startInProcess(t, toolCallerEnv(model, mcpFile(t, `{"mcpServers": {"t": {"url": "`+srv.URL+`", "approval": "never"}}}`)))
	st := openStore(t, m.cfg.DatabaseURL)
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	session := c.Hello("").SessionID
	srv.Hold()
	ack := c.Chat("g1", `call t__charge {}`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, ok := srv.Started(ctx)
	require.True(t, ok)
	srv.Restart()
	end := c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	tool := toolOf(t, sessionMessages(t, st, session), ack.RunID)
	require.Equal(t, chat.ToolError, tool.Tool.Status)
	require.Contains(t, replyText(sessionMessages(t, st, session), ack.RunID), `t__charge said: `)
	require.Contains(t, tool.Error.Message, `the MCP server "t"`)
}

// kill -9 while MCP calls run: the restarted chatd runs an idempotent tool's call again
// with the same idempotency key, and ends a call of any other tool interrupted (its
// effects unknown), as for chatd's own tools.
func TestMCPCallsAcrossKill9(t *testing.T) {
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	srv := mcptest.Start(t)
	model := agenttest.NewToolCaller(t)
	env := toolCallerEnv(model, mcpFile(t, `{"mcpServers": {"t": {"url": "`+srv.URL+`", "approval": "never"}}}`))
	env["DATABASE_URL"] = dbURL
	env["CHATD_RECOVER"] = "continue"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	proc := startChild(t, "chatd (to be killed)", env)
	for _, tc := range []struct {
		tool       string
		idempotent bool
	}{{"lookup", true}, {"charge", false}} {
		srv.Hold()
		c := wstest.Dial(t, proc.wsURL(), nil)
		session := c.Hello("").SessionID
		ack := c.Chat("k-"+tc.tool, `call t__`+tc.tool+` {"text":"x"}`)
		require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
		for { // (the last iteration's re-run said it started, too)
			started, ok := srv.Started(ctx)
			require.True(t, ok)
			if started == tc.tool {
				break
			}
		}
		before := len(srv.Calls())
		proc.signal(syscall.SIGKILL)
		proc.wait(15 * time.Second)
		srv.Release()
		proc = restartChild(t, proc, "chatd (restarted)", env)

		again := wstest.Dial(t, proc.wsURL(), nil)
		again.Hello(session)
		run := getRun(t, st, ack.RunID)
		if run.Status.Active() {
			end := again.ReadTerminal()
			require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
		}
		stored := sessionMessages(t, st, session)
		tool := toolOf(t, stored, ack.RunID)
		calls := srv.Calls()
		var mine []mcptest.Call
		for _, call := range calls {
			if call.Tool == tc.tool {
				mine = append(mine, call)
			}
		}
		if tc.idempotent {
			require.Equal(t, chat.ToolOK, tool.Tool.Status)
			require.Len(t, mine, 2, "run again after the crash")
			require.Equal(t, mine[0].Key, mine[1].Key, "with the same idempotency key")
			require.Equal(t, tool.Tool.CallID, mine[1].Key)
		} else {
			require.Equal(t, chat.ToolInterrupted, tool.Tool.Status)
			require.Len(t, mine, 1, "never run twice")
			require.Equal(t, before, len(calls), "nothing called after the crash")
			require.Contains(t, replyText(stored, ack.RunID), "t__charge said: ")
		}
	}
}

// @modelcontextprotocol/server-everything, as chatd's child (stdio) and as a server of
// its own (streamable HTTP): the model calls its tools; a long-running one streams
// progress and chat.cancel cancels it; a tool that is not read-only waits for approval,
// which survives a restart of chatd, and then runs.
func TestMCPServerEverythingThroughChatd(t *testing.T) {
	entry := os.Getenv("CHATD_MCP_EVERYTHING")
	if entry == "" {
		t.Fatal("CHATD_MCP_EVERYTHING is not set: make test-go sets it (web/node_modules/@modelcontextprotocol/server-everything/dist/index.js, installed by npm ci in web/)")
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			cfg := `{"mcpServers": {"everything": {"command": "` + node + `", "args": ["` + entry + `", "stdio"]}}}`
			if transport == "http" {
				port := freeTCPPort(t)
				srv := exec.Command(node, entry, "streamableHttp")
				srv.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
				require.NoError(t, srv.Start())
				t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
				// Listening before chatd starts (a server that is not yet has its tools
				// absent until chatd's next try, half a second later).
				require.Eventually(t, func() bool {
					c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
					if err == nil {
						c.Close()
					}
					return err == nil
				}, 20*time.Second, 10*time.Millisecond)
				cfg = fmt.Sprintf(`{"mcpServers": {"everything": {"url": "http://127.0.0.1:%d/mcp"}}}`, port)
			}
			everythingThroughChatd(t, cfg)
		})
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func everythingThroughChatd(t *testing.T, mcpConfig string) {
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	model := agenttest.NewToolCaller(t)
	env := toolCallerEnv(model, mcpFile(t, mcpConfig))
	env["DATABASE_URL"] = dbURL
	env["CHATD_RECOVER"] = "continue"
	proc := startChild(t, "chatd", env)
	c := wstest.Dial(t, proc.wsURL(), nil)
	session := c.Hello("").SessionID

	ack := c.Chat("s1", `call everything__get-sum {"a":2,"b":3}`)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	require.Contains(t, deref(toolOf(t, sessionMessages(t, st, session), ack.RunID).Tool.Output), "5")

	ack = c.Chat("l1", `call everything__trigger-long-running-operation {"duration":60,"steps":60}`)
	c.Await(func(f wstest.Frame) bool {
		return f.Type == "tool.output" && strings.Contains(deref(f.Text), "progress 1/60")
	})
	c.Send(map[string]any{"type": "chat.cancel", "requestId": "x1", "runId": ack.RunID})
	end := c.ReadTerminal()
	require.Equal(t, "chat.cancelled", end.Type, "%s", end.Raw)
	require.Equal(t, chat.ToolCancelled, toolOf(t, sessionMessages(t, st, session), ack.RunID).Tool.Status)

	ack = c.Chat("a1", `call everything__toggle-simulated-logging {}`)
	waiting := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
	pa := waiting.Run.PendingApproval
	require.Equal(t, "everything__toggle-simulated-logging", pa.Name)
	proc.signal(syscall.SIGTERM)
	proc.wait(30 * time.Second)
	proc = restartChild(t, proc, "chatd (restarted)", env)
	c = wstest.Dial(t, proc.wsURL(), nil)
	snap := c.Hello(session)
	require.NotNil(t, snap.ActiveRun, "%s", snap.Raw)
	require.Equal(t, "awaiting_approval", snap.ActiveRun.Status)
	require.Equal(t, pa.ToolCallID, snap.ActiveRun.PendingApproval.ToolCallID)
	c.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "runId": ack.RunID, "toolCallId": pa.ToolCallID, "decision": "approve", "inputHash": snap.ActiveRun.PendingApproval.InputHash})
	require.Equal(t, "ack", c.ReadReply("d1").Type)
	end = c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	tool := toolOf(t, sessionMessages(t, st, session), ack.RunID)
	require.Equal(t, chat.ToolOK, tool.Tool.Status)
	require.Contains(t, strings.ToLower(deref(tool.Tool.Output)), "logging")
}

// A configuration chatd cannot use stops it at start, naming the server and the key.
func TestMCPBadConfigurationStopsChatd(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"mcpServers": {"docs": {}}}`:                                     `mcp server "docs": neither "url"`,
		`{"mcpServers": {"docs": {"url": "http://x/mcp", "retry": 3}}}`:    `mcp server "docs": unknown key "retry"`,
		`{"mcpServers": {"docs": {"url": "http://x/mcp"}}`:                 `not valid JSON`,
		`{"mcpServers": {"docs": {"url": "http://x", "approval": "yes"}}}`: `mcp server "docs": "approval": "yes"`,
	} {
		_, err := ConfigFromEnv(nil, envMap(map[string]string{"DATABASE_URL": "postgres://x/y", "CHATD_MCP_CONFIG": mcpFile(t, cfg)}), io.Discard)
		require.Error(t, err, cfg)
		require.Contains(t, err.Error(), want, cfg)
		require.Contains(t, err.Error(), "CHATD_MCP_CONFIG", cfg)
	}
	_, err := ConfigFromEnv(nil, envMap(map[string]string{"DATABASE_URL": "postgres://x/y", "CHATD_MCP_CONFIG": filepath.Join(t.TempDir(), "missing.json")}), io.Discard)
	require.ErrorContains(t, err, "CHATD_MCP_CONFIG")
}
