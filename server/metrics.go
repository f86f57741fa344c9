package server

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newRegistry returns the registry /metrics serves, with the Go runtime's and the
// process's collectors. Each package registers its own metrics on it. It is not the
// global default registry, so two chatd instances in one test binary do not collide.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// adminHandler serves the admin listener: GET /metrics, /debug/pprof/ when configured,
// /mcp (the MCP servers' state, docs/tools.md), /webhooks (docs/webhooks.md), DELETE
// /users/{id} (erasure, docs/http.md: with CHATD_ADMIN_TOKEN, or on loopback only), and
// /healthz and /readyz (the public listener's, so a probe may use either). Nothing
// else: the API, the WebSocket and the app are only on the public listener.
func (m *Server) adminHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	public := m.srv.Handler()
	mux.Handle("GET /healthz", public)
	mux.Handle("GET /readyz", public)
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /mcp", m.mcpStatus)
	mux.HandleFunc("GET /webhooks", m.webhookStatus)
	mux.HandleFunc("DELETE /users/{id}", m.eraseUser)
	mux.HandleFunc("DELETE /users/{$}", m.eraseUser) // the anonymous user
	if m.cfg.Pprof {
		// Index also serves the named profiles (heap, goroutine, allocs, block, mutex).
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}
