package journal

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/store"
)

// The stream log. A segment's text is written to its row once, when it closes (the
// segment rule: statements per run do not grow with tokens), so until then only the
// actor's memory has it. The stream log keeps a recovery record beside the rows: the
// text each open segment (and each running tool's output) streamed, as chunks that
// follow each other by byte offset, stored for every session of the node in one
// statement per interval, and removed once the message's final text is stored. A
// process that dies loses at most an interval of it; the one that takes the run up
// continues from the logged text (see conversation's recovery).
//
// The actor appends each published piece of text to its Stream (a mutex and an append,
// nothing else on the token's path); the node's loop turns what each stream gathered
// into a chunk every interval, and keeps chunks whose statement failed for the next.

// Stream is the log of one message's streaming text. Its methods are safe from any
// goroutine; a nil *Stream (no stream log) does nothing.
type Stream struct {
	w       *Writer
	session uuid.UUID
	message uuid.UUID
	fence   int64

	mu      sync.Mutex
	pending []byte // appended since the last chunk (its array is kept for the next)
	dirty   bool   // in the loop's dirty list
	cut     bool   // a chunk was made: the database may hold some of its log
	stored  bool   // the final text is stored: no more chunks, and the log goes

	// The loop's own.
	offset int                 // bytes turned into chunks so far
	unsent []store.StreamChunk // chunks not stored yet
}

// streamLog is the Writer's part that gathers the streams' text.
type streamLog struct {
	mu    sync.Mutex
	dirty []*Stream
	done  []uuid.UUID // messages whose log is to go
	wake  chan struct{}

	// The loop's own.
	unsent  map[*Stream]struct{}
	failing bool
	lastCut time.Time // when the last interval took the streams' text
	// Buffers an interval reuses from the last: the dirty list's other half, and the
	// statement's chunks and their streams. At thousands of streams, growing them anew
	// every interval was a fifth of what the stream log allocated.
	spare  []*Stream
	chunks []store.StreamChunk
	from   []*Stream
}

func (l *streamLog) init() {
	l.wake = make(chan struct{}, 1)
	l.unsent = make(map[*Stream]struct{})
}

// Stream returns the log of message, of session, streamed under fence (its lease's
// token; 0 for none), nil when the writer keeps no stream log.
func (w *Writer) Stream(session, message uuid.UUID, fence int64) *Stream {
	return w.StreamFrom(session, message, fence, 0)
}

// StreamFrom is Stream for a message whose log holds offset bytes already (logged by a
// process that died): what it appends is logged after them, and Stored removes them
// all.
func (w *Writer) StreamFrom(session, message uuid.UUID, fence int64, offset int) *Stream {
	if w == nil || w.cfg.StreamSync <= 0 {
		return nil
	}
	return &Stream{w: w, session: session, message: message, fence: fence, offset: offset, cut: offset > 0}
}

// Logged returns a handle on a message whose log another process wrote (a run taken up
// after a crash): Stored removes it.
func (w *Writer) Logged(message uuid.UUID) *Stream {
	if w == nil || w.cfg.StreamSync <= 0 {
		// The log may still hold chunks of a process that had one: they are collected
		// once the message is no longer streaming.
		return nil
	}
	return &Stream{w: w, message: message, cut: true}
}

// Append adds text the message streamed (and its subscribers were sent).
func (s *Stream) Append(text string) {
	if s == nil || text == "" {
		return
	}
	s.mu.Lock()
	if s.stored {
		s.mu.Unlock()
		return
	}
	s.pending = append(s.pending, text...)
	first := !s.dirty
	s.dirty = true
	s.mu.Unlock()
	if first {
		l := &s.w.stream
		l.mu.Lock()
		l.dirty = append(l.dirty, s)
		l.mu.Unlock()
		l.signal()
	}
}

// Stored says the message's final text is stored: the log takes no more of it, and
// what it logged is removed at the next interval.
func (s *Stream) Stored() {
	if s == nil {
		return
	}
	s.mu.Lock()
	if s.stored {
		s.mu.Unlock()
		return
	}
	s.stored, s.pending = true, nil
	cut := s.cut
	s.mu.Unlock()
	if cut {
		l := &s.w.stream
		l.mu.Lock()
		l.done = append(l.done, s.message)
		l.mu.Unlock()
		l.signal()
	}
}

func (l *streamLog) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run is the stream log's loop: it waits for text and stores what the streams gathered
// an interval after the last time it did (at once after a pause), so while text streams
// the intervals keep their pace whatever their statements take; every collectEvery it
// removes the chunks no message needs.
func (w *Writer) run(stop <-chan struct{}) {
	l := &w.stream
	gc := w.clock.NewTicker(collectEvery)
	defer gc.Stop()
	var next <-chan time.Time
	var timer interface{ Stop() bool }
	arm := func() {
		t := w.clock.NewTimer(max(w.cfg.StreamSync-w.clock.Since(l.lastCut), 0))
		timer, next = t, t.Chan()
	}
	for {
		select {
		case <-l.wake:
			if next == nil {
				arm()
			}
		case <-next:
			timer, next = nil, nil
			if w.sync() {
				arm()
			}
		case <-gc.Chan():
			w.collect()
		case <-stop:
			if timer != nil {
				timer.Stop()
			}
			w.sync() // what is left, and the logs of what the stopping actors stored
			return
		}
	}
}

// sync stores one interval: the text gathered since the last, as a chunk per stream,
// the chunks a failed interval kept, and the removal of the logs of stored messages. It
// reports whether it must run again (its statement failed).
func (w *Writer) sync() bool {
	l := &w.stream
	l.lastCut = w.clock.Now()
	l.mu.Lock()
	dirty, done := l.dirty, l.done
	l.dirty, l.done = l.spare[:0], nil
	l.mu.Unlock()
	for _, s := range dirty {
		s.mu.Lock()
		if !s.stored && len(s.pending) > 0 {
			text := string(s.pending)
			s.unsent = append(s.unsent, store.StreamChunk{MessageID: s.message, SessionID: s.session, Offset: s.offset, Text: text, Fence: s.fence})
			s.offset += len(text)
			s.cut = true
			l.unsent[s] = struct{}{}
		}
		s.pending, s.dirty = s.pending[:0], false
		s.mu.Unlock()
	}
	clear(dirty)
	l.spare = dirty[:0]
	chunks, from := l.chunks[:0], l.from[:0]
	defer func() {
		clear(chunks) // nothing kept alive by the buffers
		clear(from)
		l.chunks, l.from = chunks[:0], from[:0]
	}()
	for s := range l.unsent {
		s.mu.Lock()
		stored := s.stored
		s.mu.Unlock()
		if stored { // its log is removed (done): what it did not send is not needed
			s.unsent = nil
			delete(l.unsent, s)
			continue
		}
		chunks = append(chunks, s.unsent...)
		from = append(from, s)
	}
	if len(chunks) == 0 && len(done) == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.StatementTimeout)
	err := w.cfg.Log.StreamLogSync(ctx, chunks, done)
	cancel()
	if w.synced != nil {
		defer w.synced(err)
	}
	if err != nil {
		f := Classify(err)
		w.metrics.streamFailures.Inc()
		w.metrics.failure(f, store.SQLState(err))
		// The removals wait for the next interval either way.
		l.mu.Lock()
		l.done = append(done, l.done...)
		l.mu.Unlock()
		if f == Permanent {
			// Its text is cleaned as it is published, so this is a bug, not data: the
			// chunks are given up rather than retried forever (a log with a gap is read
			// back up to the gap).
			w.cfg.Logger.Error().Err(err).Str("sqlstate", store.SQLState(err)).Int("chunks", len(chunks)).Msg("the database will never take this interval of the stream log; giving it up")
			for _, s := range from {
				s.unsent = nil
				delete(l.unsent, s)
			}
			return len(done) > 0
		}
		if !l.failing {
			w.cfg.Logger.Warn().Err(err).Int("chunks", len(chunks)).Msg("could not store the stream log; it is kept and tried again")
		}
		l.failing = true
		return true
	}
	bytes := 0
	for _, c := range chunks {
		bytes += len(c.Text)
	}
	for _, s := range from {
		clear(s.unsent)
		s.unsent = s.unsent[:0] // its next interval's chunk goes where this one was
		delete(l.unsent, s)
	}
	w.metrics.streamStatements.Inc()
	w.metrics.streamChunks.Add(float64(len(chunks)))
	w.metrics.streamBytes.Add(float64(bytes))
	if l.failing {
		l.failing = false
		w.cfg.Logger.Info().Msg("the stream log is stored again")
	}
	w.succeeded()
	return false
}

// collect removes the chunks that no streaming message needs.
func (w *Writer) collect() {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.StatementTimeout)
	defer cancel()
	n, err := w.cfg.Log.StreamLogCollect(ctx, collectAfter)
	if err != nil {
		w.cfg.Logger.Warn().Err(err).Msg("could not collect the stream log")
		return
	}
	if n > 0 {
		w.cfg.Logger.Info().Int64("chunks", n).Msg("collected stream log chunks no message needs")
	}
}
