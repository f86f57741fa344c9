// Package convtest is a recording conversation.Subscriber for tests that drive an actor
// directly. It keeps the state a careful client would (a snapshot, then every event in
// seq order) in domain types, with no wire format in between, and lets a test wait for
// events.
package convtest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// Timeout bounds every wait; a test that waits longer has hung.
var Timeout = 15 * time.Second

// Recorder records what an actor gives it and applies it to a state. It never blocks
// and never refuses an event.
type Recorder struct {
	mu      sync.Mutex
	state   State
	events  []*conversation.Event // every sequenced event, live or replayed, in order
	catchUp []conversation.CatchUp
	err     error
	dropped []conversation.DropReason
	signal  chan struct{}
	awaited int
}

var _ conversation.Subscriber = (*Recorder)(nil)

// State is a session as a subscriber holds it.
type State struct {
	SessionID string
	Epoch     string
	LastSeq   int64
	Messages  map[string]*chat.Message // the active path's
	// OffPath holds the ids of messages added on a branch the state does not show:
	// events about them are ignored, as a tab ignores them.
	OffPath map[string]bool
	// Branched: the session has branches the state knows of, so an event may name a
	// message of another branch the state never saw (a run that streams there).
	Branched  bool
	ActiveRun *chat.Run
	// Ended holds the final run of every run that ended while watched, by run id.
	Ended map[string]*chat.Run
}

// New returns an empty recorder.
func New() *Recorder {
	return &Recorder{
		state:  State{Messages: map[string]*chat.Message{}, OffPath: map[string]bool{}, Ended: map[string]*chat.Run{}},
		signal: make(chan struct{}, 1),
	}
}

// Deliver applies a live event.
func (r *Recorder) Deliver(ev *conversation.Event) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applyLocked(ev)
	r.poke()
	return true
}

// CatchUp applies the answer to a hello.
func (r *Recorder) CatchUp(c conversation.CatchUp) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.catchUp = append(r.catchUp, c)
	s := &r.state
	switch {
	case c.Snapshot != nil:
		snap := c.Snapshot
		s.SessionID, s.Epoch, s.LastSeq = snap.SessionID.String(), snap.Epoch, snap.LastSeq
		s.Messages = map[string]*chat.Message{}
		for _, m := range snap.Messages {
			m := clone(m)
			s.Messages[m.ID.String()] = &m
			s.Branched = s.Branched || m.Branch != nil
		}
		s.ActiveRun = cloneRun(snap.ActiveRun)
	case c.Resumed != nil:
		res := c.Resumed
		if res.Epoch != s.Epoch || res.LastSeq != s.LastSeq || res.SessionID.String() != s.SessionID {
			r.fail(fmt.Errorf("resumed at %s/%d of %s, state is at %s/%d of %s", res.Epoch, res.LastSeq, res.SessionID, s.Epoch, s.LastSeq, s.SessionID))
		}
		for _, ev := range c.Events {
			r.applyLocked(ev)
		}
	default:
		r.fail(fmt.Errorf("a catch-up with neither snapshot nor resumed"))
	}
	r.poke()
	return true
}

// Dropped records why the actor let go.
func (r *Recorder) Dropped(reason conversation.DropReason) {
	r.mu.Lock()
	r.dropped = append(r.dropped, reason)
	r.mu.Unlock()
	r.poke()
}

func (r *Recorder) poke() {
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *Recorder) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// applyLocked folds a sequenced event into the state, checking the protocol's promises:
// seqs are consecutive, and events name messages the state holds.
func (r *Recorder) applyLocked(ev *conversation.Event) {
	r.events = append(r.events, ev)
	s := &r.state
	if ev.Seq != s.LastSeq+1 {
		r.fail(fmt.Errorf("%s has seq %d, expected %d", ev.Type, ev.Seq, s.LastSeq+1))
		return
	}
	s.LastSeq = ev.Seq
	msg := func(id string) *chat.Message {
		m, ok := s.Messages[id]
		if !ok && !s.OffPath[id] && !s.Branched {
			r.fail(fmt.Errorf("%s (seq %d) names message %s that the state does not hold", ev.Type, ev.Seq, id))
		}
		return m
	}
	// add applies the rule of the protocol: a message under the last one held grows the
	// path; one held is replaced; any other is on another branch.
	add := func(m chat.Message) {
		id := m.ID.String()
		if _, ok := s.Messages[id]; ok {
			s.Messages[id] = &m
			return
		}
		var last *chat.Message
		for _, h := range s.Messages {
			if last == nil || h.Position > last.Position {
				last = h
			}
		}
		if (last == nil && m.ParentID == nil) || (last != nil && m.ParentID != nil && *m.ParentID == last.ID) {
			s.Messages[id] = &m
			return
		}
		s.OffPath[id] = true
		s.Branched = true
	}
	switch ev.Type {
	case conversation.EventChatStarted:
		add(clone(*ev.Message))
		s.ActiveRun = cloneRun(ev.Run)
	case conversation.EventSegmentStarted, conversation.EventToolStart, conversation.EventMessageAdded:
		add(clone(*ev.Message))
	case conversation.EventToolUpdate, conversation.EventToolEnd:
		if msg(ev.Message.ID.String()) != nil {
			m := clone(*ev.Message)
			s.Messages[m.ID.String()] = &m
		}
	case conversation.EventBranch:
		s.Branched = true
		s.Messages = map[string]*chat.Message{}
		for _, m := range ev.Messages {
			m := clone(m)
			s.Messages[m.ID.String()] = &m
			delete(s.OffPath, m.ID.String())
		}
	case conversation.EventDelta:
		if m := msg(ev.MessageID.String()); m != nil {
			m.Content += ev.Text
		}
	case conversation.EventToolOutput:
		if m := msg(ev.MessageID.String()); m != nil && m.Tool != nil {
			out := ev.Text
			if m.Tool.Output != nil {
				out = *m.Tool.Output + out
			}
			m.Tool.Output = &out
		}
	case conversation.EventSegmentEnded:
		if m := msg(ev.MessageID.String()); m != nil {
			m.Status = ev.Status
			m.Error = ev.Error
		}
	case conversation.EventRunStatus:
		if !ev.Run.Status.Active() {
			// A dismissed run: it stays ended.
			s.Ended[ev.RunID.String()] = cloneRun(ev.Run)
			if s.ActiveRun != nil && s.ActiveRun.ID == ev.RunID {
				s.ActiveRun = nil
			}
			break
		}
		s.ActiveRun = cloneRun(ev.Run)
	case conversation.EventChatDone, conversation.EventChatError, conversation.EventChatCancelled:
		s.ActiveRun = nil
		s.Ended[ev.RunID.String()] = cloneRun(ev.Run)
	case conversation.EventQueue:
		// The queue is no message: tests read it from the events.
	default:
		r.fail(fmt.Errorf("unknown event type %q", ev.Type))
	}
}

// clone copies a message deep enough that applying events does not change the actor's.
func clone(m chat.Message) chat.Message {
	if m.Tool != nil {
		t := *m.Tool
		if t.Output != nil {
			out := *t.Output
			t.Output = &out
		}
		m.Tool = &t
	}
	return m
}

func cloneRun(r *chat.Run) *chat.Run {
	if r == nil {
		return nil
	}
	c := *r
	return &c
}

// Messages returns the messages the recorder holds, in position order.
func (r *Recorder) Messages() []chat.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]chat.Message, 0, len(r.state.Messages))
	for _, m := range r.state.Messages {
		out = append(out, clone(*m))
	}
	slices.SortFunc(out, func(a, b chat.Message) int { return int(a.Position - b.Position) })
	return out
}

// ActiveRun returns the active run as the recorder holds it.
func (r *Recorder) ActiveRun() *chat.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	return cloneRun(r.state.ActiveRun)
}

// LastSeq returns the seq the recorder's state is at.
func (r *Recorder) LastSeq() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state.LastSeq
}

// Events returns every sequenced event received, in order.
func (r *Recorder) Events() []*conversation.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// CatchUps returns every catch-up received, in order.
func (r *Recorder) CatchUps() []conversation.CatchUp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.catchUp)
}

// DropReasons returns why the actor let go, in order.
func (r *Recorder) DropReasons() []conversation.DropReason {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.dropped)
}

// Err returns the first protocol violation seen, if any.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Await returns the first event after the last one Await returned that matches, waiting
// for it to arrive, and fails the test when the events broke the protocol.
func (r *Recorder) Await(t testing.TB, match func(*conversation.Event) bool) *conversation.Event {
	t.Helper()
	timeout := time.After(Timeout)
	for {
		r.mu.Lock()
		if r.err != nil {
			r.mu.Unlock()
			t.Fatalf("recorder: %v", r.err)
		}
		for r.awaited < len(r.events) {
			ev := r.events[r.awaited]
			r.awaited++
			if match(ev) {
				r.mu.Unlock()
				return ev
			}
		}
		r.mu.Unlock()
		select {
		case <-r.signal:
		case <-timeout:
			t.Fatal("no matching event arrived")
		}
	}
}

// AwaitCatchUp waits until the recorder has received n catch-ups and returns the nth.
func (r *Recorder) AwaitCatchUp(t testing.TB, n int) conversation.CatchUp {
	t.Helper()
	timeout := time.After(Timeout)
	for {
		r.mu.Lock()
		if len(r.catchUp) >= n {
			c := r.catchUp[n-1]
			r.mu.Unlock()
			return c
		}
		r.mu.Unlock()
		select {
		case <-r.signal:
		case <-timeout:
			t.Fatalf("catch-up %d did not arrive", n)
		}
	}
}

// Type matches events of type typ, for Await.
func Type(typ conversation.EventType) func(*conversation.Event) bool {
	return func(ev *conversation.Event) bool { return ev.Type == typ }
}

// Terminal matches the event that ends a run, for Await.
func Terminal(ev *conversation.Event) bool { return ev.Terminal() }

// Diff describes how two message lists differ in what a client sees of them, or returns
// "" when they are equal: what the actor told subscribers and what the database holds
// must agree. Tool inputs are compared as JSON values and times as instants; what no
// client sees (updatedAt, provider data) is not compared.
func Diff(want, got []chat.Message) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d messages, want %d:\n got %s\nwant %s", len(got), len(want), summary(got), summary(want))
	}
	for i := range want {
		wb, _ := json.Marshal(visible(want[i]))
		gb, _ := json.Marshal(visible(got[i]))
		if string(wb) != string(gb) {
			return fmt.Sprintf("message %d differs:\n got %s\nwant %s", i, gb, wb)
		}
	}
	return ""
}

// visible is what a client sees of a message.
func visible(m chat.Message) any {
	type tool struct {
		CallID, Name string
		Input        any
		Output       *string
		Status       chat.ToolStatus
	}
	v := struct {
		ID        string
		Position  int64
		Role      chat.Role
		Kind      chat.MessageKind
		Content   string
		Status    chat.MessageStatus
		RunID     string
		RequestID string
		CreatedAt time.Time
		Error     *chat.ErrorInfo
		Tool      *tool
	}{
		ID: m.ID.String(), Position: m.Position, Role: m.Role, Kind: m.Kind, Content: m.Content,
		Status: m.Status, RequestID: m.RequestID, CreatedAt: m.CreatedAt.UTC(), Error: m.Error,
	}
	if v.Kind == "" {
		v.Kind = chat.KindText
	}
	if m.RunID != nil {
		v.RunID = m.RunID.String()
	}
	if t := m.Tool; t != nil {
		v.Tool = &tool{CallID: t.CallID, Name: t.Name, Output: t.Output, Status: t.Status}
		_ = json.Unmarshal(t.Input, &v.Tool.Input)
	}
	return v
}

func summary(ms []chat.Message) string {
	var b []byte
	for _, m := range ms {
		c := m.Content
		if len(c) > 40 {
			c = c[:40] + "…"
		}
		b = fmt.Appendf(b, "[%d %s %s %q] ", m.Position, m.Role, m.Status, c)
	}
	return string(b)
}
