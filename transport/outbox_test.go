package transport_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
)

// testFormat encodes an event as its text: the tests choose each frame's size.
var testFormat = conversation.NewFormat("test", func(ev *conversation.Event) []byte { return []byte(ev.Text) })

// recorder is a transport's writer side that counts what the outbox asks of it.
type recorder struct {
	mu    sync.Mutex
	wakes int
	cuts  chan struct{}
}

func (r *recorder) Wake() {
	r.mu.Lock()
	r.wakes++
	r.mu.Unlock()
}

func (r *recorder) Cut() { r.cuts <- struct{}{} }

func (r *recorder) wakeCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wakes
}

type outboxEnv struct {
	q     *transport.Outbox
	w     *recorder
	clock *clockwork.FakeClock
	reg   *prometheus.Registry
}

const (
	testBudget = 100
	testGrace  = 5 * time.Second
)

func newOutbox(t *testing.T) *outboxEnv {
	t.Helper()
	e := &outboxEnv{w: &recorder{cuts: make(chan struct{}, 1)}, clock: clockwork.NewFakeClock(), reg: prometheus.NewRegistry()}
	opts := &transport.OutboxOptions{
		Format: testFormat,
		EncodeCatchUp: func(c conversation.CatchUp) ([][]byte, error) {
			if c.Snapshot == nil {
				return nil, errors.New("no snapshot")
			}
			return [][]byte{bytes.Repeat([]byte("s"), int(c.Snapshot.LastSeq))}, nil
		},
		Budget:     testBudget,
		CloseGrace: testGrace,
		Clock:      e.clock,
		Metrics:    transport.NewMetrics(e.reg),
	}
	e.q = transport.NewOutbox(opts, e.w, "test")
	return e
}

func event(size int) *conversation.Event {
	return &conversation.Event{Type: conversation.EventDelta, Text: strings.Repeat("x", size)}
}

func snapshot(size int) conversation.CatchUp {
	return conversation.CatchUp{Snapshot: &conversation.Snapshot{LastSeq: int64(size)}}
}

func (e *outboxEnv) take(t *testing.T) ([]string, *transport.CloseRequest) {
	t.Helper()
	frames, req, ok := e.q.Take(nil)
	require.True(t, ok, "Take found nothing")
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = string(f)
	}
	return out, req
}

func (e *outboxEnv) metric(t *testing.T, name string) float64 {
	t.Helper()
	return metricOf(t, e.reg, name)
}

// A writer is woken once for a burst of frames and takes them in one batch, in order;
// Take then reports that nothing is left and the next frame wakes a writer again.
func TestOutboxWakesOneWriterAtATime(t *testing.T) {
	e := newOutbox(t)
	require.True(t, e.q.Deliver(event(1)))
	require.True(t, e.q.Reply([]byte("r")))
	require.True(t, e.q.Deliver(event(2)))
	require.Equal(t, 1, e.w.wakeCount())

	frames, req := e.take(t)
	require.Equal(t, []string{"x", "r", "xx"}, frames)
	require.Nil(t, req)
	_, _, ok := e.q.Take(nil)
	require.False(t, ok)
	require.Equal(t, 1, e.w.wakeCount(), "no wake while the writer still runs")

	require.True(t, e.q.Deliver(event(1)))
	require.Equal(t, 2, e.w.wakeCount())
}

// Live events and replies each have the budget; a catch-up counts against neither; what
// the writer took no longer counts.
func TestOutboxBudgets(t *testing.T) {
	e := newOutbox(t)
	require.True(t, e.q.CatchUp(snapshot(5*testBudget)), "a catch-up larger than the budget")
	require.True(t, e.q.Deliver(event(testBudget)), "one event the size of the budget")
	require.False(t, e.q.Deliver(event(1)), "no room for events")
	require.True(t, e.q.Reply(bytes.Repeat([]byte("r"), testBudget)), "replies have their own budget")

	e.take(t)
	require.True(t, e.q.Deliver(event(testBudget/2)))
	require.True(t, e.q.Deliver(event(testBudget/2)))
	require.False(t, e.q.Deliver(event(1)))
	require.False(t, e.q.Closing(), "a refused event leaves the drop to the actor")

	// The first event larger than the budget still goes when none wait.
	e.take(t)
	require.True(t, e.q.Deliver(event(3*testBudget)))
}

// The actor drops a subscriber that refused an event: closed as slow at once, what was
// queued thrown away, counted once.
func TestOutboxSlowConsumer(t *testing.T) {
	e := newOutbox(t)
	require.True(t, e.q.Deliver(event(testBudget)))
	e.q.Dropped(conversation.DropSlow)
	require.True(t, e.q.Dropping())
	frames, req := e.take(t)
	require.Empty(t, frames, "nothing more is sent to a slow client")
	require.Equal(t, transport.DisconnectSlow, req.Disconnect)
	require.False(t, req.Flush)
	require.False(t, e.q.Deliver(event(1)), "nothing is queued after a close request")
	require.EqualValues(t, 1, e.metric(t, "chatd_slow_consumer_drops_total"))
}

// A client that does not read its replies is closed as slow by the outbox itself.
func TestOutboxUnreadRepliesCloseAsSlow(t *testing.T) {
	e := newOutbox(t)
	require.True(t, e.q.Reply(bytes.Repeat([]byte("r"), testBudget)))
	require.False(t, e.q.Reply([]byte("r")))
	_, req := e.take(t)
	require.Equal(t, transport.DisconnectSlow, req.Disconnect)
	require.EqualValues(t, 1, e.metric(t, "chatd_slow_consumer_drops_total"))
}

// A shutdown drop flushes: the frames queued before it are taken, then the close.
func TestOutboxShutdownFlushes(t *testing.T) {
	e := newOutbox(t)
	require.True(t, e.q.Deliver(event(1)))
	e.q.Dropped(conversation.DropShutdown)
	require.False(t, e.q.Dropping())
	require.False(t, e.q.Close(transport.DisconnectNormal, false), "the first close request wins")
	frames, req := e.take(t)
	require.Equal(t, []string{"x"}, frames)
	require.Equal(t, transport.DisconnectShutdown, req.Disconnect)
	require.True(t, req.Flush)
	require.False(t, e.q.Pending())
	e.q.Sent(len(frames))
	require.EqualValues(t, 0, e.metric(t, "chatd_slow_consumer_drops_total"))
	require.EqualValues(t, 1, e.metric(t, "chatd_frames_sent_total"))
}

// A close that the writer does not carry out within the grace period cuts the connection;
// one that it does (the transport detaches) does not.
func TestOutboxCloseGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stuck := newOutbox(t)
	stuck.q.Close(transport.DisconnectShutdown, true)
	require.NoError(t, stuck.clock.BlockUntilContext(ctx, 1))
	stuck.clock.Advance(testGrace)
	select {
	case <-stuck.w.cuts:
	case <-ctx.Done():
		t.Fatal("the connection was not cut after the grace period")
	}

	// Detached in time: the grace timer is stopped, so the grace passing cuts nothing.
	// A fired timer's Cut runs in a goroutine of its own (clockwork's AfterFunc); in a
	// bubble, synctest.Wait returns once any such goroutine has run, so the empty
	// channel shows that no Cut came, not that it has not come yet.
	synctest.Test(t, func(t *testing.T) {
		done := newOutbox(t)
		done.q.Close(transport.DisconnectShutdown, true)
		done.q.Detach()
		done.clock.Advance(testGrace)
		synctest.Wait()
		require.Zero(t, len(done.w.cuts), "cut after the transport detached")
	})
}

// Once detached, the outbox refuses every frame and wakes nobody, so the actor's frames
// are not queued for a connection that is gone.
func TestOutboxDetached(t *testing.T) {
	e := newOutbox(t)
	e.q.Detach()
	require.False(t, e.q.Deliver(event(1)))
	require.False(t, e.q.Reply([]byte("r")))
	require.False(t, e.q.CatchUp(snapshot(1)))
	e.q.Dropped(conversation.DropSlow)
	require.Zero(t, e.w.wakeCount())
	require.EqualValues(t, 0, e.metric(t, "chatd_slow_consumer_drops_total"), "a gone connection is not a slow one")
}

// direct is a transport's writer side that can write without waiting: WriteNow records
// the frame and answers what the test set; during runs inside the write, as something
// another goroutine does meanwhile.
type direct struct {
	recorder
	written []string
	batches int
	answer  transport.WriteResult
	during  func()
}

func (d *direct) WriteNow(frames [][]byte) transport.WriteResult {
	d.batches++
	for _, f := range frames {
		d.written = append(d.written, string(f))
	}
	if d.during != nil {
		d.during()
		d.during = nil
	}
	return d.answer
}

func newDirectOutbox(t *testing.T) (*transport.Outbox, *direct, *prometheus.Registry) {
	t.Helper()
	d := &direct{recorder: recorder{cuts: make(chan struct{}, 1)}, answer: transport.Written}
	reg := prometheus.NewRegistry()
	opts := &transport.OutboxOptions{
		Format:        testFormat,
		EncodeCatchUp: func(conversation.CatchUp) ([][]byte, error) { return [][]byte{[]byte("snap")}, nil },
		Budget:        testBudget,
		CloseGrace:    testGrace,
		Clock:         clockwork.NewFakeClock(),
		Metrics:       transport.NewMetrics(reg),
	}
	return transport.NewOutbox(opts, d, "test"), d, reg
}

// With no writer running and nothing queued, a frame is written at once by the
// goroutine that queues it, and no writer is woken; a frame the socket did not take
// whole wakes the writer, whose Take returns ok (to send the rest) with no frames, and
// frames queued while it runs go to it, in order, not directly.
func TestOutboxWritesDirectlyWhileNoWriterRuns(t *testing.T) {
	q, d, reg := newDirectOutbox(t)
	require.True(t, q.Deliver(event(1)))
	require.True(t, q.Reply([]byte("r")))
	require.Equal(t, []string{"x", "r"}, d.written)
	require.Zero(t, d.wakeCount(), "no writer for frames that left whole")
	_, _, ok := q.Take(nil)
	require.False(t, ok)
	require.EqualValues(t, 2, metricOf(t, reg, "chatd_frames_sent_total"))

	d.answer = transport.Held
	require.True(t, q.Deliver(event(2)))
	require.Equal(t, 1, d.wakeCount(), "a writer for what the socket did not take")
	require.True(t, q.Deliver(event(3)), "queued behind it")
	require.True(t, q.Reply([]byte("r")))
	require.Equal(t, []string{"x", "r", "xx"}, d.written, "not written directly while a writer runs")
	frames, req, ok := q.Take(nil)
	require.True(t, ok)
	require.Nil(t, req)
	require.Equal(t, [][]byte{[]byte("xxx"), []byte("r")}, frames)
	_, _, ok = q.Take(nil)
	require.False(t, ok, "the writer stops once it sent what was held and queued")

	require.True(t, q.Deliver(event(1)))
	frames, _, ok = q.Take(nil)
	require.True(t, ok, "held: the writer must run even with nothing queued")
	require.Empty(t, frames)
	_, _, ok = q.Take(nil)
	require.False(t, ok)

	// A catch-up always goes through the writer, and what follows it queues behind it.
	d.answer = transport.Written
	require.True(t, q.CatchUp(conversation.CatchUp{}))
	require.True(t, q.Deliver(event(1)))
	require.Len(t, d.written, 4, "nothing written directly past a queued catch-up")
	frames, _, _ = q.Take(nil)
	require.Equal(t, [][]byte{[]byte("snap"), []byte("x")}, frames)
	_, _, ok = q.Take(nil)
	require.False(t, ok)
	require.Equal(t, 3, d.wakeCount())

	// A write that failed wakes the writer (to end the connection) and sends nothing.
	sent := metricOf(t, reg, "chatd_frames_sent_total")
	d.answer = transport.Failed
	require.True(t, q.Deliver(event(1)))
	require.Equal(t, 4, d.wakeCount())
	frames, _, ok = q.Take(nil)
	require.True(t, ok, "the writer runs and finds the connection failed")
	require.Empty(t, frames)
	require.Equal(t, sent, metricOf(t, reg, "chatd_frames_sent_total"), "not counted as sent")
}

// HoldsEncodings says, after each Deliver and Hold, whether a frame may still be
// referred to: false only when everything was written directly and no writer runs.
func TestOutboxSaysWhenItHoldsFrames(t *testing.T) {
	q, d, _ := newDirectOutbox(t)
	require.True(t, q.Deliver(event(1)))
	require.False(t, q.HoldsEncodings(), "written whole, at once")

	require.True(t, q.Hold(event(1)))
	require.True(t, q.HoldsEncodings(), "held for Release")
	require.True(t, q.Deliver(event(1)))
	require.False(t, q.HoldsEncodings(), "what was held left with it")

	d.answer = transport.Held
	require.True(t, q.Deliver(event(1)))
	require.True(t, q.HoldsEncodings(), "a writer runs for what the socket did not take")
	d.answer = transport.Written
	require.True(t, q.Deliver(event(1)))
	require.True(t, q.HoldsEncodings(), "queued for the running writer")
	_, _, ok := q.Take(nil)
	require.True(t, ok)
	_, _, ok = q.Take(nil)
	require.False(t, ok)
	require.True(t, q.Deliver(event(1)))
	require.False(t, q.HoldsEncodings(), "the writer stopped: written directly again")

	d.answer = transport.NotWritten
	require.True(t, q.Deliver(event(1)))
	require.True(t, q.HoldsEncodings(), "not written: queued for a writer")

	// A transport that cannot write directly always queues.
	e := newOutbox(t)
	require.True(t, e.q.Deliver(event(1)))
	require.True(t, e.q.HoldsEncodings())
}

// A Kick (the writer's own bytes held) wakes a writer if none runs, once.
func TestOutboxKick(t *testing.T) {
	q, d, _ := newDirectOutbox(t)
	q.Kick()
	q.Kick()
	require.Equal(t, 1, d.wakeCount())
	frames, _, ok := q.Take(nil)
	require.True(t, ok)
	require.Empty(t, frames)
	_, _, ok = q.Take(nil)
	require.False(t, ok)
	q.Detach()
	q.Kick()
	require.Equal(t, 1, d.wakeCount(), "no writer for a connection that ended")
}

// What happens while a frame is written directly is not lost: a frame queued meanwhile,
// a close request or a kick wakes the writer afterwards; a transport that could not write
// gets the frame queued; a connection that ended meanwhile wakes nobody.
func TestOutboxDirectWriteRaces(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer transport.WriteResult
		during func(*transport.Outbox)
		wakes  int
		take   []string
		close  bool
	}{
		{name: "reply meanwhile", answer: transport.Written, during: func(q *transport.Outbox) { q.Reply([]byte("r")) }, wakes: 1, take: []string{"r"}},
		{name: "close meanwhile", answer: transport.Written, during: func(q *transport.Outbox) { q.Close(transport.DisconnectNormal, true) }, wakes: 1, take: []string{}, close: true},
		{name: "kick meanwhile", answer: transport.Written, during: func(q *transport.Outbox) { q.Kick() }, wakes: 1, take: []string{}},
		{name: "not written", answer: transport.NotWritten, wakes: 1, take: []string{"x"}},
		{name: "detached meanwhile", answer: transport.Written, during: func(q *transport.Outbox) { q.Detach() }, wakes: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, d, _ := newDirectOutbox(t)
			d.answer = tc.answer
			if tc.during != nil {
				d.during = func() { tc.during(q) }
			}
			require.True(t, q.Deliver(event(1)))
			require.Equal(t, tc.wakes, d.wakeCount())
			if tc.wakes == 0 {
				require.False(t, q.Deliver(event(1)), "refused once detached")
				return
			}
			frames, req, ok := q.Take(nil)
			require.True(t, ok)
			got := []string{}
			for _, f := range frames {
				got = append(got, string(f))
			}
			require.Equal(t, tc.take, got)
			require.Equal(t, tc.close, req != nil)
		})
	}
}

// metricOf reads a counter of reg.
func metricOf(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s is not registered", name)
	return 0
}

// Events held while the actor is behind leave together, in one direct write, when it
// catches up (Release) or with the next frame written directly; held events count
// against the budget; a writer that runs takes them as usual.
func TestOutboxHoldsUntilReleased(t *testing.T) {
	q, d, reg := newDirectOutbox(t)
	require.True(t, q.Hold(event(1)))
	require.True(t, q.Hold(event(2)))
	require.Zero(t, d.batches, "nothing written while held")
	require.Zero(t, d.wakeCount())
	q.Release()
	require.Equal(t, 1, d.batches, "one write for both")
	require.Equal(t, []string{"x", "xx"}, d.written)
	q.Release()
	require.Equal(t, 1, d.batches, "nothing left to release")

	require.True(t, q.Hold(event(3)))
	require.True(t, q.Reply([]byte("r")))
	require.Equal(t, 2, d.batches, "a frame written directly takes what is held with it")
	require.Equal(t, []string{"x", "xx", "xxx", "r"}, d.written)
	require.EqualValues(t, 4, metricOf(t, reg, "chatd_frames_sent_total"))

	require.True(t, q.Hold(event(testBudget-1)))
	require.False(t, q.Hold(event(2)), "held events count against the budget")
	q.Release()

	d.answer = transport.Held
	require.True(t, q.Deliver(event(1)))
	require.Equal(t, 1, d.wakeCount())
	require.True(t, q.Hold(event(2)))
	q.Release()
	frames, _, ok := q.Take(nil)
	require.True(t, ok)
	require.Equal(t, [][]byte{[]byte("xx")}, frames, "the running writer takes what was held")
	require.Zero(t, d.wakeCount()-1, "no second writer")
}

// A transport that cannot write directly (an HTTP stream) gains nothing from holding: a
// held event wakes its writer at once, and Release has nothing left to do.
func TestOutboxHoldWithoutDirectWrites(t *testing.T) {
	e := newOutbox(t)
	require.True(t, e.q.Hold(event(1)))
	require.Equal(t, 1, e.w.wakeCount())
	e.q.Release()
	frames, _ := e.take(t)
	require.Equal(t, []string{"x"}, frames)
	_, _, ok := e.q.Take(nil)
	require.False(t, ok)
	e.q.Release()
	require.Equal(t, 1, e.w.wakeCount())
}

// An actor that stays behind does not starve its clients: once 16 events are held, they
// are written before the next is held.
func TestOutboxHoldsABoundedBatch(t *testing.T) {
	q, d, _ := newDirectOutbox(t)
	for range 16 {
		require.True(t, q.Hold(event(1)))
	}
	require.Zero(t, d.batches)
	require.True(t, q.Hold(event(2)))
	require.Equal(t, 1, d.batches, "the 16 held events, in one write")
	require.Len(t, d.written, 16)
	q.Release()
	require.Equal(t, 2, d.batches)
	require.Equal(t, "xx", d.written[16], "then the one held after them")
}
