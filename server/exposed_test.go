package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/auth/authtest"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// This file is chatd as the README's "Deploying" section configures it for a network: a
// real process listening on every interface, JWTs from an identity provider's JWK Set,
// the shell tool on under bubblewrap, and every limit set. The auth, isolation and limits
// matrices and the sandbox escapes run against it from outside, as clients on the
// network would. Each part dials from an address of its own (127.0.0.0/8 is all the
// host's), so the per-address limits of one part do not spend another's.

const (
	exposedIssuer   = "https://idp.exposed.test"
	exposedAudience = "chatd-exposed"
)

// exposedModel is an OpenAI-compatible model server: a user message "$ <command>" is
// answered with a shell call running that command, a tool result with "Done.", anything
// else with "ok".
func exposedModel(t *testing.T) *http.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		last := req.Messages[len(req.Messages)-1]
		content, _ := last.Content.(string)
		var events []agenttest.Event
		switch {
		case last.Role == "tool":
			events = agenttest.Data(openAIChunk(`{"role":"assistant","content":"Done."}`, ""), openAIChunk(`{}`, "stop"), "[DONE]")
		case strings.HasPrefix(content, "$ "):
			input, _ := json.Marshal(map[string]string{"command": strings.TrimPrefix(content, "$ ")})
			args, _ := json.Marshal(string(input))
			events = agenttest.Data(
				openAIChunk(`{"role":"assistant","content":"Running it."}`, ""),
				openAIChunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"shell","arguments":`+string(args)+`}}]}`, ""),
				openAIChunk(`{}`, "tool_calls"),
				"[DONE]",
			)
		default:
			events = agenttest.Data(openAIChunk(`{"role":"assistant","content":"ok"}`, ""), openAIChunk(`{}`, "stop"), "[DONE]")
		}
		agenttest.SSE(events...)(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	srv.Addr = ln.Addr().String()
	return srv
}

// exposed is the running chatd and what its clients need.
type exposed struct {
	t     *testing.T
	chatd *child
	port  string
	admin string
	key   authtest.Key
}

// token is a good token of user's, expiring after ttl, signed with key.
func (e *exposed) token(key authtest.Key, user string, ttl time.Duration) string {
	return key.RS256(e.t, authtest.Claims{Subject: user, Issuer: exposedIssuer, Audience: exposedAudience, ExpiresAt: time.Now().Add(ttl)})
}

// from is what a client at ip (127.x.y.z) dials with.
func from(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}, Timeout: 30 * time.Second}
}

func (e *exposed) wsURL() string { return "ws://127.0.0.1:" + e.port + "/v1/ws" }

// dial opens a WebSocket from ip.
func (e *exposed) dial(t *testing.T, ip string) *wstest.Client {
	t.Helper()
	return wstest.Dial(t, e.wsURL(), &wstest.DialOptions{HTTPClient: from(ip)})
}

// connect dials from ip and says hello as user's token to sessionID ("" for a new one).
func (e *exposed) connect(t *testing.T, ip, token, sessionID string) *wstest.Client {
	t.Helper()
	c := e.dial(t, ip)
	c.Token = token
	c.Hello(sessionID)
	return c
}

// refused says hello with token and expects it refused as unauthorized: error, then
// close 4001.
func (e *exposed) refused(t *testing.T, ip, token string) {
	t.Helper()
	c := e.dial(t, ip)
	h := map[string]any{"type": "hello", "requestId": "h"}
	if token != "" {
		h["token"] = token
	}
	c.Send(h)
	f := c.Read()
	require.Equal(t, "error", f.Type, "%s", f.Raw)
	require.Equal(t, "unauthorized", f.Code, "%s", f.Raw)
	require.Equal(t, websocket.StatusCode(4001), c.ExpectClose())
}

// api calls the HTTP API from ip and returns the status and the error code, if any.
func (e *exposed) api(t *testing.T, ip, method, path, token string, body any) (int, string, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, "http://127.0.0.1:"+e.port+path, r)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := from(ip).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var e2 struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &e2)
	return resp.StatusCode, e2.Error.Code, raw
}

// awaitApproval waits for c's run to ask for a decision and returns its call id.
func awaitApproval(c *wstest.Client) string {
	st := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.PendingApproval != nil })
	return st.Run.PendingApproval.ToolCallID
}

// sessionRows is everything the database holds of a session, as JSON: what must not
// change when someone else tries it.
func sessionRows(t *testing.T, e *exposed, url, sessionID string) string {
	t.Helper()
	st := openStore(t, url)
	var out string
	require.NoError(t, st.Pool().QueryRow(dbCtx(t), `
		SELECT jsonb_build_array(
			(SELECT to_jsonb(s) FROM sessions s WHERE s.id = $1),
			(SELECT jsonb_agg(to_jsonb(r) ORDER BY r.started_at, r.id) FROM runs r WHERE r.session_id = $1),
			(SELECT jsonb_agg(to_jsonb(m) ORDER BY m.position) FROM messages m WHERE m.session_id = $1))::text`,
		sessionID).Scan(&out))
	require.NotContains(t, out, "[null", "the session is stored")
	return out
}

func TestExposedDeployment(t *testing.T) {
	key1, key2 := authtest.NewKey(t, "k1"), authtest.NewKey(t, "k2")
	idp := authtest.NewJWKS(t, key1)
	model := exposedModel(t)
	secret := fmt.Sprintf("chatd-secret-%d", time.Now().UnixNano())
	data := t.TempDir() // chatd's own files, readable by anyone on the host
	require.NoError(t, os.Chmod(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "secret.txt"), []byte(secret), 0o644))
	sandboxes := sandboxDir(t)
	dbURL := storetest.NewURL(t)

	e := &exposed{t: t, key: key1}
	// On every interface, at a port the kernel picks as chatd binds it (see startChild).
	e.chatd = startChildOn(t, "chatd", "0.0.0.0:0", "127.0.0.1", []string{"-admin-addr", "127.0.0.1:0"}, map[string]string{
		"DATABASE_URL":       dbURL,
		"CHATD_AUTH":         "jwt",
		"CHATD_JWKS_URL":     idp.URL,
		"CHATD_JWT_ISSUER":   exposedIssuer,
		"CHATD_JWT_AUDIENCE": exposedAudience,
		"CHATD_AGENT":        "openai",
		"OPENAI_BASE_URL":    "http://" + model.Addr + "/v1",
		"CHATD_MODEL":        "gpt-exposed",
		"CHATD_SHELL_TOOL":   "on",
		"CHATD_SANDBOX":      "bwrap",
		"CHATD_SANDBOX_DIR":  sandboxes,
		// Small enough to reach from a test.
		"CHATD_SANDBOX_PROCESSES":  "64",
		"CHATD_SANDBOX_FILE_SIZE":  "1MiB",
		"CHATD_COMMAND_RATE":       "1/m",
		"CHATD_COMMAND_BURST":      "40",
		"CHATD_MAX_CONNS_PER_USER": "3",
		"CHATD_MAX_CONNS_PER_ADDR": "6",
		"CHATD_HANDSHAKE_RATE":     "1/m",
		"CHATD_HANDSHAKE_BURST":    "12",
		"CHATD_MAX_RUNS_PER_USER":  "2",
		"CHATD_TEST_SECRET":        secret, // in chatd's environment
		"CHATD_TEST_DATA":          data,
	})
	_, e.port, _ = net.SplitHostPort(e.chatd.addr)
	e.admin = e.chatd.admin
	admin := e.admin

	t.Run("the public listener serves no metrics and no pprof", func(t *testing.T) {
		for _, path := range []string{"/metrics", "/debug/pprof/"} {
			status, _, _ := e.api(t, "127.0.0.2", http.MethodGet, path, "", nil)
			require.Equal(t, http.StatusNotFound, status, path)
		}
		status, body := getAt(t, admin, "/metrics")
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, "chatd_rate_limited_total")
	})

	t.Run("auth: the identity provider rotates in a new key", func(t *testing.T) {
		// A token signed with it is let in: its unknown key id makes chatd fetch the set
		// again (at most every 30 s, so this comes before any other unknown key id).
		idp.SetKeys(key1, key2)
		c := e.connect(t, "127.0.0.3", e.token(key2, "rotated", time.Hour), "")
		require.NotEmpty(t, c.State.SessionID)
		status, _, _ := e.api(t, "127.0.0.3", http.MethodGet, "/v1/sessions", e.token(key2, "rotated", time.Hour), nil)
		require.Equal(t, http.StatusOK, status)
	})

	t.Run("auth: every bad token is refused on the WebSocket and the API", func(t *testing.T) {
		rogue := authtest.NewKey(t, "k1") // the known key id, another key
		now := time.Now()
		good := authtest.Claims{Subject: "mallory", Issuer: exposedIssuer, Audience: exposedAudience, ExpiresAt: now.Add(time.Hour)}
		with := func(edit func(*authtest.Claims)) authtest.Claims { c := good; edit(&c); return c }
		for name, token := range map[string]string{
			"no token":                   "",
			"bad signature":              rogue.RS256(t, good),
			"HMAC, not a key of the set": authtest.HS256(t, []byte("0123456789abcdef0123456789abcdef"), good),
			"unsigned":                   authtest.None(t, good),
			"expired":                    key1.RS256(t, with(func(c *authtest.Claims) { c.ExpiresAt = now.Add(-time.Minute) })),
			"not yet valid":              key1.RS256(t, with(func(c *authtest.Claims) { c.NotBefore = now.Add(time.Hour) })),
			"no expiry":                  key1.RS256(t, with(func(c *authtest.Claims) { c.ExpiresAt = time.Time{} })),
			"wrong audience":             key1.RS256(t, with(func(c *authtest.Claims) { c.Audience = "another-app" })),
			"wrong issuer":               key1.RS256(t, with(func(c *authtest.Claims) { c.Issuer = "https://evil.test" })),
			"unknown key id":             authtest.NewKey(t, "k9").RS256(t, good),
		} {
			t.Run(name, func(t *testing.T) {
				ip := "127.0.1." + strconv.Itoa(len(name)) // spread over addresses: the handshake burst is 12
				e.refused(t, ip, token)
				status, code, _ := e.api(t, ip, http.MethodGet, "/v1/sessions", token, nil)
				require.Equal(t, http.StatusUnauthorized, status)
				require.Equal(t, "unauthorized", code)
			})
		}
	})

	t.Run("auth: a refreshed connection outlives its first token; the other is closed with 4001", func(t *testing.T) {
		// JWT times are whole seconds: kept's token expires at least a second before
		// lapsed's, so lapsed's close comes after kept's first expiry has passed.
		now := time.Now().Truncate(time.Second)
		kept := e.connect(t, "127.0.0.4", key1.RS256(t, authtest.Claims{Subject: "rita", Issuer: exposedIssuer, Audience: exposedAudience, ExpiresAt: now.Add(3 * time.Second)}), "")
		lapsed := e.connect(t, "127.0.0.4", key1.RS256(t, authtest.Claims{Subject: "rita", Issuer: exposedIssuer, Audience: exposedAudience, ExpiresAt: now.Add(5 * time.Second)}), "")

		warn := kept.ReadType("auth.expiring")
		require.NotEmpty(t, warn.Raw)
		kept.Send(map[string]any{"type": "auth.refresh", "requestId": "r", "token": e.token(key1, "rita", time.Hour)})
		require.Equal(t, "auth.refreshed", kept.ReadReply("r").Type)

		lapsed.ReadType("auth.expiring")
		require.Equal(t, websocket.StatusCode(4001), lapsed.ExpectClose())
		// Past its first token's expiry, the refreshed connection is served.
		require.Equal(t, "ack", kept.Chat("after", "still here?").Type)
		require.Equal(t, "chat.done", kept.ReadTerminal().Type)
	})

	t.Run("isolation: bob can neither see nor touch alice's session", func(t *testing.T) {
		alice := e.connect(t, "127.0.0.5", e.token(key1, "alice", time.Hour), "")
		sessionA := alice.State.SessionID
		require.Equal(t, "ack", alice.Chat("a1", "hello").Type)
		first := alice.ReadTerminal()
		require.Equal(t, "chat.done", first.Type)
		ack := alice.Chat("a2", "$ echo approved-by-alice > note.txt; cat note.txt")
		require.Equal(t, "ack", ack.Type)
		callID := awaitApproval(alice)
		runA, pendingRun := first.RunID, ack.RunID
		before := sessionRows(t, e, dbURL, sessionA)

		bobToken := e.token(key1, "bob", time.Hour)
		random := uuid.NewString()
		// hello on alice's session, fresh or as a tab that followed it: exactly as for a
		// session that does not exist.
		helloAs := func(id string, resume bool) (string, string, websocket.StatusCode) {
			c := e.dial(t, "127.0.0.6")
			h := map[string]any{"type": "hello", "requestId": "h", "sessionId": id, "token": bobToken}
			if resume {
				h["epoch"], h["lastSeq"] = alice.State.Epoch, alice.State.LastSeq
			}
			c.Send(h)
			f := c.Read()
			return f.Type + "/" + f.Code, f.ErrorText, c.ExpectClose()
		}
		for _, resume := range []bool{false, true} {
			kind, text, code := helloAs(sessionA, resume)
			require.Equal(t, "error/not_found", kind)
			require.Equal(t, websocket.StatusCode(4004), code)
			k2, t2, c2 := helloAs(random, resume)
			require.Equal(t, []any{k2, t2, c2}, []any{kind, text, code}, "alice's session looks like a missing one")
		}

		// On his own session, commands naming alice's runs and tool call are answered as
		// ones naming nothing.
		bob := e.connect(t, "127.0.0.6", bobToken, "")
		answer := func(cmd map[string]any) string {
			bob.Send(cmd)
			f := bob.ReadReply(cmd["requestId"].(string))
			require.Equal(t, "error", f.Type, "%s", f.Raw)
			return f.Code + ": " + strings.ReplaceAll(f.ErrorText, cmd["runId"].(string), "<run>")
		}
		n := 0
		for _, cmd := range []map[string]any{
			{"type": "chat.cancel"},
			{"type": "tool.decide", "toolCallId": callID, "decision": "approve"},
			{"type": "chat.resume", "mode": "continue"},
			{"type": "chat.resume", "mode": "retry"},
			{"type": "chat.dismiss"},
		} {
			for _, target := range []string{runA, pendingRun} {
				mine, theirs := map[string]any{}, map[string]any{}
				for k, v := range cmd {
					mine[k], theirs[k] = v, v
				}
				n++
				theirs["requestId"], theirs["runId"] = fmt.Sprintf("t%d", n), target
				mine["requestId"], mine["runId"] = fmt.Sprintf("m%d", n), uuid.NewString()
				require.Equal(t, answer(mine), answer(theirs), "%v on alice's run %s", cmd["type"], target)
			}
		}
		bob.Send(map[string]any{"type": "history.fetch", "requestId": "hist"})
		hist := bob.ReadReply("hist")
		require.Equal(t, "history", hist.Type)
		require.Empty(t, hist.Messages, "bob's history is his own")

		// The HTTP API: alice's session is not listed, and cannot be renamed or deleted.
		status, _, body := e.api(t, "127.0.0.6", http.MethodGet, "/v1/sessions", bobToken, nil)
		require.Equal(t, http.StatusOK, status)
		require.NotContains(t, string(body), sessionA)
		for _, m := range []struct {
			method string
			body   any
		}{{http.MethodPatch, map[string]string{"title": "pwned"}}, {http.MethodDelete, nil}} {
			s1, c1, b1 := e.api(t, "127.0.0.6", m.method, "/v1/sessions/"+sessionA, bobToken, m.body)
			s2, c2, b2 := e.api(t, "127.0.0.6", m.method, "/v1/sessions/"+random, bobToken, m.body)
			require.Equal(t, http.StatusNotFound, s1, "%s", b1)
			require.Equal(t, "not_found", c1)
			require.Equal(t, []any{s2, c2, strings.ReplaceAll(string(b2), random, "<id>")}, []any{s1, c1, strings.ReplaceAll(string(b1), sessionA, "<id>")}, m.method)
		}

		require.Equal(t, before, sessionRows(t, e, dbURL, sessionA), "nothing of alice's changed")
		// Alice's run still waits for her, and her decision runs the command.
		alice.Send(map[string]any{"type": "tool.decide", "requestId": "d", "runId": pendingRun, "toolCallId": callID, "decision": "approve"})
		require.Equal(t, "ack", alice.ReadReply("d").Type)
		require.Equal(t, "chat.done", alice.ReadTerminal().Type)
		require.Contains(t, toolOutput(t, alice), "approved-by-alice")
	})

	t.Run("limits: each is reached by one user or address while another is served", func(t *testing.T) {
		t.Run("commands per connection", func(t *testing.T) {
			c := e.connect(t, "127.0.0.7", e.token(key1, "carl", time.Hour), "") // hello: 1 of 40
			for i := range 39 {
				c.SendUnchecked(map[string]any{"type": "no-such-type", "requestId": fmt.Sprintf("u%d", i)})
				require.Equal(t, "unknown_type", c.ReadReply(fmt.Sprintf("u%d", i)).Code)
			}
			c.Send(map[string]any{"type": "chat.send", "requestId": "over", "content": "hi"})
			require.Equal(t, "rate_limited", c.ReadReply("over").Code)
			require.Empty(t, sessionMessagesOf(t, dbURL, c.State.SessionID), "the refused send stored nothing")

			d := e.connect(t, "127.0.0.8", e.token(key1, "dora", time.Hour), "")
			require.Equal(t, "ack", d.Chat("d1", "hi").Type)
		})
		t.Run("connections per user", func(t *testing.T) {
			tok := e.token(key1, "erin", time.Hour)
			for range 3 {
				e.connect(t, "127.0.0.9", tok, "")
			}
			c := e.dial(t, "127.0.0.9")
			c.Send(map[string]any{"type": "hello", "requestId": "h", "token": tok})
			require.Equal(t, "rate_limited", c.ReadReply("h").Code)
			require.Equal(t, websocket.StatusCode(4029), c.ExpectClose())
			e.connect(t, "127.0.0.9", e.token(key1, "finn", time.Hour), "") // another user, the same address
		})
		t.Run("connections per address", func(t *testing.T) {
			for i := range 6 {
				e.connect(t, "127.0.0.11", e.token(key1, fmt.Sprintf("crowd-%d", i), time.Hour), "")
			}
			// Refused by the listener, before the upgrade.
			_, err := wstest.TryDial(t, e.wsURL(), &wstest.DialOptions{HTTPClient: from("127.0.0.11")})
			require.ErrorContains(t, err, "429")
			e.connect(t, "127.0.0.12", e.token(key1, "crowd-0", time.Hour), "") // another address
		})
		t.Run("handshakes per address", func(t *testing.T) {
			upgrade := func(ip string) *http.Response {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				ws, resp, err := websocket.Dial(ctx, e.wsURL(), &websocket.DialOptions{HTTPClient: from(ip)})
				if err == nil {
					ws.CloseNow()
				}
				return resp
			}
			for range 12 {
				require.Equal(t, http.StatusSwitchingProtocols, upgrade("127.0.0.13").StatusCode)
			}
			over := upgrade("127.0.0.13")
			require.Equal(t, http.StatusTooManyRequests, over.StatusCode)
			require.NotEmpty(t, over.Header.Get("Retry-After"))
			require.Equal(t, http.StatusSwitchingProtocols, upgrade("127.0.0.14").StatusCode)
		})
		t.Run("active runs per user", func(t *testing.T) {
			tok := e.token(key1, "gus", time.Hour)
			for i := range 2 {
				c := e.connect(t, "127.0.0.15", tok, "")
				require.Equal(t, "ack", c.Chat(fmt.Sprintf("g%d", i), "$ true").Type)
				awaitApproval(c) // it waits for gus: active
			}
			third := e.connect(t, "127.0.0.15", tok, "")
			f := third.Chat("g2", "$ true")
			require.Equal(t, "rate_limited", f.Code, "%s", f.Raw)
			require.Empty(t, sessionMessagesOf(t, dbURL, third.State.SessionID))

			h := e.connect(t, "127.0.0.16", e.token(key1, "hana", time.Hour), "")
			require.Equal(t, "ack", h.Chat("h1", "hi").Type)
			require.Equal(t, "chat.done", h.ReadTerminal().Type)
		})
		m := scrapeAt(t, admin)
		for _, limit := range []string{"command", "user_conns", "addr_conns", "handshake", "runs"} {
			require.EqualValues(t, 1, m.value(t, "chatd_rate_limited_total", "limit", limit), limit)
		}
	})

	t.Run("sandbox: an approved command cannot get out", func(t *testing.T) {
		// Another user's workspace, with something in it.
		jay := e.connect(t, "127.0.0.17", e.token(key1, "jay", time.Hour), "")
		require.Equal(t, "ack", jay.Chat("j1", "$ echo "+secret+" > mine.txt").Type)
		jay.Send(map[string]any{"type": "tool.decide", "requestId": "d", "toolCallId": awaitApproval(jay), "decision": "approve"})
		require.Equal(t, "chat.done", jay.ReadTerminal().Type)
		theirs, err := filepath.Glob(filepath.Join(sandboxes, "*", "workspace", "mine.txt"))
		require.NoError(t, err)
		require.Len(t, theirs, 1, "jay's file is in his workspace on the host")

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
		pid := strconv.Itoa(e.chatd.cmd.Process.Pid)
		hostPort := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		_, adminPort, _ := net.SplitHostPort(admin)
		command := strings.Join([]string{
			"cat /proc/" + pid + "/environ",
			"cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep CHATD_TEST_SECRET",
			"kill -TERM " + pid,
			"cat " + data + "/secret.txt",
			"cat " + theirs[0],
			"ls " + sandboxes,
			"echo x > /usr/evil",
			"mkdir -p " + data + " && echo x > " + data + "/evil",
			"bash -c 'echo hi > /dev/tcp/127.0.0.1/" + hostPort + "'",
			"bash -c 'echo hi > /dev/tcp/127.0.0.1/" + adminPort + "'",
			"bash -c 'echo hi > /dev/tcp/127.0.0.1/" + e.port + "'",
			"bash -c 'echo limits: $(ulimit -u) $(ulimit -f)'",
			"head -c 3000000 /dev/zero > big; echo big: $(stat -c %s big)",
			"echo reached the end",
		}, "; ")
		ivy := e.connect(t, "127.0.0.18", e.token(key1, "ivy", time.Hour), "")
		require.Equal(t, "ack", ivy.Chat("i1", "$ "+command).Type)
		ivy.Send(map[string]any{"type": "tool.decide", "requestId": "d", "toolCallId": awaitApproval(ivy), "decision": "approve"})
		require.Equal(t, "chat.done", ivy.ReadTerminal().Type)

		out := toolOutput(t, ivy)
		t.Logf("the command's output:\n%s", out)
		require.Contains(t, out, "reached the end")
		require.NotContains(t, out, secret)
		require.Contains(t, out, "No such process")
		require.Contains(t, out, "Read-only file system")
		require.Contains(t, out, "limits: 64 1024") // processes; file size in 1024-byte blocks
		require.Contains(t, out, "big: 1048576")
		require.GreaterOrEqual(t, strings.Count(out, "Connection refused")+strings.Count(out, "Network is unreachable"), 3, "no listener of the host is reachable")
		require.NoFileExists(t, filepath.Join(data, "evil"))
		require.NoFileExists(t, "/usr/evil")
		select {
		case <-accepted:
			t.Fatal("the sandbox reached a listener on the host")
		default:
		}
		select {
		case <-e.chatd.done:
			t.Fatal("chatd died")
		default:
		}
		// chatd serves on, and jay's file is as he left it.
		got, err := os.ReadFile(theirs[0])
		require.NoError(t, err)
		require.Equal(t, secret+"\n", string(got))
		require.Equal(t, "ack", jay.Chat("j2", "still there?").Type)
		require.Equal(t, "chat.done", jay.ReadTerminal().Type)
	})
}

// toolOutput is the output of the last tool call c's state holds.
func toolOutput(t *testing.T, c *wstest.Client) string {
	t.Helper()
	var last *wstest.Message
	for _, m := range c.State.Messages {
		if m.Tool != nil && m.Tool.Output != nil && (last == nil || m.Position > last.Position) {
			last = m
		}
	}
	require.NotNil(t, last, "no tool output")
	return *last.Tool.Output
}

// sessionMessagesOf is sessionMessages on the database at url.
func sessionMessagesOf(t *testing.T, url, sessionID string) []string {
	t.Helper()
	var contents []string
	for _, m := range sessionMessages(t, openStore(t, url), sessionID) {
		contents = append(contents, m.Content)
	}
	return contents
}
