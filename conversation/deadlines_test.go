package conversation

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
)

// fired collects which deadlines fired, in order.
type fired chan string

func (f fired) at(name string) func() { return func() { f <- name } }

func (f fired) next(t *testing.T) string {
	t.Helper()
	select {
	case n := <-f:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no deadline fired")
		return ""
	}
}

// none checks that no deadline fired. It runs in a synctest bubble: a deadline fires in
// goroutines of its own (the clock's AfterFunc, then the callback's), and synctest.Wait
// returns once they have run, so what has not come by then did not fire.
func (f fired) none(t *testing.T) {
	t.Helper()
	synctest.Wait()
	select {
	case n := <-f:
		t.Fatalf("deadline %s fired", n)
	default:
	}
}

// Many deadlines share one clock timer, each fires exactly when it is due, and a
// disarmed one never fires.
func TestDeadlinesFireOnTimeWithOneTimer(t *testing.T) { synctest.Test(t, testDeadlinesFireOnTime) }

func testDeadlinesFireOnTime(t *testing.T) {
	clock := clockwork.NewFakeClock()
	d := NewDeadlines("test", clock)
	require.NoError(t, d.Start(t.Context()))
	defer func() { require.NoError(t, d.Stop(context.Background())) }()
	f := make(fired, 10)

	d.AfterFunc(3*time.Second, f.at("c"))
	d.AfterFunc(time.Second, f.at("a"))
	b := d.AfterFunc(2*time.Second, f.at("b"))
	d.AfterFunc(2*time.Second, f.at("b2"))
	require.Equal(t, 4, d.Len())
	// AfterFunc arms the timer before it returns, so the first advance cannot miss it.
	armed(t, clock, "one timer for all")

	require.True(t, b.Stop())
	require.False(t, b.Stop(), "stopped once")
	clock.Advance(time.Second - time.Nanosecond)
	f.none(t)
	clock.Advance(time.Nanosecond)
	require.Equal(t, "a", f.next(t))
	// The fire that called "a" re-arms the timer for the next deadline in the clock's
	// own goroutine, and "a" can be heard before it has: advancing now could pass b2's
	// deadline with no timer armed, and b2 would never fire.
	armed(t, clock, "re-armed for b2")
	clock.Advance(time.Second)
	require.Equal(t, "b2", f.next(t))
	f.none(t)
	armed(t, clock, "re-armed for c")
	clock.Advance(time.Second)
	require.Equal(t, "c", f.next(t))
	require.Zero(t, d.Len())
}

// armed waits until the service's one clock timer is armed. The service never has more
// than one, so a count of 1 means the timer an advance must fire is there; a fired timer
// leaves the clock before its callback runs, so this cannot see the previous one.
func armed(t *testing.T, clock *clockwork.FakeClock, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), msg)
}

// Deadlines armed before Start fire after it; after Stop nothing fires, and arming is
// harmless.
func TestDeadlinesLifecycle(t *testing.T) { synctest.Test(t, testDeadlinesLifecycle) }

func testDeadlinesLifecycle(t *testing.T) {
	clock := clockwork.NewFakeClock()
	d := NewDeadlines("test", clock)
	f := make(fired, 10)
	d.AfterFunc(time.Second, f.at("early"))
	clock.Advance(time.Hour)
	f.none(t)

	require.NoError(t, d.Start(t.Context()))
	require.Equal(t, "early", f.next(t), "overdue when started: fires at once")

	dropped := d.AfterFunc(time.Second, f.at("dropped"))
	require.NoError(t, d.Stop(t.Context()))
	require.False(t, dropped.Stop(), "dropped by Stop; an actor disarming it later is harmless")
	clock.Advance(time.Hour)
	f.none(t)
	require.False(t, d.AfterFunc(time.Second, f.at("late")).Stop())
	clock.Advance(time.Hour)
	f.none(t)
	require.Error(t, d.Start(t.Context()), "no restart after Stop")
}
