package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

// dist is the built app (node build.mjs), committed like sqlc's output.
//
//go:embed all:dist
var dist embed.FS

// contentTypes are the types of the files the build writes, fixed here rather than read
// from the host's mime.types, which differ between machines (and lack .webmanifest).
var contentTypes = map[string]string{
	".html":        "text/html; charset=utf-8",
	".js":          "text/javascript; charset=utf-8",
	".css":         "text/css; charset=utf-8",
	".svg":         "image/svg+xml",
	".png":         "image/png",
	".webmanifest": "application/manifest+json",
	".json":        "application/json",
	".txt":         "text/plain; charset=utf-8",
}

// contentSecurityPolicy keeps the page to its own scripts, styles and server even if the
// sanitizer let something through in a rendered message. 'self' covers the same-origin
// WebSocket in current browsers.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; manifest-src 'self'; worker-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

// asset is one file of dist, ready to serve.
type asset struct {
	name  string
	data  []byte
	ctype string
	etag  string
}

// Handler serves the app: GET / and the app's own routes (/c/<session id>) answer with
// index.html, which decides what to show; every other path is a file of the build or
// 404. Every response must be revalidated (Cache-Control: no-cache) and carries an ETag
// made from its content, so a browser fetches a file only when a new build changed it
// and never runs a stale sw.js; the service worker keeps the app usable offline.
func Handler() http.Handler {
	return handler(load())
}

// load reads dist once: the embedded files never change while the process runs.
var load = sync.OnceValue(func() map[string]*asset {
	root, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // a constant path into the embedded FS
	}
	assets, err := readAssets(root)
	if err != nil {
		panic(fmt.Sprintf("web: the embedded app is unusable: %v", err))
	}
	return assets
})

// readAssets reads every file of root, keyed by its URL path ("/app.js").
func readAssets(root fs.FS) (map[string]*asset, error) {
	assets := map[string]*asset{}
	err := fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(root, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		ctype, ok := contentTypes[path.Ext(p)]
		if !ok {
			ctype = "application/octet-stream"
		}
		assets["/"+p] = &asset{
			name:  path.Base(p),
			data:  data,
			ctype: ctype,
			etag:  `"` + hex.EncodeToString(sum[:12]) + `"`,
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if assets["/index.html"] == nil {
		return nil, fmt.Errorf("no index.html: run make web")
	}
	return assets, nil
}

func handler(assets map[string]*asset) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		p := r.URL.Path
		if isAppRoute(p) {
			p = "/index.html"
		}
		a := assets[p]
		if a == nil {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		if strings.HasSuffix(a.name, ".html") {
			h.Set("Content-Security-Policy", contentSecurityPolicy)
			h.Set("Referrer-Policy", "no-referrer")
		}
		// ServeContent answers If-None-Match with 304 (from the ETag set above), HEAD,
		// and ranges.
		http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.data))
	})
}

// isAppRoute reports whether p is a page of the app rather than a file: "/" (a new
// conversation) or "/c/<session id>" (a conversation). The app reads the id from the
// URL; whether it names a session is the server's to say, over the WebSocket.
func isAppRoute(p string) bool {
	if p == "/" {
		return true
	}
	id, ok := strings.CutPrefix(p, "/c/")
	return ok && id != "" && !strings.Contains(id, "/")
}
