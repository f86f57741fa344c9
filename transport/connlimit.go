package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// ConnLimits bound the TCP connections a listener holds, whatever they carry: requests
// kept alive between them, a body still arriving, WebSockets and AI SDK streams. A
// connection over a limit is not served: once its request's head has arrived it is
// answered with a short HTTP error (429 over the address's limit, 503 over the total)
// and closed, within a second, and at most maxRefusing are refused at once (more are
// closed without a word). Limits below 0 are off.
//
// An IPv6 client is counted by its /64, which one host (one customer line) usually has
// whole: per address it would have 2^64 addresses to spread over.
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
	return &limitListener{Listener: ln, l: l, addrs: map[string]int{}, refusing: make(chan struct{}, maxRefusing)}
}

const (
	// maxRefusing bounds the connections being answered a refusal at once; more are
	// closed without a word, so that refusals cannot hold more descriptors than this.
	maxRefusing = 64
	// refuseWait bounds how long a refused connection is kept: for its request's head
	// to arrive, then for the client to read the answer.
	refuseWait = time.Second
)

type limitListener struct {
	net.Listener
	l ConnLimits

	mu    sync.Mutex
	total int
	addrs map[string]int

	// refusing holds a token per connection being refused.
	refusing chan struct{}
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
		ll.refuse(c, limit)
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

// refuse answers a connection over limit with an HTTP error and closes it, on a
// goroutine of its own that lasts refuseWait at most. The answer waits for the request's
// head: a client answered before it has sent its request (Go's, a browser's) takes the
// answer for a broken connection. The connection is closed without an answer when
// maxRefusing are being refused already, or its request does not come in time.
func (ll *limitListener) refuse(c net.Conn, limit string) {
	select {
	case ll.refusing <- struct{}{}:
	default:
		_ = c.Close()
		return
	}
	go func() {
		defer func() { <-ll.refusing }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(refuseWait))
		if !readHead(c) {
			return
		}
		status, text := http.StatusTooManyRequests, "too many connections from this address\n"
		if limit == LimitConns {
			status, text = http.StatusServiceUnavailable, "the server has as many connections as it takes; try again\n"
		}
		_, err := c.Write([]byte("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n" +
			"Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nRetry-After: 1\r\n" +
			"Content-Length: " + strconv.Itoa(len(text)) + "\r\n\r\n" + text))
		if err != nil {
			return
		}
		// Closed for writing, then read until the client closes: closing with a body
		// unread would reset the connection, and the client might lose the answer.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
	}()
}

// readHead reads c until the end of an HTTP request's head; false when it does not come
// (in time, or within 16 KiB).
func readHead(c net.Conn) bool {
	buf := make([]byte, 0, 4<<10)
	var chunk [2 << 10]byte
	for len(buf) < 16<<10 {
		n, err := c.Read(chunk[:])
		buf = append(buf, chunk[:n]...)
		if bytes.Contains(buf, []byte("\r\n\r\n")) {
			return true
		}
		if err != nil {
			return false
		}
	}
	return false
}

func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ta.IP.To4() == nil && len(ta.IP) == net.IPv6len {
			return ta.IP.Mask(net.CIDRMask(64, 128)).String() + "/64"
		}
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

// CloseWrite half-closes, as net/http does before closing a connection whose request
// it did not read whole, so that the client gets the answer rather than a reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// SyscallConn is the socket's, so that a WebSocket can write to it without waiting
// (transport/ws's batchConn); an error if the connection is not a socket.
func (c *limitedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// ReadFrom keeps the TCP connection's (sendfile for the app's files).
func (c *limitedConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
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

// Max is the most streams a user may hold; below 0: no limit.
func (u *UserStreams) Max() int { return u.max }

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
