package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// session is one conversation the load generator drives, watched by its tabs.
type session struct {
	// id is "" until the first tab's snapshot names the session (the server chooses a new
	// session's id); the later tabs say hello to it.
	id   string
	tabs []*tab
}

// tab is one WebSocket client of a session. It keeps what a careful client keeps (epoch,
// last seq, the next token it expects) and checks every frame against it: a seq or token
// that skips ahead is a gap, one that repeats is a duplicate.
type tab struct {
	g    *gen
	sess *session
	addr string
	// query is added to /v1/ws (e.g. "?session=<id>", which a node reverse-proxies to
	// the session's owner); "" for none.
	query string
	// cf is set for a client of the Centrifuge peer (centrifuge.go), nil otherwise.
	cf *cfState

	ws       *websocket.Conn
	readDone chan struct{}
	ready    chan struct{} // closed when the hello is answered
	expected atomic.Bool   // the connection is being closed on purpose

	// Owned by the reading goroutine.
	epoch   string
	lastSeq int64
	nextTok int // next token index of the current run; -1 when not known

	frames    atomic.Int64
	textBytes atomic.Int64 // of the deltas' text, as sent (JSON-escaped)
	gaps      atomic.Int64
	dups      atomic.Int64
	runsDone  atomic.Int64
	replays   atomic.Int64
	snapshots atomic.Int64
	errors    atomic.Int64
	closeCode atomic.Int32 // of an unexpected close
	// moved counts hellos answered `moved` (another node holds the session; the
	// connection then closes with 4010, which is expected and not an error).
	moved    atomic.Int64
	wasMoved atomic.Bool // the current connection's hello was answered moved

	mu           sync.Mutex
	lat          hist
	reconnectAt  time.Time     // when the last reconnect began
	caughtUp     time.Duration // from reconnectAt to the first token due after it
	caughtUpDone bool
	resumeIdx    int           // index of that first token
	snap         transcript    // the last snapshot's text, checked
	snapAt       time.Time     // when the last snapshot arrived
	sentAt       time.Time     // when this tab last sent chat.send
	firstToken   time.Duration // from sentAt to the run's first token
	gotFirst     bool
}

// gen is the load generator's shared state.
type gen struct {
	compress  bool        // dial offering permessage-deflate
	measuring atomic.Bool // record token latencies
	firstErr  atomic.Pointer[string]
}

func (g *gen) noteErr(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	g.firstErr.CompareAndSwap(nil, &s)
}

var (
	errNotAnswered = errors.New("hello not answered")
	// errMoved: the hello was answered `moved` and the connection closed with 4010.
	errMoved = errors.New("hello answered moved (4010)")
)

// connect dials and says hello (resuming from the tab's epoch and lastSeq when it has
// them), then reads in the background. It returns once the hello is answered.
func (t *tab) connect(ctx context.Context, resume bool) error {
	if t.cf != nil {
		return t.cfConnect(ctx, resume)
	}
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var opts *websocket.DialOptions
	if t.g.compress {
		opts = &websocket.DialOptions{CompressionMode: websocket.CompressionNoContextTakeover}
	}
	ws, _, err := websocket.Dial(dctx, "ws://"+t.addr+"/v1/ws"+t.query, opts)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	ws.SetReadLimit(64 << 20)
	t.ws = ws
	t.expected.Store(false)
	t.wasMoved.Store(false)
	t.ready = make(chan struct{})
	t.readDone = make(chan struct{})
	hello := map[string]any{"type": "hello"}
	if t.sess.id != "" {
		hello["sessionId"] = t.sess.id
	}
	if resume {
		hello["epoch"] = t.epoch
		hello["lastSeq"] = t.lastSeq
	}
	go t.read(t.handle)
	if err := t.send(dctx, hello); err != nil {
		t.expected.Store(true)
		ws.CloseNow()
		<-t.readDone
		return err
	}
	select {
	case <-t.ready:
		return nil
	case <-t.readDone:
		if t.wasMoved.Load() {
			return errMoved
		}
		return fmt.Errorf("%w: connection closed (code %d)", errNotAnswered, t.closeCode.Load())
	case <-dctx.Done():
		ws.CloseNow()
		return fmt.Errorf("%w: %w", errNotAnswered, dctx.Err())
	}
}

func (t *tab) send(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return t.ws.Write(ctx, websocket.MessageText, b)
}

// drop cuts the connection without a close handshake, as a lost network would, and
// waits for the reader to stop.
func (t *tab) drop() {
	t.expected.Store(true)
	t.ws.CloseNow()
	<-t.readDone
}

// close closes the connection normally.
func (t *tab) close() {
	t.expected.Store(true)
	_ = t.ws.Close(websocket.StatusNormalClosure, "")
	<-t.readDone
}

// read reads the connection's frames until it ends, giving each to apply (the protocol's
// own: handle for chatd's, cfFrame for the peer's).
func (t *tab) read(apply func(f []byte, now time.Time)) {
	defer close(t.readDone)
	buf := make([]byte, 0, 4096)
	for {
		_, r, err := t.ws.Reader(context.Background())
		if err != nil {
			if !t.expected.Load() {
				t.closeCode.Store(int32(websocket.CloseStatus(err)))
				t.g.noteErr("a connection ended: %v", err)
			}
			return
		}
		buf = buf[:0]
		for {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			n, err := r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
			if err == io.EOF {
				break
			}
			if err != nil {
				if !t.expected.Load() {
					t.g.noteErr("read: %v", err)
				}
				return
			}
		}
		t.frames.Add(1)
		apply(buf, time.Now())
	}
}

var deltaPrefix = []byte(`{"type":"chat.delta","seq":`)

// handle applies one frame. Deltas, nearly every frame, are parsed by hand: the load
// generator shares the machine with the server and must not spend its CPU on JSON.
func (t *tab) handle(f []byte, now time.Time) {
	if rest, ok := bytes.CutPrefix(f, deltaPrefix); ok {
		end := bytes.IndexByte(rest, ',')
		seq, err := strconv.ParseInt(string(rest[:max(end, 0)]), 10, 64)
		i := bytes.Index(rest, []byte(`"text":"`))
		if end < 0 || err != nil || i < 0 {
			t.g.noteErr("unparsable delta: %.200s", f)
			return
		}
		t.seq(seq)
		text := rest[i+len(`"text":"`):]
		if j := bytes.IndexByte(text, '"'); j >= 0 {
			text = text[:j]
		}
		t.textBytes.Add(int64(len(text)))
		t.tokens(text, now)
		return
	}
	var fr struct {
		Type      string          `json:"type"`
		SessionID string          `json:"sessionId"`
		Seq       int64           `json:"seq"`
		Epoch     string          `json:"epoch"`
		LastSeq   int64           `json:"lastSeq"`
		Code      string          `json:"code"`
		Message   json.RawMessage `json:"message"` // a string in error frames
		Messages  []struct {
			Role    string `json:"role"`
			Kind    string `json:"kind"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(f, &fr); err != nil {
		t.g.noteErr("unparsable frame: %.200s", f)
		return
	}
	switch fr.Type {
	case "snapshot":
		t.snapshots.Add(1)
		if t.sess.id == "" {
			t.sess.id = fr.SessionID // read by the next tab's connect, after markReady
		}
		t.epoch, t.lastSeq = fr.Epoch, fr.LastSeq
		// The next token follows the newest one the snapshot's text holds.
		next := -1
		var texts []string
		for _, m := range fr.Messages {
			if m.Role == "assistant" && m.Kind == "" {
				texts = append(texts, m.Content)
				if idx, ok := lastToken(m.Content); ok {
					next = idx + 1
				}
			}
		}
		t.mu.Lock()
		t.nextTok = next
		t.snap, t.snapAt = checkTranscript(texts, t.reconnectAt), now
		t.mu.Unlock()
		t.markReady()
	case "resumed":
		t.replays.Add(1)
		if fr.LastSeq != t.lastSeq || fr.Epoch != t.epoch {
			t.g.noteErr("resumed at %s/%d, expected %s/%d", fr.Epoch, fr.LastSeq, t.epoch, t.lastSeq)
		}
		t.markReady()
	case "ack", "history":
	case "error":
		if fr.Code == "moved" {
			// Another node holds the session: the server closes with 4010 next, and
			// the client reconnects. Not an error.
			t.moved.Add(1)
			t.wasMoved.Store(true)
			t.expected.Store(true)
			return
		}
		t.errors.Add(1)
		t.g.noteErr("error frame: %s: %s", fr.Code, string(fr.Message))
	default: // a sequenced event
		t.seq(fr.Seq)
		switch fr.Type {
		case "chat.started":
			t.nextTok = 0
		case "chat.done", "chat.error", "chat.cancelled":
			t.runsDone.Add(1)
		}
	}
}

func (t *tab) markReady() {
	select {
	case <-t.ready:
	default:
		close(t.ready)
	}
}

func (t *tab) seq(seq int64) {
	switch {
	case seq == t.lastSeq+1:
	case seq <= t.lastSeq:
		t.dups.Add(1)
		return
	default:
		t.gaps.Add(1)
	}
	t.lastSeq = seq
}

// tokens checks and times the tokens of a delta: " i:t i:t…".
func (t *tab) tokens(text []byte, now time.Time) {
	measuring := t.g.measuring.Load()
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(text) > 0 {
		text = bytes.TrimLeft(text, " ")
		if len(text) == 0 {
			break
		}
		tok := text
		if j := bytes.IndexByte(text, ' '); j >= 0 {
			tok, text = text[:j], text[j:]
		} else {
			text = nil
		}
		idxS, stampS, ok := bytes.Cut(tok, []byte(":"))
		idx, err1 := strconv.Atoi(string(idxS))
		stamp, err2 := strconv.ParseInt(string(stampS), 10, 64)
		if !ok || err1 != nil || err2 != nil {
			t.g.noteErr("garbled token %q", tok)
			continue
		}
		switch {
		case t.nextTok < 0 || idx == t.nextTok:
		case idx < t.nextTok:
			t.dups.Add(1)
		default:
			t.gaps.Add(1)
		}
		t.nextTok = idx + 1
		emitted := time.Unix(0, stamp)
		if measuring {
			t.lat.add(now.Sub(emitted))
		}
		if !t.sentAt.IsZero() && !t.gotFirst {
			t.firstToken, t.gotFirst = now.Sub(t.sentAt), true
		}
		if !t.reconnectAt.IsZero() && !t.caughtUpDone && !emitted.Before(t.reconnectAt) {
			t.caughtUp = now.Sub(t.reconnectAt)
			t.caughtUpDone = true
			t.resumeIdx = idx
		}
	}
}

// lastToken returns the index of the last token in a run's text.
func lastToken(s string) (int, bool) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return 0, false
	}
	idx, _, ok := strings.Cut(fields[len(fields)-1], ":")
	n, err := strconv.Atoi(idx)
	return n, ok && err == nil
}

// transcript is what a snapshot's text holds of a run's tokens.
type transcript struct {
	next       int // the token after the last one; 0 for none
	gaps, dups int // tokens skipped or repeated in the text
	// firstNew is the first token stamped at or after a time (a node's death: then it
	// is the first its successor streamed); -1 for none.
	firstNew int
}

// checkTranscript reads the tokens of a run's text segments, in order.
func checkTranscript(texts []string, since time.Time) transcript {
	tr := transcript{firstNew: -1}
	for _, text := range texts {
		for _, f := range strings.Fields(text) {
			idxS, stampS, ok := strings.Cut(f, ":")
			idx, err1 := strconv.Atoi(idxS)
			stamp, err2 := strconv.ParseInt(stampS, 10, 64)
			if !ok || err1 != nil || err2 != nil {
				continue
			}
			switch {
			case idx < tr.next:
				tr.dups++
			case idx > tr.next:
				tr.gaps++
			}
			tr.next = idx + 1
			if tr.firstNew < 0 && !time.Unix(0, stamp).Before(since) {
				tr.firstNew = idx
			}
		}
	}
	return tr
}
