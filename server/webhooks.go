package server

import (
	"context"
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
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": "storage", "message": err.Error()}})
}

// eraseUser is the admin listener's DELETE /users/{id}: everything of user id goes, as
// their own DELETE /v1/users/me does (DELETE /users/ for the anonymous user).
func (m *Server) eraseUser(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if status, code, msg := adminAllowed(r, m.cfg.AdminToken); status != 0 {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="chatd admin"`)
		}
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
		return
	}
	e, err := m.sessions.Erase(r.Context(), r.PathValue("id"))
	if err != nil {
		code, msg := "internal", err.Error()
		if ce := (*conversation.Error)(nil); errors.As(err, &ce) {
			code, msg = ce.Code, ce.Message
		}
		w.WriteHeader(httpapi.Status(code))
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"erased": e})
}

// adminAllowed says whether r may use the admin listener's erasure: with token set, it
// must carry it as a bearer token; without, it must come from a loopback address. It
// returns 0 when allowed, else the status, code and message to answer.
func adminAllowed(r *http.Request, token string) (status int, code, msg string) {
	if token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			return http.StatusUnauthorized, conversation.CodeUnauthorized, "the admin listener's erasure needs Authorization: Bearer <CHATD_ADMIN_TOKEN>"
		}
		return 0, "", ""
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if ip, perr := netip.ParseAddr(host); err == nil && perr == nil && ip.Unmap().IsLoopback() {
		return 0, "", ""
	}
	return http.StatusForbidden, conversation.CodeUnauthorized, "erasure over the admin listener from another machine needs CHATD_ADMIN_TOKEN set, and the request to carry it as a bearer token"
}
