package transport

import (
	"net/http"
	"net/url"
	"path"
	"strings"
)

// OriginAllowed allows requests without an Origin (non-browser clients), from the
// server's own host, and from the allowed patterns (CHATD_ALLOWED_ORIGINS): host
// patterns match the origin's host with its port ("localhost:5173", "*.example.com"),
// patterns with a scheme match scheme and host ("https://app.example.com"). The
// WebSocket endpoint and the HTTP API use it alike.
func OriginAllowed(r *http.Request, patterns []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) {
		return true
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return true
		}
	}
	return false
}
