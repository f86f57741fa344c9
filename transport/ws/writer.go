package ws

import (
	"context"
	"errors"

	"github.com/coder/websocket"
)

// Wake is the outbox's: frames or a close request wait and no writer runs. It is called
// with the outbox's lock held; starting a goroutine does not block.
func (c *conn) Wake() {
	c.writers.Add(1)
	go c.writeLoop()
}

// writeLoop writes what the outbox holds until it is empty, then exits, or until the
// connection closes. Only one runs at a time (the outbox wakes one when none runs).
func (c *conn) writeLoop() {
	defer c.writers.Done()
	var spare [][]byte
	for {
		if c.ctx.Err() != nil {
			return // the outbox still counts this writer as running: none starts again
		}
		frames, req, ok := c.out.Take(spare)
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

// write writes frames in order and returns how many it wrote. It stops early when the
// connection is dropped as slow: what is left is thrown away.
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
