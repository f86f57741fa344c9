// Package ws is chatd's WebSocket transport: the endpoint GET /v1/ws that speaks
// protocol version 1 (docs/protocol.md), on github.com/coder/websocket.
//
// It owns, one concern per file:
//   - server.go: Config, the upgrade, tracking connections, Shutdown
//   - origin.go: the origin check (1008 for a refused browser origin)
//   - conn.go: a connection's lifecycle, from serve to the unsubscribe
//   - reader.go: the read loop and frame-level checks (text, JSON, requestId, type);
//     it never waits, so pongs are always read
//   - worker.go: the per-connection command worker: commands in arrival order, at most
//     MaxQueuedCommands (then busy), the protocol's order (hello first, once)
//   - hello.go: the hello deadline and the hello command
//   - commands.go: the other commands, each answered with one ack, error or history
//   - reply.go: replies and errors, and the protocol violations that close with 4000
//   - writer.go: the writer goroutine that drains the connection's transport.Outbox
//   - ping.go: pings and their timeout
//   - close.go: the close codes only this transport uses
//   - wire.go: protocol v1's wire types and encoder (Format, EncodeCatchUp)
//
// The queue, its budgets and the slow-consumer rule are transport.Outbox's: this package
// only writes what the outbox hands it. It turns frames into calls on the session's actor
// and never touches the database.
package ws
