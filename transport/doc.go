// Package transport is chatd's HTTP surface: the WebSocket endpoint /v1/ws that speaks
// protocol version 1 (docs/protocol.md), and /healthz and /readyz.
//
// It owns the wire types and their encoding (Encoder is the conversation.Encoder), one
// writer goroutine and a bounded outbound queue per connection, the read limit, the hello
// deadline, pings, origin checks and authentication. It turns frames into calls on the
// session's actor and answers each command with exactly one ack, error or history. It
// never touches the database; the conversation package decides what is stored.
package transport
