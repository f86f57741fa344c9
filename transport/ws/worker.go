package ws

import (
	"fmt"

	"github.com/coder/websocket"
)

// Commands (hello included) run on a worker goroutine of the connection, one at a time
// and in the order they arrived, while the reader goes on reading. coder/websocket
// handles pongs and close frames only inside Read, so a reader that waited for a slow
// command (a database far away) would get a healthy client cut for not answering a ping.
//
// The worker runs only while commands are queued, like the writer: an idle connection
// is its reader alone, and keeps no queue.

// queue hands a command to the worker, starting one when none runs. One beyond
// MaxQueuedCommands (waiting or being handled) is answered busy at once: the reader
// never waits for the worker.
func (c *conn) queue(f clientFrame) {
	c.cmdMu.Lock()
	if c.relay != nil {
		// Relayed since the reader looked (forward): after the frames queued before it.
		c.relay.forward(websocket.MessageText, f.raw)
		c.cmdMu.Unlock()
		return
	}
	if len(c.cmds) >= c.s.cfg.MaxQueuedCommands {
		c.cmdMu.Unlock()
		c.replyError(f.RequestID, codeBusy, fmt.Sprintf("too many commands in flight on this connection (at most %d): wait for their replies", c.s.cfg.MaxQueuedCommands))
		return
	}
	if f.Type == typeHello {
		c.helloArrived()
	}
	c.cmds = append(c.cmds, f)
	if !c.working {
		c.working = true
		c.worker.Add(1)
		go c.work()
	}
	c.cmdMu.Unlock()
}

// forward sends a frame to the node holding the session when the connection is relayed
// there, and reports whether it is.
func (c *conn) forward(typ websocket.MessageType, data []byte) bool {
	c.cmdMu.Lock()
	defer c.cmdMu.Unlock()
	if c.relay == nil {
		return false
	}
	c.relay.forward(typ, data)
	return true
}

// work handles queued commands until none is left. The command being handled stays at
// the head of the queue, so the bound counts it.
func (c *conn) work() {
	defer c.worker.Done()
	for {
		c.cmdMu.Lock()
		if len(c.cmds) == 0 {
			c.working = false
			c.cmds = nil
			c.cmdMu.Unlock()
			return
		}
		f := c.cmds[0]
		c.cmdMu.Unlock()

		c.run(f)

		c.cmdMu.Lock()
		c.cmds[0] = clientFrame{}
		c.cmds = c.cmds[1:]
		c.cmdMu.Unlock()
	}
}

// run handles one command, checking the protocol's order first: hello once, and before
// anything else. Checking here rather than in the reader lets a client send commands
// right behind its hello.
func (c *conn) run(f clientFrame) {
	if f.Type == typeHello {
		defer c.helloSettled()
	}
	if c.ctx.Err() != nil || c.out.Closing() {
		return // the connection is closing: nobody waits for the answer
	}
	if f.Type == typeHello {
		if c.helloed.Load() {
			c.violation(f.RequestID, "hello was already sent on this connection")
			return
		}
		c.hello(f)
		return
	}
	if !c.helloed.Load() {
		if c.helloFailure != "" {
			// Sent right behind a hello that failed (the database was unavailable, say):
			// the client did nothing wrong, and may say hello again.
			c.replyError(f.RequestID, c.helloFailure, "not handled: the hello before this command failed; send hello again")
			return
		}
		c.violation(f.RequestID, "send hello first")
		return
	}
	c.command(f)
}
