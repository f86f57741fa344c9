// Command chatd serves resumable AI chat over WebSockets: runs belong to the server, are
// stored in PostgreSQL as they happen, and any client that reconnects is caught up.
//
// Configuration is by flags or environment variables; see `chatd -help` and README.md.
// The public listener (CHATD_ADDR) serves the transport's endpoints and the web app; a
// second, admin listener (CHATD_ADMIN_ADDR, loopback by default) serves Prometheus
// metrics at /metrics and, with -pprof, Go's profiler under /debug/pprof/. Both answer
// /healthz and /readyz.
//
// The server is package github.com/chatd/chatd/server, which a Go program can embed
// (docs/tools.md); this command is its Command.
package main

import (
	"os"

	"github.com/chatd/chatd/server"
)

func main() {
	os.Exit(server.Command(os.Args[1:], os.Getenv, os.Stderr))
}
