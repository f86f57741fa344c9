package ws

import (
	"context"
	"errors"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/transport"
)

var _ transport.DirectWriter = (*conn)(nil)

// Wake is the outbox's: frames or a close request wait and no writer runs. It is called
// with the outbox's lock held; starting a goroutine does not block.
func (c *conn) Wake() {
	c.writers.Add(1)
	go c.writeLoop()
}

// WriteNow is the outbox's: with no writer running, it writes frames (what is queued:
// usually one, several when the actor held them while it was behind) from the caller's
// goroutine (the session's actor, or the worker's reply) in one write(2), without a
// hand-off to a writer goroutine and without ever waiting for the client: the socket
// takes what it can at once and batchConn holds the rest for the writer the outbox then
// wakes. Below saturation nearly every frame leaves this way, which saves a goroutine
// start, a trip through the scheduler and, on a machine with many cores, a move to
// another core per frame.
func (c *conn) WriteNow(frames [][]byte) transport.WriteResult {
	b := c.batch
	if b == nil || b.raw == nil || b.kick == nil || c.ctx.Err() != nil {
		return transport.NotWritten
	}
	var ok, held bool
	var err error
	if c.plain {
		ok, held, err = b.writeText(frames)
	}
	if !ok && err == nil {
		b.begin()
		// coder/websocket's write lock is free: no writer runs, and a control frame
		// written meanwhile does not wait for the socket (batchConn) while it holds it.
		for _, f := range frames {
			if err = c.ws.Write(context.Background(), websocket.MessageText, f); err != nil {
				break
			}
		}
		var ferr error
		held, ferr = b.endNow()
		if err == nil {
			err = ferr
		}
	}
	if err != nil {
		c.writeFailed.Store(true) // the writer woken for it ends the connection
		return transport.Failed
	}
	if held {
		return transport.Held
	}
	return transport.Written
}

// writeLoop writes what the outbox holds until it is empty, then exits, or until the
// connection closes. Only one runs at a time (the outbox wakes one when none runs, and
// writes nothing directly while one does).
func (c *conn) writeLoop() {
	defer c.writers.Done()
	var spare [][]byte
	for {
		if c.ctx.Err() != nil {
			return // the outbox still counts this writer as running: none starts again
		}
		if c.writeFailed.Load() {
			c.cut()
			return
		}
		frames, req, ok := c.take(spare)
		if !ok {
			return
		}
		sent, err := c.write(frames)
		c.out.Sent(sent)
		if err != nil {
			c.cut()
			return
		}
		spare = frames[:0]
		if req == nil {
			continue // Take returns a close request that came meanwhile
		}
		if req.Flush && c.out.Pending() {
			continue // send what was queued before the close first
		}
		err = c.ws.Close(status(req.Disconnect), req.Reason)
		if err != nil && !errors.Is(err, context.Canceled) {
			c.logEvent(c.s.log.Debug()).Err(err).Int("code", req.Code).Msg("close handshake")
		}
		c.cut()
		return
	}
}

// take takes the outbox's next batch. The writer owns the socket (its writes wait for
// the client) only while it has a batch: it gives the socket up before it looks, so that
// once the outbox lets frames be written directly again, no write of its waits.
func (c *conn) take(spare [][]byte) (frames [][]byte, req *transport.CloseRequest, ok bool) {
	if c.batch == nil {
		return c.out.Take(spare)
	}
	c.batch.own(false)
	frames, req, ok = c.out.Take(spare)
	if ok {
		c.batch.own(true)
	}
	return frames, req, ok
}

// write writes frames in order and returns how many it wrote. It stops early when the
// connection is dropped as slow: what is left is thrown away. With no frames it sends
// what batchConn holds (the outbox was kicked).
//
// Writes get a context that is never done: with a cancellable one, coder/websocket
// registers and removes a context.AfterFunc around every frame, 5% of chatd's CPU when
// fanning out. A write stuck on a peer that does not read ends when cut closes the
// socket (the close grace period, a failed ping, shutdown).
func (c *conn) write(frames [][]byte) (n int, err error) {
	if c.batch != nil {
		// The frames leave in one write(2) (see batchConn); one frame too, for
		// coder/websocket's own buffer is too small to hold one.
		c.batch.begin()
		defer func() {
			if ferr := c.batch.end(); err == nil {
				err = ferr
			}
		}()
	}
	for i, f := range frames {
		if err := c.ws.Write(context.Background(), websocket.MessageText, f); err != nil {
			return i, err
		}
		frames[i] = nil
		if c.out.Dropping() {
			return i + 1, nil
		}
	}
	return len(frames), nil
}
