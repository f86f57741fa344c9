package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/transport/wstest"
)

// A session's workspace over HTTP: listed with sizes and times, each file downloaded as
// an attachment that no browser renders; paths out of it refused; another user's and a
// session without a workspace answered as the API answers them.
func TestWorkspaceFilesOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.chat(alice, "hello")
	session := c.State.SessionID
	r := e.do(http.MethodGet, "/v1/sessions/"+session+"/files", alice, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.JSONEq(t, `{"files": [], "truncated": false}`, string(r.body), "no sandbox yet: nothing")

	ctx := context.Background()
	sb, _, err := e.sandboxes.Get(ctx, uuid.MustParse(session))
	require.NoError(t, err)
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "mkdir -p out && printf '<script>alert(1)</script>' > out/page.html && printf 'a,b' > data.csv && ln -s /etc/passwd leak"})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode)
	secret := filepath.Join(filepath.Dir(e.provider.Workspace(sb.ID())), "secret")
	require.NoError(t, os.WriteFile(secret, []byte("not yours"), 0o600))

	r = e.do(http.MethodGet, "/v1/sessions/"+session+"/files", alice, nil)
	require.Equal(t, http.StatusOK, r.status)
	require.NoError(t, wstest.ValidateDefinition("FileList", r.body), "%s", r.body)
	var list struct {
		Files []struct {
			Path       string
			Size       int64
			ModifiedAt string
		}
		Truncated bool
	}
	require.NoError(t, json.Unmarshal(r.body, &list))
	got := map[string]int64{}
	for _, f := range list.Files {
		got[f.Path] = f.Size
		require.NotEmpty(t, f.ModifiedAt)
	}
	require.Equal(t, map[string]int64{"out/page.html": 25, "data.csv": 3}, got)

	r = e.do(http.MethodGet, "/v1/sessions/"+session+"/files/out/page.html", alice, nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, "<script>alert(1)</script>", string(r.body))
	require.Equal(t, "application/octet-stream", r.header.Get("Content-Type"))
	require.Equal(t, `attachment; filename=page.html`, r.header.Get("Content-Disposition"))
	require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
	require.Contains(t, r.header.Get("Content-Security-Policy"), "sandbox")

	for _, bad := range []string{"..%2Fsecret", "out%2F..%2F..%2Fsecret", "%2Fetc%2Fpasswd", "leak", "out", "nope.txt"} {
		r := e.do(http.MethodGet, "/v1/sessions/"+session+"/files/"+bad, alice, nil)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, r.status, "%s: %d %s", bad, r.status, r.body)
		require.NotContains(t, string(r.body), "not yours")
		require.NotContains(t, string(r.body), "root:")
	}
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+session+"/files/%2Fetc%2Fpasswd", alice, nil), http.StatusBadRequest, "bad_request")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+session+"/files/leak", alice, nil), http.StatusNotFound, "not_found")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+session+"/files", bob, nil), http.StatusNotFound, "not_found")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+session+"/files/data.csv", bob, nil), http.StatusNotFound, "not_found")
}
