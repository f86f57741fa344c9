package transport

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/internal/counter"
)

// DefaultSendQueueBytes is the default Budget of an Outbox (CHATD_SEND_QUEUE_BYTES).
const DefaultSendQueueBytes = 1 << 20

// Outbox is one connection's outbound queue and its conversation.Subscriber, for any
// transport (a WebSocket, an HTTP stream). The session's actor queues events with Deliver
// and catch-ups with CatchUp, the transport queues its replies with Reply; none of them
// ever waits. The transport's writer takes what is queued in batches with Take and writes
// it however its transport writes.
//
// One FIFO, two budgets: live events and replies each may queue up to Budget bytes that
// the writer has not taken yet; catch-up frames (bounded by the actor) count against
// neither. While the writer writes a batch the next one fills, so a slow connection holds
// at most about twice the budget. A live event that does not fit gets the connection
// dropped by the actor; a reply that does not fit closes it here. Either way the close is
// DisconnectSlow (4008), without sending what is left: the client reconnects and resumes.
//
// A writer runs only while there is something to write: Take returns ok false when the
// queue is empty, and the next frame or close request calls Writer.Wake again. So an idle
// connection costs no writer goroutine. A transport whose Writer is also a DirectWriter
// goes further: a frame queued while no writer runs and nothing waits is written at once
// from the goroutine that queues it (the actor), without a hand-off, as long as the
// socket takes it without waiting; a writer is woken only for what it does not take.
type Outbox struct {
	opts   *OutboxOptions
	w      Writer
	direct DirectWriter // w, if it can write without waiting; else nil
	remote string
	sent   *counter.Slot // where its frames sent are counted (nil: nowhere)

	mu     sync.Mutex
	frames [][]byte
	// spare is the storage of the last batch written directly, for the next queue.
	spare      [][]byte
	eventBytes int
	replyBytes int
	closeReq   *CloseRequest // set once; no frame is queued after it
	closeTimer clockwork.Timer
	// writing is set while a writer is taking frames (from Wake until Take returns ok
	// false), or a frame is being written directly: no other is woken.
	writing bool
	// kicked: the writer has bytes of its own to send (Kick); Take returns ok until it
	// took them.
	kicked bool
	// detached: the connection has ended; no writer is woken again.
	detached bool
	// holds: frames waited or a writer ran when the last Deliver, Hold or Reply
	// returned (HoldsEncodings). Set under mu.
	holds atomic.Bool
}

// OutboxOptions are shared by every Outbox of a transport's server.
type OutboxOptions struct {
	// Format encodes live events. Required.
	Format *conversation.Format
	// EncodeCatchUp encodes the answer to a hello in the same protocol (replayed events
	// with Format, so they reuse their live encoding). Required.
	EncodeCatchUp func(conversation.CatchUp) ([][]byte, error)
	// Budget is how many bytes of live events, and separately of replies, may wait for
	// the writer. Required.
	Budget int
	// CloseGrace is how long a close request may take (the writer flushing, the close
	// handshake) before Writer.Cut ends the connection. Required.
	CloseGrace time.Duration
	// Clock runs the close grace timer. Required.
	Clock clockwork.Clock
	// Metrics counts frames sent and slow-consumer drops; nil counts nothing.
	Metrics *Metrics
	// Logger logs slow-consumer drops and encoding failures.
	Logger zerolog.Logger
}

// Writer is the transport's side of an Outbox: what writes its frames to the client.
type Writer interface {
	// Wake says that frames or a close request wait and that no writer is taking them:
	// start one (a goroutine) or signal the one that waits (an HTTP handler). It is
	// called with the outbox's lock held, so it must not block or call the outbox; the
	// writer it wakes calls Take until Take returns ok false. A writer must be done with
	// a batch's frames (written, or copied) before it calls Take again: once Take says
	// nothing is left, the actor may write its next frame into their memory
	// (HoldsEncodings).
	Wake()
	// Cut ends the connection at once: a close request was not carried out within the
	// grace period (a writer stuck on a client that does not read).
	Cut()
}

// DirectWriter is a Writer that can also write a frame from the caller's goroutine
// without ever waiting for the client (a non-blocking socket).
type DirectWriter interface {
	Writer
	// WriteNow writes frames at once, in order, in as few writes as it can. It is called
	// only while no writer runs, with everything queued, so frames stay in order; it
	// must not call the outbox, nor keep frames or read them once it returns: the actor
	// may write its next frame into their memory (HoldsEncodings).
	WriteNow(frames [][]byte) WriteResult
}

// WriteResult is what WriteNow did.
type WriteResult int

const (
	// NotWritten: nothing was written (the transport cannot now); the frames are queued
	// for a writer.
	NotWritten WriteResult = iota
	// Written: the frames left whole.
	Written
	// Held: the client did not take all of them at once; the writer that is woken
	// sends the rest.
	Held
	// Failed: the write failed; the writer that is woken ends the connection. The
	// frames are not counted as sent.
	Failed
)

// CloseRequest asks the writer to end the connection.
type CloseRequest struct {
	Disconnect
	// Flush: write the frames queued before the request first. Without it what is left
	// is thrown away, and the writer should stop as soon as it can (see Dropping).
	Flush bool
}

var _ conversation.TransientSubscriber = (*Outbox)(nil)

// HoldsEncodings is conversation.TransientSubscriber's (Deliver, Hold and CatchUp keep
// only the events' encodings): whether, when the last Deliver, Hold or Reply returned,
// frames waited for a writer or one ran. Otherwise every frame was written, and the
// transport copies what it writes (DirectWriter keeps no frames).
func (q *Outbox) HoldsEncodings() bool { return q.holds.Load() }

// noteHolds records what HoldsEncodings says. q.mu must be held.
func (q *Outbox) noteHolds() { q.holds.Store(q.writing || len(q.frames) > 0) }

// NewOutbox returns the outbox of a connection from remote (an address for the logs);
// w writes what it queues.
func NewOutbox(opts *OutboxOptions, w Writer, remote string) *Outbox {
	if opts.Format == nil || opts.EncodeCatchUp == nil || opts.Clock == nil || opts.Budget <= 0 {
		panic("transport: OutboxOptions need Format, EncodeCatchUp, Clock and a positive Budget")
	}
	q := &Outbox{opts: opts, w: w, remote: remote, sent: opts.Metrics.sentSlot()}
	q.direct, _ = w.(DirectWriter)
	return q
}

// Deliver queues a live event. One that would take the events waiting for the writer
// over the budget is refused (the actor then drops this connection with DropSlow), unless
// none are waiting: a single event larger than the budget still gets through.
func (q *Outbox) Deliver(ev *conversation.Event) bool {
	return q.enqueue(ev.Encode(q.opts.Format), &q.eventBytes)
}

// CatchUp queues the answer to a hello, outside both budgets.
func (q *Outbox) CatchUp(cu conversation.CatchUp) bool {
	frames, err := q.opts.EncodeCatchUp(cu)
	if err != nil {
		q.opts.Logger.Error().Str("remote", q.remote).Err(err).Msg("encode a catch-up")
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closeReq != nil {
		return false
	}
	q.frames = append(q.frames, frames...)
	q.wake()
	return true
}

// Dropped is called by the actor when it lets go of this connection: closed as too slow
// at once, or after what is queued when the session was deleted or the server shuts
// down.
func (q *Outbox) Dropped(reason conversation.DropReason) {
	switch reason {
	case conversation.DropSlow:
		if q.Close(DisconnectSlow, false) {
			q.opts.Logger.Info().Str("remote", q.remote).Int("queue_bytes", q.opts.Budget).Msg("closing a connection whose send queue overflowed (4008)")
		}
	case conversation.DropDeleted:
		q.Close(DisconnectDeleted, true)
	case conversation.DropMoved:
		q.Close(DisconnectMoved, true)
	default:
		q.Close(DisconnectShutdown, true)
	}
}

// Reply queues a reply to the client's request. Replies have their own budget, so a
// large history page cannot get live events refused; a client that sends requests but
// does not read the replies is closed with DisconnectSlow once they fill it. It reports
// whether the reply was queued.
func (q *Outbox) Reply(frame []byte) bool {
	if q.enqueue(frame, &q.replyBytes) {
		return true
	}
	if q.Close(DisconnectSlow, false) {
		q.opts.Logger.Info().Str("remote", q.remote).Int("queue_bytes", q.opts.Budget).Msg("closing a connection that does not read its replies (4008)")
	}
	return false
}

func (q *Outbox) enqueue(frame []byte, budget *int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	defer q.noteHolds()
	if q.closeReq != nil {
		return false
	}
	if q.direct != nil && !q.writing {
		// Written now, with what Hold queued before it: the budget bounds what waits for
		// a writer, and nothing does.
		q.frames = append(q.frames, frame)
		*budget += len(frame)
		q.writeNow()
		return true
	}
	if *budget > 0 && *budget+len(frame) > q.opts.Budget {
		return false
	}
	q.frames = append(q.frames, frame)
	*budget += len(frame)
	q.wake()
	return true
}

// What Hold may hold before it writes it anyway: an actor that stays behind must not
// starve its clients, nor have them dropped as slow for what was never tried.
const (
	holdMaxFrames = 16
	holdMaxBytes  = 32 << 10
)

// Hold queues a live event like Deliver but does not send it yet: the actor has more
// work queued behind it, and Release (or the next frame written directly) sends what
// was held, in one write instead of one each. Once holdMaxFrames or holdMaxBytes are
// held, what is held is written before the event is queued. A writer that runs takes it
// as usual.
func (q *Outbox) Hold(ev *conversation.Event) bool {
	if q.direct == nil {
		return q.Deliver(ev) // nothing to gain from holding
	}
	frame := ev.Encode(q.opts.Format)
	q.mu.Lock()
	defer q.mu.Unlock()
	defer q.noteHolds()
	if q.closeReq != nil {
		return false
	}
	if !q.writing && len(q.frames) > 0 &&
		(len(q.frames) >= holdMaxFrames || q.eventBytes+len(frame) > holdMaxBytes) {
		q.writeNow() // enough is held: it leaves now, in one write
		if q.closeReq != nil {
			return false
		}
	}
	if q.eventBytes > 0 && q.eventBytes+len(frame) > q.opts.Budget {
		return false
	}
	q.frames = append(q.frames, frame)
	q.eventBytes += len(frame)
	return true
}

// Release sends what Hold queued: written directly when no writer runs.
func (q *Outbox) Release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.writing || len(q.frames) == 0 || q.closeReq != nil {
		return // a writer runs (or is being woken) and takes them
	}
	if q.direct == nil {
		q.wake()
		return
	}
	q.writeNow()
}

// writeNow writes the queued frames from this goroutine (WriteNow) and wakes a writer
// for anything left: the frames not all taken, frames queued meanwhile, a close request
// or a kick. q.mu must be held, with no writer running and frames queued; it is released
// during the write, while q.writing keeps others from writing.
func (q *Outbox) writeNow() {
	batch := q.frames
	q.frames, q.spare = q.spare[:0], nil
	events, replies := q.eventBytes, q.replyBytes
	q.eventBytes, q.replyBytes = 0, 0
	q.writing = true
	q.mu.Unlock()
	res := q.direct.WriteNow(batch)
	q.mu.Lock()
	switch res {
	case NotWritten:
		if q.closeReq != nil && !q.closeReq.Flush {
			break // closed meanwhile, throwing away what was queued
		}
		q.frames = append(batch, q.frames...)
		q.eventBytes += events
		q.replyBytes += replies
		batch = nil
	case Held:
		q.Sent(len(batch))
		q.kicked = true
	case Failed:
		q.kicked = true
	default:
		q.Sent(len(batch))
	}
	if batch != nil && q.spare == nil && cap(batch) <= idleQueueCap {
		clear(batch)
		q.spare = batch[:0]
	}
	if res == Written && len(q.frames) == 0 && q.closeReq == nil && !q.kicked {
		q.writing = false
		return
	}
	if !q.detached {
		q.startWriter() // q.writing stays set: the writer takes over
	}
}

// Close asks the writer to close the connection with d, after the queued frames when
// flush is set. The first request wins; Close reports whether this one did. Nothing is
// queued after it. If the connection is not closed within the grace period, Writer.Cut
// is called.
func (q *Outbox) Close(d Disconnect, flush bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closeReq != nil {
		return false
	}
	q.closeReq = &CloseRequest{Disconnect: d, Flush: flush}
	if d.Code == DisconnectSlow.Code {
		// Counted before the writer can send the close, so whoever sees it sees the count.
		q.opts.Metrics.slowDrop()
	}
	if !flush {
		q.frames = nil
	}
	q.closeTimer = q.opts.Clock.AfterFunc(q.opts.CloseGrace, q.w.Cut)
	q.wake()
	return true
}

// Closing reports whether a close was requested (or the outbox detached).
func (q *Outbox) Closing() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closeReq != nil
}

// wake makes sure a writer runs to take what was queued. q.mu must be held.
func (q *Outbox) wake() {
	if q.writing {
		return
	}
	q.writing = true
	q.startWriter()
}

// startWriter has the transport start a writer. q.mu must be held.
func (q *Outbox) startWriter() {
	q.opts.Metrics.writerStarted()
	q.w.Wake()
}

// idleQueueCap is the most queue capacity an idle connection keeps.
const idleQueueCap = 64

// Take returns the queued frames (reusing spare's storage for the next ones) and the
// close request, if any; it never blocks. The frames taken no longer count against the
// budgets, and the writer owns them. When there is nothing to do it returns ok false and
// the writer must stop: the next frame or close request wakes one again. A writer that
// stops before that (its connection failed) leaves the outbox believing it still runs,
// so no other is woken.
//
// The close request is returned with every batch once it is made. With Flush, the writer
// closes once Pending says nothing is left; without, at once.
func (q *Outbox) Take(spare [][]byte) (frames [][]byte, req *CloseRequest, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	frames, req = q.frames, q.closeReq
	if len(frames) == 0 && req == nil && !q.kicked {
		q.writing = false
		if cap(frames) > idleQueueCap {
			q.frames = nil // a catch-up's large batch is not kept by an idle connection
		}
		return nil, nil, false
	}
	q.frames = spare[:0]
	q.eventBytes, q.replyBytes = 0, 0
	q.kicked = false
	return frames, req, true
}

// Kick says the writer has bytes of its own waiting (what a write that did not wait
// left over): a writer is woken if none runs, and Take returns ok, with no frames if none
// are queued, until one took them.
func (q *Outbox) Kick() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.detached {
		return
	}
	q.kicked = true
	q.wake()
}

// Pending reports whether frames wait to be taken.
func (q *Outbox) Pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.frames) > 0
}

// Dropping reports whether the connection is being closed without sending what is left:
// a writer in the middle of a batch stops writing it.
func (q *Outbox) Dropping() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closeReq != nil && !q.closeReq.Flush
}

// Sent counts n frames written to the client. Call it once per batch, not per frame.
func (q *Outbox) Sent(n int) {
	if q.sent != nil && n > 0 {
		q.sent.Add(uint64(n))
	}
}

// Detach is called when the connection has ended: from now on every frame is refused
// (instead of being queued for nobody until the actor hears of the unsubscribe), no
// writer is woken, and the grace timer is stopped. The transport then waits for its
// writer and unsubscribes from the actor.
func (q *Outbox) Detach() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closeTimer != nil {
		q.closeTimer.Stop()
	}
	if q.closeReq == nil {
		q.closeReq = &CloseRequest{Disconnect: DisconnectNormal}
	}
	q.writing = true
	q.detached = true
	q.frames = nil
}
