package conversation

import (
	"strings"
	"time"
)

// MaxCoalescedDelta bounds the text one coalesced chat.delta carries: text held back for
// Config.CoalesceDeltas is published early rather than grow past it, so a fast model
// cannot build a huge frame. A single piece larger than this is published as it came.
const MaxCoalescedDelta = 16 << 10

// CoalesceAdaptive is Config.CoalesceDeltas's adaptive mode: text is held only while
// more of the actor's work is queued behind it, and published once it has none; and,
// while the process is behind, for the window its Pacer has open (Config.Pacer), when
// the session's text comes closer together than the window.
const CoalesceAdaptive time.Duration = -1

// heldDelta is text of the open segment that arrived within the coalescing window and is
// not published yet. It is not part of the segment's text (liveMessage.buf) until it is
// published, so snapshots, history and the ring all stop at the same seq. Every other
// event publishes it first (see publish), and so do closing the segment and a hello.
type heldDelta struct {
	run  *runState
	seg  *liveMessage
	text strings.Builder
}

// appendDelta adds text to run's open segment: published at once as a chat.delta, or,
// when CoalesceDeltas is on, held back and merged with what follows it within the window.
func (a *Actor) appendDelta(run *runState, text string) {
	if a.cfg.CoalesceDeltas == 0 {
		a.publishDelta(run, run.seg, text)
		return
	}
	h := &a.held
	if a.cfg.CoalesceDeltas == CoalesceAdaptive && a.sendsAtOnce() {
		a.publishDelta(run, run.seg, text)
		return
	}
	if h.seg != nil && (h.seg != run.seg || h.text.Len()+len(text) > MaxCoalescedDelta) {
		a.flushDelta()
	}
	h.run, h.seg = run, run.seg
	h.text.WriteString(text)
	if h.text.Len() >= MaxCoalescedDelta {
		a.flushDelta()
		return
	}
	if a.cfg.CoalesceDeltas == CoalesceAdaptive {
		// Published when the actor has nothing more queued, or, while the process is
		// behind, at the end of the Pacer's window (flushIdle decides which).
		return
	}
	a.arm(&a.coalesceT, a.cfg.CoalesceDeltas) // the window starts with its first piece
}

// sendsAtOnce reports, in adaptive mode, whether the next piece of text goes out as it
// comes: nothing is held or queued behind it (flushIdle would publish it at the end of
// this pass, so it goes now, without a copy), and no window would hold it (outWindow).
func (a *Actor) sendsAtOnce() bool {
	w := a.cfg.Pacer.Window()
	if w > 0 {
		now := a.now()
		a.textGap, a.lastText = now.Sub(a.lastText), now
	}
	return a.outWindow(w) && a.held.seg == nil && len(a.inbox) == 0
}

// outWindow reports whether the Pacer's window w (0: none) leaves the session's text
// alone: none is open, or the text comes further apart than the window. Holding such
// text would add the window to its latency and merge nothing, as with a model streaming
// 50 tokens a second and a window of 5 or 10 ms; the window's wider steps still merge.
func (a *Actor) outWindow(w time.Duration) bool {
	return w == 0 || a.textGap >= w
}

// maxBehindPasses bounds how many intents in a row the actor handles with more queued
// behind them before it sends what it holds anyway: an actor that stays behind merges,
// but its clients still hear from it.
const maxBehindPasses = 16

// flushIdle runs after each of the loop's passes. Once nothing is queued behind the
// last intent (the actor has caught up), or after maxBehindPasses passes without that,
// it publishes the held text in adaptive mode (unless the Pacer's window is open and the
// text comes closer together than it: then the end of a window does, started now if
// none runs) and has the subscribers send the events they held while it was behind.
func (a *Actor) flushIdle() {
	if len(a.inbox) != 0 {
		if a.behindPasses++; a.behindPasses < maxBehindPasses {
			return
		}
	}
	a.behindPasses = 0
	if a.held.seg != nil && a.cfg.CoalesceDeltas == CoalesceAdaptive {
		// The window is read here, once the actor has caught up: the text waits for the
		// window's end (a window that is running, or one that starts now), or goes at
		// once when none is open or the text comes further apart than the window.
		if w := a.cfg.Pacer.Window(); a.outWindow(w) {
			a.flushDelta()
		} else {
			a.arm(&a.coalesceT, w)
		}
	}
	if a.holding {
		a.holding = false
		for sub := range a.subs {
			if h, ok := sub.(HoldingSubscriber); ok {
				h.Release()
			}
		}
	}
}

// flushDelta publishes the held text, if any, as one chat.delta and stops the window.
func (a *Actor) flushDelta() {
	a.coalesceT.disarm()
	h := &a.held
	if h.seg == nil {
		return
	}
	run, seg, text := h.run, h.seg, h.text.String()
	h.run, h.seg = nil, nil
	h.text.Reset()
	a.publishDelta(run, seg, text)
}

// publishDelta appends text to seg's text and tells the subscribers.
func (a *Actor) publishDelta(run *runState, seg *liveMessage, text string) {
	text = seg.add(text)
	seg.log.Append(text)
	a.publish(a.runEvent(run, Event{Type: EventDelta, MessageID: seg.msg.ID, Text: text, src: &seg.buf}))
}
