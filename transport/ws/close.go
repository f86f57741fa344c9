package ws

import (
	"github.com/coder/websocket"

	"github.com/chatd/chatd/transport"
)

// Close codes only this transport uses, beyond the standard ones and the shared
// transport.DisconnectSlow (4008) and transport.DisconnectShutdown (1001). The 4000s say
// "do not just reconnect": fix the client (4000), get a new token (4001), or stop (4004).
const (
	closeProtocol     = 4000
	closeUnauthorized = 4001
	closeNotFound     = 4004
)

// Disconnects of this transport.
var (
	disconnectUnauthorized = transport.Disconnect{Code: closeUnauthorized, Reason: "unauthorized"}
	disconnectNotFound     = transport.Disconnect{Code: closeNotFound, Reason: "session not found"}
	disconnectNoHello      = transport.Disconnect{Code: closeProtocol, Reason: "no hello within the deadline"}
)

// protocolViolation is the disconnect of a client that broke the protocol: the reason says how.
func protocolViolation(reason string) transport.Disconnect {
	return transport.Disconnect{Code: closeProtocol, Reason: reason}
}

// status is a disconnect's close code on the wire.
func status(d transport.Disconnect) websocket.StatusCode { return websocket.StatusCode(d.Code) }
