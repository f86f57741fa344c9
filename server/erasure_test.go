package server

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/auth/authtest"
	"github.com/chatd/chatd/transport/wstest"
)

// Erasure leaves nothing of a user: after DELETE /v1/users/me, no row of any table holds
// their id or a text they wrote, nor does any file under the sandbox directory; their live
// tab was closed with 4004; another user is untouched; a second call removes nothing; the
// admin listener erases another user the same way, given CHATD_ADMIN_TOKEN.
func TestErasureLeavesNothingOfTheUser(t *testing.T) {
	model := agenttest.NewToolCaller(t)
	env := toolCallerEnv(model, "")
	env["CHATD_AUTH"], env["CHATD_JWT_SECRET"], env["CHATD_JWT_AUDIENCE"] = "jwt", testSecret, "chatd"
	env["CHATD_SHELL_TOOL"], env["CHATD_SANDBOX"] = "on", "local"
	sandboxDir := t.TempDir()
	env["CHATD_SANDBOX_DIR"] = sandboxDir
	hooks := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(hooks.Close)
	env["CHATD_WEBHOOK_URL"], env["CHATD_WEBHOOK_SECRET"] = hooks.URL, webhookSecret // events stay pending
	adminToken := "admin-" + uuid.NewString()
	env["CHATD_ADMIN_TOKEN"] = adminToken
	m, _ := startInProcess(t, env)
	st := openStore(t, m.cfg.DatabaseURL)
	base := "http://" + m.Addr()

	user, other := "eve-"+uuid.NewString()[:8], "bob-"+uuid.NewString()[:8]
	marker := "marker-" + uuid.NewString()
	token := func(u string) string {
		return authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: u, Audience: "chatd", ExpiresAt: time.Now().Add(time.Hour)})
	}
	dial := func(u string) (*wstest.Client, string) {
		c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
		c.Token = token(u)
		return c, c.Hello("").SessionID
	}
	do := func(method, url, tok string) (int, map[string]any) {
		t.Helper()
		req, err := http.NewRequest(method, url, nil)
		require.NoError(t, err)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		b, _ := io.ReadAll(resp.Body)
		if len(b) > 0 {
			require.NoError(t, json.Unmarshal(b, &v), "%s", b)
		}
		return resp.StatusCode, v
	}

	// The user: a conversation with the marker, a shell call that writes it into the
	// sandbox, a second session deleted already, and a tab left open.
	eve, _ := dial(user)
	eve.Chat("m1", "remember "+marker)
	require.Equal(t, "chat.done", eve.ReadTerminal().Type)
	ack := eve.Chat("m2", `call shell {"command":"echo `+marker+` > note.txt; echo `+user+` >> note.txt"}`)
	waiting := eve.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
	pa := waiting.Run.PendingApproval
	eve.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "runId": ack.RunID, "toolCallId": pa.ToolCallID, "decision": "approve", "inputHash": pa.InputHash})
	require.Equal(t, "ack", eve.ReadReply("d1").Type)
	require.Equal(t, "chat.done", eve.ReadTerminal().Type)
	found := false
	_ = filepath.WalkDir(sandboxDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "note.txt" {
			found = true
		}
		return nil
	})
	require.True(t, found, "the shell call wrote into the sandbox")
	gone, goneSession := dial(user)
	gone.Chat("g1", "forget "+marker)
	require.Equal(t, "chat.done", gone.ReadTerminal().Type)
	status, _ := do(http.MethodDelete, base+"/v1/sessions/"+goneSession, token(user))
	require.Equal(t, http.StatusNoContent, status)
	bob, _ := dial(other)
	dial(other) // a second session, never used
	bob.Chat("b1", "hello from the other user")
	require.Equal(t, "chat.done", bob.ReadTerminal().Type)

	// The anonymous user cannot erase itself, and nobody erases without a token.
	status, _ = do(http.MethodDelete, base+"/v1/users/me", "")
	require.Equal(t, http.StatusUnauthorized, status)

	status, body := do(http.MethodDelete, base+"/v1/users/me", token(user))
	require.Equal(t, http.StatusOK, status, "%v", body)
	erased := body["erased"].(map[string]any)
	require.EqualValues(t, 1, erased["liveSessions"], "%v", erased)
	require.EqualValues(t, 2, erased["sessions"], "the live one and the tombstone: %v", erased)
	require.Equal(t, websocket.StatusCode(4004), eve.ExpectClose(), "the open tab is closed as deleted")

	// Nothing of the user in any table, nor in any file.
	searchDB := func(needle string) []string {
		t.Helper()
		ctx := context.Background()
		rows, err := st.Pool().Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)
		require.NoError(t, err)
		var tables []string
		for rows.Next() {
			var name string
			require.NoError(t, rows.Scan(&name))
			tables = append(tables, name)
		}
		require.NoError(t, rows.Err())
		require.Contains(t, tables, "webhook_outbox")
		var hits []string
		for _, tbl := range tables {
			var n int
			require.NoError(t, st.Pool().QueryRow(ctx, `SELECT count(*) FROM `+tbl+` t WHERE t::text LIKE '%' || $1 || '%'`, needle).Scan(&n))
			if n > 0 {
				hits = append(hits, tbl)
			}
		}
		return hits
	}
	require.Empty(t, searchDB(user), "rows with the user's id")
	require.Empty(t, searchDB(marker), "rows with the user's text")
	require.NotEmpty(t, searchDB(other), "the other user's rows stay")
	_ = filepath.WalkDir(sandboxDir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		require.NotContains(t, p, user)
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.False(t, strings.Contains(string(b), marker) || strings.Contains(string(b), user), "%s holds the user's data", p)
		}
		return nil
	})

	// Again: nothing left to remove.
	status, body = do(http.MethodDelete, base+"/v1/users/me", token(user))
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, map[string]any{"liveSessions": 0.0, "sessions": 0.0, "runs": 0.0, "streamChunks": 0.0, "webhookEvents": 0.0}, body["erased"])

	// The admin listener erases any user, given its token.
	for _, tok := range []string{"", "admin-wrong", token(other)} {
		status, body = do(http.MethodDelete, "http://"+m.AdminAddr()+"/users/"+other, tok)
		require.Equal(t, http.StatusUnauthorized, status, "token %q: %v", tok, body)
		require.Equal(t, "unauthorized", body["error"].(map[string]any)["code"])
	}
	require.NotEmpty(t, searchDB(other), "a refused erasure removed nothing")
	status, body = do(http.MethodDelete, "http://"+m.AdminAddr()+"/users/"+other, adminToken)
	require.Equal(t, http.StatusOK, status, "%v", body)
	require.EqualValues(t, 2, body["erased"].(map[string]any)["liveSessions"])
	require.Equal(t, websocket.StatusCode(4004), bob.ExpectClose())
	require.Empty(t, searchDB(other))
}

// Without CHATD_ADMIN_TOKEN the admin listener's erasure is taken only on a loopback
// listener from a loopback peer: an admin listener bound to the pod's address for
// Prometheus does not let the pod network (or a sidecar relaying it) erase users. With a
// token, only the token counts, wherever from.
func TestAdminErasureNeedsLoopbackOrToken(t *testing.T) {
	const local = "127.0.0.1:9090"
	for _, c := range []struct {
		listener, remote, token, auth string
		want                          int
	}{
		{local, "127.0.0.1:5000", "", "", 0},
		{"[::1]:9090", "[::1]:5000", "", "", 0},
		{local, "[::ffff:127.0.0.1]:5000", "", "", 0},
		{local, "10.0.0.7:5000", "", "", http.StatusForbidden},
		{local, "[2001:db8::1]:5000", "", "", http.StatusForbidden},
		// On a pod's address a loopback peer may be a sidecar relaying anyone.
		{"10.0.0.2:9090", "127.0.0.6:5000", "", "", http.StatusForbidden},
		{"[::]:9090", "127.0.0.1:5000", "", "", http.StatusForbidden},
		{"10.0.0.2:9090", "10.0.0.7:5000", "s3cret", "Bearer s3cret", 0},
		{"10.0.0.2:9090", "10.0.0.7:5000", "s3cret", "bearer s3cret", 0},
		{"10.0.0.2:9090", "10.0.0.7:5000", "s3cret", "Bearer s3cre", http.StatusUnauthorized},
		{"10.0.0.2:9090", "10.0.0.7:5000", "s3cret", "Bearer s3crett", http.StatusUnauthorized},
		{local, "127.0.0.1:5000", "s3cret", "", http.StatusUnauthorized},
		{local, "127.0.0.1:5000", "s3cret", "s3cret", http.StatusUnauthorized},
		{local, "127.0.0.1:5000", "s3cret", "Basic s3cret", http.StatusUnauthorized},
	} {
		r := httptest.NewRequest(http.MethodDelete, "/users/bob", nil)
		r.RemoteAddr = c.remote
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		status, code, msg := adminAllowed(r, c.listener, c.token)
		require.Equal(t, c.want, status, "%+v: %s", c, msg)
		if status != 0 {
			require.Equal(t, "unauthorized", code)
			require.Contains(t, msg, "CHATD_ADMIN_TOKEN")
		}
	}
}
