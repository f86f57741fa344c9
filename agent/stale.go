package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
)

// errStale is the cause of a tool call's context when its stale watch fired.
var errStale = errors.New("the tool call was stale")

// staleWatch stops a tool call that shows no sign of work (no output, no progress) for
// after: the call's context is cancelled, and fired says why. after <= 0 watches nothing.
type staleWatch struct {
	clock clockwork.Clock
	after time.Duration

	mu     sync.Mutex
	timer  clockwork.Timer
	cancel context.CancelCauseFunc
	done   atomic.Bool
}

func newStaleWatch(clock clockwork.Clock, after time.Duration) *staleWatch {
	return &staleWatch{clock: clock, after: after}
}

// watch returns the call's context, cancelled when the watch fires, and starts it.
func (w *staleWatch) watch(ctx context.Context) context.Context {
	if w.after <= 0 {
		return ctx
	}
	ctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	w.cancel = cancel
	w.timer = w.clock.AfterFunc(w.after, func() {
		w.done.Store(true)
		cancel(errStale)
	})
	w.mu.Unlock()
	return ctx
}

// alive starts the watch's time again: the call sent output or reported progress.
func (w *staleWatch) alive() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil && !w.done.Load() {
		w.timer.Reset(w.after)
	}
}

// fired says the watch stopped the call.
func (w *staleWatch) fired() bool { return w.done.Load() }

// stop ends the watch once the call has returned.
func (w *staleWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.cancel != nil {
		w.cancel(nil)
	}
}

// staleAfter is how long call c may go without output or progress: its tool's own
// ToolSpec.StaleAfter, else Config.ToolStale; 0 or less: for ever.
func (r *run) staleAfter(c *call) time.Duration {
	if c.tool != nil {
		if d := c.tool.Spec().StaleAfter; d != 0 {
			return d
		}
	}
	return r.l.cfg.ToolStale
}
