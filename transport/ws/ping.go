package ws

import "context"

// schedulePing arms the next ping. Pings run from a timer, not a goroutine of their own,
// so an idle connection costs one goroutine: the reader.
//
// coder/websocket reads a pong only inside Read, so pings work because the reader never
// stops reading: it hands commands to the worker and never waits for one.
func (c *conn) schedulePing() {
	c.pingMu.Lock()
	defer c.pingMu.Unlock()
	if c.pingStopped {
		return
	}
	c.pingTimer = c.s.clock.AfterFunc(c.s.cfg.PingInterval, c.ping)
}

func (c *conn) ping() {
	c.pingMu.Lock()
	if c.pingStopped {
		c.pingMu.Unlock()
		return
	}
	c.pings.Add(1)
	c.pingMu.Unlock()
	defer c.pings.Done()

	ctx, cancel := context.WithCancel(c.ctx)
	pongs := c.pongs.Load()
	timeout := c.s.clock.AfterFunc(c.s.cfg.PingTimeout, cancel)
	err := c.ws.Ping(ctx)
	timeout.Stop()
	cancel()
	if err != nil && c.pongs.Load() > pongs {
		// The pong came in time and the timeout fired before Ping saw it: answered.
		err = nil
	}
	if err != nil {
		if c.ctx.Err() == nil {
			c.logEvent(c.s.log.Info()).Msg("closing a connection that did not answer a ping")
			c.cut()
		}
		return
	}
	c.schedulePing()
}

func (c *conn) stopPings() {
	c.pingMu.Lock()
	c.pingStopped = true
	if c.pingTimer != nil {
		c.pingTimer.Stop()
	}
	c.pingMu.Unlock()
	c.pings.Wait()
}
