// Package delayproxy is a TCP proxy that delays everything sent towards its target: put
// it between chatd and PostgreSQL and every database round trip takes that much longer,
// as with a database far away or under load. The benchmark's slow-database scenario and
// the tests of a slow database share it.
//
// It owns its listener, the connections it forwards and their goroutines; Close stops
// them all and waits for them.
package delayproxy

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections to a target, holding back every chunk sent towards the
// target for a delay (order kept). The answers come back at once, so a round trip takes
// the delay longer.
type Proxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	done   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// Start listens on a free loopback port and forwards to target (host:port).
func Start(target string, delay time.Duration) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, delay: delay, done: make(chan struct{})}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's host:port: connect there instead of to the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			_, _ = io.Copy(c, up)
			c.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.delayed(up, c)
			up.Close()
		}()
	}
}

// track records a forwarded pair so Close can end it; it refuses once Close has begun.
func (p *Proxy) track(c, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		up.Close()
		return false
	}
	p.conns = append(p.conns, c, up)
	return true
}

type chunk struct {
	data []byte
	due  time.Time
}

// delayed copies src to dst, each chunk delay after it was read. Reading goes on while
// earlier chunks wait, so the delay is added once per round trip, not per chunk.
func (p *Proxy) delayed(dst, src net.Conn) {
	ch := make(chan chunk, 4096)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				ch <- chunk{buf[:n], time.Now().Add(p.delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		for range ch { // until the reader has stopped
		}
	}()
	for c := range ch {
		t := time.NewTimer(time.Until(c.due))
		select {
		case <-t.C:
		case <-p.done:
			t.Stop()
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}

// Close stops accepting, cuts every forwarded connection and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	close(p.done)
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	p.wg.Wait()
}
