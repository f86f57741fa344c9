package ws

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
)

// Limits (docs/protocol.md, "Limits"): commands per connection, connections per user and
// per remote address, handshakes per remote address. Every limiter is driven by the
// server's clock (AllowN with an explicit time), so tests move time instead of sleeping.

const (
	// codeRateLimited answers a command over its connection's command rate.
	codeRateLimited = conversation.CodeRateLimited
	// codeMoved answers a hello for a session another node holds (close 4010).
	codeMoved = "moved"
	// closeRateLimited closes a connection over a connection limit.
	closeRateLimited = 4029

	// handshakeSweepEvery is how often, at most, a handshake sweeps the handshake
	// limiters of addresses that have been quiet long enough to be full again.
	handshakeSweepEvery = time.Minute
)

var (
	disconnectUserConns = transport.Disconnect{Code: closeRateLimited, Reason: "too many connections for this user"}
	disconnectAddrConns = transport.Disconnect{Code: closeRateLimited, Reason: "too many connections from this address"}
)

// remoteHost is the host of the request's remote address, the key of the per-address
// limits. Behind a reverse proxy it is the proxy's address: no forwarding header is
// trusted.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// handshakeLimiter is one address's token bucket and when it was last used.
type handshakeLimiter struct {
	lim  *rate.Limiter
	last time.Time
}

// allowHandshake takes a token from host's handshake bucket. When there is none, it
// returns false and how long until there will be one.
func (s *Server) allowHandshake(host string) (bool, time.Duration) {
	if s.cfg.HandshakeRate == rate.Inf {
		return true, 0
	}
	now := s.clock.Now()
	s.hsMu.Lock()
	defer s.hsMu.Unlock()
	s.sweepHandshakes(now)
	h := s.handshakes[host]
	if h == nil {
		h = &handshakeLimiter{lim: rate.NewLimiter(s.cfg.HandshakeRate, s.cfg.HandshakeBurst)}
		s.handshakes[host] = h
	}
	h.last = now
	if h.lim.AllowN(now, 1) {
		return true, 0
	}
	r := h.lim.ReserveN(now, 1)
	delay := r.DelayFrom(now)
	r.CancelAt(now)
	return false, delay
}

// sweepHandshakes drops, at most once per handshakeSweepEvery, the limiters of addresses
// quiet for long enough that their buckets are full again: a new one is the same. The map
// holds only addresses seen recently, however many come and go.
func (s *Server) sweepHandshakes(now time.Time) {
	if now.Sub(s.hsSwept) < handshakeSweepEvery {
		return
	}
	s.hsSwept = now
	full := time.Duration(math.MaxInt64)
	if secs := float64(s.cfg.HandshakeBurst) / float64(s.cfg.HandshakeRate); secs < (time.Duration(math.MaxInt64) / time.Second).Seconds() {
		full = time.Duration(secs * float64(time.Second)) // a tiny rate must not overflow
	}
	for host, h := range s.handshakes {
		if now.Sub(h.last) > full {
			delete(s.handshakes, host)
		}
	}
}

// refuseHandshake answers an upgrade over its address's handshake rate: 429, and when
// to try again in whole seconds.
func refuseHandshake(w http.ResponseWriter, delay time.Duration) {
	secs := int(math.Ceil(delay.Seconds()))
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	http.Error(w, "too many handshakes from this address", http.StatusTooManyRequests)
}

// acquireUser counts one more connection of user; false when the user already has
// as many as the limit allows (Config.Users, Config.MaxConnsPerUser).
func (s *Server) acquireUser(user string) bool { return s.users.Acquire(user) }

func (s *Server) releaseUser(user string) { s.users.Release(user) }

// allowCommand takes a token from the connection's command bucket.
func (c *conn) allowCommand() bool {
	return c.cmdLimiter == nil || c.cmdLimiter.AllowN(c.s.clock.Now(), 1)
}
