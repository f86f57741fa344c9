package conversation

import (
	"time"
)

type timerKind int

const (
	timerIdle     timerKind = iota + 1 // evict the idle actor
	timerAbandon                       // cancel a run nobody watches
	timerCoalesce                      // publish the held text delta
	timerProgress                      // store the run's latest progress
	timerQuiet                         // drop what a quiet actor keeps in memory

	// timerKinds is how many there are: Actor.timerC has room for a fire of each.
	timerKinds = iota
)

// timerFire is a timer's expiry, delivered to the actor's loop.
type timerFire struct {
	kind timerKind
	gen  uint64
}

// actorTimer is one of the actor's timers on the injectable clock. Its fire comes back to
// the loop through Actor.timerC; a fire from a timer that was disarmed or re-armed since
// carries an old generation and is ignored, so Stop racing the clock is harmless.
type actorTimer struct {
	kind  timerKind
	gen   uint64
	timer stopper
	// timers, when set, runs the timer (a Deadlines service shared by every actor);
	// otherwise it is a timer of the actor's clock.
	timers *Deadlines
}

// stopper is a running timer.
type stopper interface{ Stop() bool }

// arm starts t unless it is already running.
func (a *Actor) arm(t *actorTimer, d time.Duration) {
	if t.timer != nil {
		return
	}
	t.gen++
	f := timerFire{t.kind, t.gen}
	wake := func() {
		select {
		case a.timerC <- f:
			a.poke()
		case <-a.done:
		}
	}
	if t.timers != nil {
		t.timer = t.timers.AfterFunc(d, wake)
	} else {
		t.timer = a.cfg.Clock.AfterFunc(d, wake)
	}
}

// disarm stops t; a fire already on its way is now stale.
func (t *actorTimer) disarm() {
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
		t.gen++
	}
}

// fired reports whether f is t's current fire, and marks t as no longer running.
func (t *actorTimer) fired(f timerFire) bool {
	if t.timer == nil || f.gen != t.gen {
		return false
	}
	t.timer = nil
	return true
}
