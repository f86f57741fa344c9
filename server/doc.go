// Package server is chatd as a Go library: resumable AI chat over WebSockets, the HTTP
// API and the AI SDK's protocol, whose runs belong to the server, are stored in
// PostgreSQL as they happen, and are caught up by any client that reconnects. The chatd
// command (cmd/chatd) is Command; a Go program embeds the same server with its own tools
// or model:
//
//	cfg := server.DefaultConfig()
//	cfg.DatabaseURL = os.Getenv("DATABASE_URL")
//	s, err := server.New(cfg, server.WithTools(myTool{}))
//	if err != nil { ... }
//	err = s.Run(ctx) // serves on cfg.Addr until ctx is done, then shuts down
//
// Config holds every setting, each with its environment variable and flag
// (ConfigFromEnv reads them as the command does). New builds the Server; Start starts it
// and returns once it listens, Shutdown stops it gracefully, and Run does both around
// ctx. The public listener (Config.Addr) serves Handler: the transport's endpoints and
// the web app; a program with its own http.Server serves Handler itself
// (WithoutListener). A second, admin listener (Config.AdminAddr, loopback by default)
// serves Prometheus metrics at /metrics and, with Config.Pprof, Go's profiler under
// /debug/pprof/. Both answer /healthz and /readyz.
//
// The package owns the wiring, the configuration and the lifecycle: it builds every part
// (the database, the hub of conversations, the journal, the agent loop with its tools and
// sandboxes, the leases of a cluster, the transports) and runs those with a lifecycle as
// one service.Group, started in order and stopped in reverse. What each part does is its
// own package's; this one must not reach into them beyond their configuration.
package server
