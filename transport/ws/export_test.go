package ws

// The reply frames, for the schema test in package transport_test: conn.reply encodes
// them with json.Marshal, and so does the test.
type (
	WireAck        = wireAck
	WireErrorReply = wireErrorReply
	WireHistory    = wireHistory

	WireAuthExpiring  = wireAuthExpiring
	WireAuthRefreshed = wireAuthRefreshed
)

// ToWireMessages is how replies carry messages.
var ToWireMessages = toWireMessages

// HandshakeLimiters is how many remote addresses have a handshake bucket.
func HandshakeLimiters(s *Server) int {
	s.hsMu.Lock()
	defer s.hsMu.Unlock()
	return len(s.handshakes)
}
