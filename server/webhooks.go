package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/transport/httpapi"
)

// webhookCollector reports the webhook outbox's events by state, read when scraped:
// the outbox is every node's, so every node reports the same figures.
type webhookCollector struct{ st *store.Store }

var webhookEventsDesc = prometheus.NewDesc("chatd_webhook_events",
	"Webhook events in the outbox, by state: pending (not delivered yet), delivered, or failed (given up after every attempt).",
	[]string{"state"}, nil)

func (c webhookCollector) Describe(ch chan<- *prometheus.Desc) { ch <- webhookEventsDesc }

func (c webhookCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.st.WebhookStats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(webhookEventsDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(webhookEventsDesc, prometheus.GaugeValue, float64(s.Pending), "pending")
	ch <- prometheus.MustNewConstMetric(webhookEventsDesc, prometheus.GaugeValue, float64(s.Delivered), "delivered")
	ch <- prometheus.MustNewConstMetric(webhookEventsDesc, prometheus.GaugeValue, float64(s.Failed), "failed")
}

// webhookStatus is the admin listener's GET /webhooks: the outbox's counts and its
// newest events not delivered, with their last error (docs/webhooks.md).
func (m *Server) webhookStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if m.webhooks == nil {
		_ = json.NewEncoder(w).Encode(map[string]any{"enabled": false})
		return
	}
	st := m.db.Store()
	stats, err := st.WebhookStats(r.Context())
	if err == nil {
		var recent []store.WebhookUndelivered
		if recent, err = st.WebhookRecent(r.Context(), 50); err == nil {
			_ = json.NewEncoder(w).Encode(map[string]any{
				"enabled": true, "pending": stats.Pending, "delivered": stats.Delivered, "failed": stats.Failed,
				"undelivered": recent,
			})
			return
		}
	}
	writeAdminError(w, http.StatusServiceUnavailable, "storage", err.Error())
}

// writeAdminError answers an admin request with status and an error body, in the API's
// shape.
func writeAdminError(w http.ResponseWriter, status int, code, msg string) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// eraseUser is the admin listener's DELETE /users/{id}: everything of user id goes, as
// their own DELETE /v1/users/me does (DELETE /users/ for the anonymous user).
func (m *Server) eraseUser(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if status, code, msg := adminAllowed(r, m.AdminAddr(), m.cfg.AdminToken); status != 0 {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="chatd admin"`)
		}
		writeAdminError(w, status, code, msg)
		return
	}
	e, err := m.sessions.Erase(r.Context(), r.PathValue("id"))
	if err != nil {
		code, msg := "internal", err.Error()
		if ce := (*conversation.Error)(nil); errors.As(err, &ce) {
			code, msg = ce.Code, ce.Message
		}
		writeAdminError(w, httpapi.Status(code), code, msg)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"erased": e})
}

// adminAllowed says whether r, made to the admin listener at listener (its bound
// address), may use its erasure. With token set, r must carry it as a bearer token.
// Without, both the listener and r's peer must be loopback addresses: a listener bound to
// a pod's address takes no erasure at all, since a proxy or sidecar on the machine can
// make any caller's connection come from loopback. It returns 0 when allowed, else the
// status, code and message to answer.
func adminAllowed(r *http.Request, listener, token string) (status int, code, msg string) {
	if token != "" {
		scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		// Hashed first, so that the comparison's time does not tell the token's length.
		want, have := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(want[:], have[:]) != 1 {
			return http.StatusUnauthorized, conversation.CodeUnauthorized, "the admin listener's erasure needs Authorization: Bearer <CHATD_ADMIN_TOKEN>"
		}
		return 0, "", ""
	}
	if isLoopback(listener) && isLoopback(r.RemoteAddr) {
		return 0, "", ""
	}
	return http.StatusForbidden, conversation.CodeUnauthorized, "erasure over an admin listener that is not on a loopback address needs CHATD_ADMIN_TOKEN set, and the request to carry it as a bearer token"
}

// isLoopback reports whether hostport's host is a loopback IP address.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	ip, perr := netip.ParseAddr(host)
	return err == nil && perr == nil && ip.Unmap().IsLoopback()
}
