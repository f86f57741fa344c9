package main

import (
	"io"
	"net"
	"sync"
	"time"
)

// delayProxy forwards TCP connections to target, holding back every chunk sent towards
// the target for delay (order kept), so each database round trip takes delay longer.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func startDelayProxy(target string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, delay: delay}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *delayProxy) addr() string { return p.ln.Addr().String() }

func (p *delayProxy) serve() {
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
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
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

type chunk struct {
	data []byte
	due  time.Time
}

func (p *delayProxy) delayed(dst, src net.Conn) {
	ch := make(chan chunk, 4096)
	go func() {
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
	for c := range ch {
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.data); err != nil {
			for range ch {
			}
			return
		}
	}
}

func (p *delayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
