package conversation

import (
	"strings"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/journal"
	"github.com/google/uuid"
)

// liveMessage is a stored message whose text is still growing in memory: an open
// segment's content, or a running tool's streamed output.
type liveMessage struct {
	msg chat.Message
	buf strings.Builder
	// log is the text's stream log (nil without one): buf's text, stored every
	// interval, so a crash loses at most an interval of it.
	log *journal.Stream
}

// add appends text to the message's text and returns it as a slice of that text: an
// event of the delta keeps no copy of its own, and the replay ring keeps only where the
// delta lies in the message's text (Event.src). (strings.Builder never changes bytes it
// has written, even as it grows.)
func (l *liveMessage) add(text string) string {
	// Grow doubles the buffer when it is full, so a message allocates about its size
	// as it grows; WriteString alone grows a long one by a quarter at a time, four
	// times its size, and the text's growth was a fifth of what streaming allocated.
	l.buf.Grow(len(text))
	l.buf.WriteString(text)
	s := l.buf.String()
	return s[len(s)-len(text):]
}

// view returns the message as a client should see it now.
func (l *liveMessage) view() chat.Message {
	m := l.msg
	if m.Tool != nil {
		tool := *m.Tool
		if l.buf.Len() > 0 {
			out := l.buf.String()
			tool.Output = &out
		}
		m.Tool = &tool
	} else {
		m.Content = l.buf.String()
	}
	return m
}

// overlayLive replaces stored rows with what clients were told of the active run: the
// live view of its open segment and running tools. (Updates the database has not taken
// yet are the journal's overlay.)
func (a *Actor) overlayLive(msgs []chat.Message) {
	if a.run == nil {
		return
	}
	for i := range msgs {
		if l := a.run.live(msgs[i].ID); l != nil {
			msgs[i] = keepBranch(l.view(), msgs[i])
		}
	}
}

func (r *runState) live(id uuid.UUID) *liveMessage {
	if r.seg != nil && r.seg.msg.ID == id {
		return r.seg
	}
	for _, t := range r.tools {
		if t.msg.ID == id {
			return t
		}
	}
	return nil
}

func (a *Actor) onText(run *runState, text string) {
	if !a.isCurrent(run) {
		return
	}
	if !a.openSegment(run, chat.KindText) {
		return
	}
	a.appendDelta(run, chat.CleanText(text))
}

func (a *Actor) onReasoning(run *runState, it *reasoningIntent) {
	if !a.isCurrent(run) {
		return
	}
	if it.text != "" || (it.end && (run.seg == nil || run.seg.msg.Kind != chat.KindReasoning)) {
		if !a.openSegment(run, chat.KindReasoning) {
			return
		}
	}
	if it.text != "" {
		a.appendDelta(run, chat.CleanText(it.text))
	}
	if it.end {
		// Cleaned where it enters: data a provider sends (a signature with a NUL, say)
		// must not be what the database refuses to store.
		if data := chat.CleanJSON(it.providerData); len(data) > 0 {
			run.seg.msg.ProviderData = data
		}
		if err := a.closeSegment(run, chat.MessageComplete, nil); err != nil {
			a.failStorage(run, "store the reasoning", err)
		}
	}
}

// openSegment makes sure an assistant segment of kind is open: another kind's segment is
// closed first (a boundary, like a tool call). It reports false when the run failed.
func (a *Actor) openSegment(run *runState, kind chat.MessageKind) bool {
	if run.seg != nil && run.seg.msg.Kind == kind {
		return true
	}
	if err := a.closeSegment(run, chat.MessageComplete, nil); err != nil {
		a.failStorage(run, "store the reply", err)
		return false
	}
	seg := &liveMessage{msg: a.newRunMessage(run, chat.RoleAssistant, chat.MessageStreaming)}
	seg.msg.Kind = kind
	seg.log = a.journal.stream(seg.msg.ID)
	if err := a.journal.insert(seg.msg); err != nil {
		a.failStorage(run, "store the reply", err)
		return false
	}
	run.seg = seg
	m := seg.msg
	a.publish(a.runEvent(run, Event{Type: EventSegmentStarted, Message: &m}))
	return true
}

// closeSegment writes the open segment's content, once, and publishes its end.
func (a *Actor) closeSegment(run *runState, status chat.MessageStatus, msgErr *chat.ErrorInfo) error {
	seg := run.seg
	if seg == nil {
		return nil
	}
	a.flushDelta() // the stored content is every delta's text, held text included
	run.seg = nil
	m := seg.view()
	m.Status = status
	m.Error = msgErr
	m.UpdatedAt = a.now()
	err := a.journal.update(m, seg.log)
	a.publish(a.runEvent(run, Event{Type: EventSegmentEnded, MessageID: m.ID, Status: status, Error: msgErr}))
	return err
}
