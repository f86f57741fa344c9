package transport

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ConnLimits bound the TCP connections a listener holds, whatever they carry: requests
// kept alive between them, a body still arriving, WebSockets and AI SDK streams. A
// connection over a limit is answered at once, before any of it is read, with a short
// HTTP error (429 over the address's limit, 503 over the total) and closed: it holds no
// descriptor and no goroutine. Limits below 0 are off.
type ConnLimits struct {
	// PerAddr bounds the connections from one remote address (the TCP peer's: behind a
	// reverse proxy, the proxy's).
	PerAddr int
	// Total bounds the connections of the listener, so that chatd keeps descriptors for
	// its database, its sandboxes and the nodes it relays to.
	Total int
	// Metrics counts the refusals (LimitAddrConns, LimitConns); nil counts nothing.
	Metrics *Metrics
	Logger  zerolog.Logger
}

// LimitListener returns ln with l's limits.
func LimitListener(ln net.Listener, l ConnLimits) net.Listener {
	return &limitListener{Listener: ln, l: l, addrs: map[string]int{}}
}

type limitListener struct {
	net.Listener
	l ConnLimits

	mu    sync.Mutex
	total int
	addrs map[string]int
}

// Accept returns the next connection within the limits; those over them are refused
// here and never returned.
func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host := hostOf(c.RemoteAddr())
		limit := ll.admit(host)
		if limit == "" {
			return &limitedConn{Conn: c, ll: ll, host: host}, nil
		}
		ll.l.Metrics.RateLimited(limit)
		ll.l.Logger.Debug().Str("remote", c.RemoteAddr().String()).Str("limit", limit).Msg("refused a connection over a limit")
		refuse(c, limit)
	}
}

// admit counts a connection from host, or returns the limit it is over.
func (ll *limitListener) admit(host string) string {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	switch {
	case ll.l.Total >= 0 && ll.total >= ll.l.Total:
		return LimitConns
	case ll.l.PerAddr >= 0 && ll.addrs[host] >= ll.l.PerAddr:
		return LimitAddrConns
	}
	ll.total++
	ll.addrs[host]++
	return ""
}

func (ll *limitListener) release(host string) {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	ll.total--
	if ll.addrs[host]--; ll.addrs[host] <= 0 {
		delete(ll.addrs, host)
	}
}

// refuse answers a connection over limit with an HTTP error and closes it. The answer is
// a few bytes into a new socket's empty buffer: the write does not wait on the client.
func refuse(c net.Conn, limit string) {
	status, text := http.StatusTooManyRequests, "too many connections from this address\n"
	if limit == LimitConns {
		status, text = http.StatusServiceUnavailable, "the server has as many connections as it takes; try again\n"
	}
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write([]byte("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n" +
		"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nRetry-After: 1\r\n" +
		"Content-Length: " + strconv.Itoa(len(text)) + "\r\n\r\n" + text))
	_ = c.Close()
}

func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitedConn gives its place back when it closes, once, however often it is closed (the
// HTTP server and a hijacker both may).
type limitedConn struct {
	net.Conn
	ll   *limitListener
	host string
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.ll.release(c.host) })
	return err
}

// UserStreams counts each user's long-lived connections on this node, across the
// transports that hold one open (WebSockets from their hello, AI SDK streams while they
// stream), against one limit. The anonymous user ("") is not limited: with
// CHATD_AUTH=none every client is that user.
type UserStreams struct {
	max int // below 0: no limit
	mu  sync.Mutex
	n   map[string]int
}

// NewUserStreams returns a count whose users may hold max streams each; max below 0 is
// no limit.
func NewUserStreams(max int) *UserStreams {
	return &UserStreams{max: max, n: map[string]int{}}
}

// Acquire counts one more stream of user; false, counting nothing, when the user holds
// the most already.
func (u *UserStreams) Acquire(user string) bool {
	if user == "" || u.max < 0 {
		return true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n[user] >= u.max {
		return false
	}
	u.n[user]++
	return true
}

// Release gives back a stream Acquire counted.
func (u *UserStreams) Release(user string) {
	if user == "" || u.max < 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.n[user]--; u.n[user] <= 0 {
		delete(u.n, user)
	}
}

// Held is how many streams user holds.
func (u *UserStreams) Held(user string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n[user]
}

// Unbounded lifts the HTTP server's read and write deadlines from the request's
// connection: the request becomes a stream (a WebSocket about to be upgraded, a stream
// of events, one relayed to another node), which lasts as long as it has something to
// say, and which ends by its own means (pings, a queue a slow client overflows, its
// token's expiry). Call it once the request's body is read.
func Unbounded(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}
