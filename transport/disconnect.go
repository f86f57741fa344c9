package transport

// Disconnect says why a connection is closed: a code from the protocol's table of close
// codes (docs/protocol.md) and a short reason for people. It is a value, like
// centrifuge's: a WebSocket sends it as its close frame, another transport says it its
// own way (an error part, an HTTP status) with the same code.
type Disconnect struct {
	Code   int
	Reason string
}

// Disconnects every transport uses. Codes that only one transport has (a WebSocket's
// hello deadline, say) are that transport's own.
var (
	// DisconnectNormal: the client went away, or the server is done with it.
	DisconnectNormal = Disconnect{Code: 1000}
	// DisconnectShutdown: the server is stopping. The client reconnects and resumes.
	DisconnectShutdown = Disconnect{Code: 1001, Reason: "server shutting down"}
	// DisconnectSlow: more was waiting for the client than its budget allows. It
	// reconnects and resumes from the ring.
	DisconnectSlow = Disconnect{Code: 4008, Reason: "too slow: outbound queue full"}
	// DisconnectDeleted: the session was deleted. The client stops: the session is gone
	// for good, and a hello with its id is refused with the same code.
	DisconnectDeleted = Disconnect{Code: 4004, Reason: "session deleted"}
	// DisconnectMoved: another node holds the session now (several chatd nodes on one
	// database). The client reconnects at once and resumes; the node it reaches serves
	// it, or relays it to the holder.
	DisconnectMoved = Disconnect{Code: 4010, Reason: "session moved to another node"}
)
