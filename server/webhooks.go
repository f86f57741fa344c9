package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
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
