package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/web"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// get serves one request from the embedded app.
func get(t *testing.T, method, target string, header http.Header) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	web.Handler().ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestIndexAndAppRoutes(t *testing.T) {
	t.Parallel()
	index := get(t, http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, index.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", index.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", index.Header.Get("Cache-Control"))
	require.Contains(t, index.Header.Get("Content-Security-Policy"), "script-src 'self'")
	html := body(t, index)
	require.Contains(t, html, `<script type="module" src="/app.js"></script>`)
	require.Contains(t, html, `rel="manifest" href="/manifest.webmanifest"`)

	// A conversation's URL is the app too: reloading it reopens the conversation.
	conv := get(t, http.MethodGet, "/c/0193a1b2-0000-7000-8000-000000000001", nil)
	require.Equal(t, http.StatusOK, conv.StatusCode)
	require.Equal(t, html, body(t, conv))

	head := get(t, http.MethodHead, "/", nil)
	require.Equal(t, http.StatusOK, head.StatusCode)
	require.Empty(t, body(t, head))
}

func TestAssets(t *testing.T) {
	t.Parallel()
	for path, ctype := range map[string]string{
		"/app.js":                 "text/javascript; charset=utf-8",
		"/app.css":                "text/css; charset=utf-8",
		"/sw.js":                  "text/javascript; charset=utf-8",
		"/manifest.webmanifest":   "application/manifest+json",
		"/icons/icon.svg":         "image/svg+xml",
		"/icons/icon-192.png":     "image/png",
		"/icons/icon-512.png":     "image/png",
		"/icons/maskable-512.png": "image/png",
	} {
		resp := get(t, http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Equal(t, ctype, resp.Header.Get("Content-Type"), path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
		require.NotEmpty(t, body(t, resp), path)
	}

	// The manifest is JSON whose icons are served.
	var manifest struct {
		StartURL string `json:"start_url"`
		Display  string `json:"display"`
		Icons    []struct {
			Src     string `json:"src"`
			Purpose string `json:"purpose"`
		} `json:"icons"`
	}
	require.NoError(t, json.Unmarshal([]byte(body(t, get(t, http.MethodGet, "/manifest.webmanifest", nil))), &manifest))
	require.Equal(t, "/", manifest.StartURL)
	require.Equal(t, "standalone", manifest.Display)
	maskable := false
	for _, icon := range manifest.Icons {
		require.Equal(t, http.StatusOK, get(t, http.MethodGet, icon.Src, nil).StatusCode, icon.Src)
		maskable = maskable || icon.Purpose == "maskable"
	}
	require.True(t, maskable, "a maskable icon")
}

// sw.js is always revalidated: a browser must see a new build's service worker, which
// then replaces the cached shell.
func TestServiceWorkerIsRevalidated(t *testing.T) {
	t.Parallel()
	resp := get(t, http.MethodGet, "/sw.js", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	etag := resp.Header.Get("ETag")
	require.NotEmpty(t, etag)

	again := get(t, http.MethodGet, "/sw.js", http.Header{"If-None-Match": {etag}})
	require.Equal(t, http.StatusNotModified, again.StatusCode)
	require.Empty(t, body(t, again))
}

func TestUnknownPathsAreNotFound(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/nope.js", "/icons/nope.png", "/c/", "/c/a/b", "/index.htm", "/debug/pprof/"} {
		resp := get(t, http.MethodGet, path, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), path)
	}
	resp := get(t, http.MethodPost, "/", nil)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, "GET, HEAD", resp.Header.Get("Allow"))
}
