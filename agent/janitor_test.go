package agent_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/local"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

const (
	idlePause = 15 * time.Minute
	killAfter = 24 * time.Hour
)

// janitorBundle is one chatd process's sandboxes and janitor on a shared database.
type janitorBundle struct {
	st      *store.Store
	clock   *clockwork.FakeClock
	dir     string
	p       *local.Provider
	sbs     *agent.Sandboxes
	janitor *agent.SandboxJanitor
	session uuid.UUID
	// store is what the sandboxes and the janitor use (st, or one node's view of it).
	store interface {
		agent.SandboxStore
		agent.JanitorStore
	}
	// reg holds the metrics of every incarnation.
	reg       *prometheus.Registry
	metrics   *agent.Metrics
	retention time.Duration
}

func setupJanitor(t *testing.T) *janitorBundle {
	t.Helper()
	t.Parallel()
	b := newJanitorBundle(t, storetest.New(t), nil)
	sess, err := b.st.SessionCreate(context.Background(), chat.Session{ID: uuid.New(), Owner: "alice", CreatedAt: chat.Timestamp(b.clock.Now())})
	require.NoError(t, err)
	b.session = sess.ID
	return b
}

// newJanitorBundle is a chatd process on st: node's (nil for a store without nodes),
// with a sandbox directory of its own.
func newJanitorBundle(t *testing.T, st *store.Store, node *string) *janitorBundle {
	t.Helper()
	reg := prometheus.NewRegistry()
	b := &janitorBundle{st: st, store: st, clock: clockwork.NewFakeClock(), dir: t.TempDir(), reg: reg, metrics: agent.NewMetrics(reg)}
	if node != nil {
		b.store = st.NodeSandboxes(func() string { return *node })
	}
	b.restart(t)
	return b
}

// restart stands for a new chatd process: a new provider on the same sandbox directory,
// new Sandboxes and a new janitor, on the same database, with nothing in memory.
func (b *janitorBundle) restart(t *testing.T) {
	t.Helper()
	p, err := local.New(b.dir)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	b.p = p
	b.sbs = agent.NewSandboxes(p, b.store, b.clock, agent.WithMetrics(b.metrics))
	b.janitor, err = agent.NewJanitor(agent.JanitorConfig{
		Sandboxes: b.sbs, Store: b.store, IdlePause: idlePause, KillAfter: killAfter, WorkspaceRetention: b.retention,
		Clock:  b.clock,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
}

// removed is chatd_workspaces_removed_total{reason} of every incarnation.
func (b *janitorBundle) removed(t *testing.T, reason string) float64 {
	t.Helper()
	families, err := b.reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "chatd_workspaces_removed_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no chatd_workspaces_removed_total{reason=%q}", reason)
	return 0
}

// writeFile writes a file in sb's workspace, as a tool call would.
func writeFile(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Command: "echo work > file && mkdir -p d && chmod 000 d"})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode)
}

func (b *janitorBundle) sweep(t *testing.T) agent.JanitorPass {
	t.Helper()
	p, err := b.janitor.Sweep(context.Background())
	require.NoError(t, err)
	return p
}

func (b *janitorBundle) get(t *testing.T) (sandbox.Sandbox, agent.Replacement) {
	t.Helper()
	sb, r, err := b.sbs.Get(context.Background(), b.session)
	require.NoError(t, err)
	return sb, r
}

func exec(sb sandbox.Sandbox) error {
	_, err := sb.Exec(context.Background(), sandbox.ExecRequest{Command: "true"})
	return err
}

// An idle sandbox is paused once it sat idle for IdlePause, not before, and the next
// call resumes it: the same sandbox, not a replacement.
func TestJanitorPausesAnIdleSandboxAndTheNextCallResumesIt(t *testing.T) {
	b := setupJanitor(t)
	sb, r := b.get(t)
	require.Equal(t, agent.NotReplaced, r)
	require.NoError(t, exec(sb))

	b.clock.Advance(idlePause - time.Second)
	require.Equal(t, agent.JanitorPass{}, b.sweep(t))
	require.NoError(t, exec(sb), "not paused before its time")
	b.clock.Advance(time.Second)
	require.Equal(t, agent.JanitorPass{Paused: 1}, b.sweep(t))
	require.ErrorIs(t, exec(sb), sandbox.ErrPaused)
	require.Equal(t, agent.JanitorPass{}, b.sweep(t), "a paused sandbox is paused once")

	again, r := b.get(t)
	require.Equal(t, agent.NotReplaced, r)
	require.Equal(t, sb.ID(), again.ID())
	require.NoError(t, exec(again))
	// Resumed, its idle time starts again.
	b.clock.Advance(idlePause - time.Second)
	require.Equal(t, agent.JanitorPass{}, b.sweep(t))
}

// A paused sandbox is killed KillAfter after its pause, counted from the stored time by a
// janitor of a later process that never saw it paused, with no run or actor around;
// the next use gets a new sandbox and says why.
func TestJanitorKillsAPausedSandboxAfterARestart(t *testing.T) {
	b := setupJanitor(t)
	sb, _ := b.get(t)
	// Paused as the approval timeout does, an hour in.
	b.clock.Advance(time.Hour)
	require.NoError(t, b.sbs.Pause(context.Background(), b.session))
	b.clock.Advance(killAfter - time.Second)
	require.Equal(t, agent.JanitorPass{}, b.sweep(t))

	b.restart(t)
	b.clock.Advance(time.Second)
	require.Equal(t, agent.JanitorPass{Killed: 1}, b.sweep(t))
	_, err := b.p.Connect(context.Background(), sb.ID())
	require.ErrorIs(t, err, sandbox.ErrGone)
	id, err := b.st.SessionSandbox(context.Background(), b.session)
	require.NoError(t, err)
	require.Empty(t, id)
	require.Equal(t, agent.JanitorPass{}, b.sweep(t), "nothing left to do")

	fresh, r := b.get(t)
	require.Equal(t, agent.ReplacedIdle, r)
	require.NotEqual(t, sb.ID(), fresh.ID())
	require.NoError(t, exec(fresh))
	_, r = b.get(t)
	require.Equal(t, agent.NotReplaced, r, "the replacement is announced once")
}

// A sandbox lost behind the janitor's back (killed by something else) is replaced, and
// the replacement says it was lost.
func TestALostSandboxIsReplaced(t *testing.T) {
	b := setupJanitor(t)
	sb, _ := b.get(t)
	require.NoError(t, b.p.Kill(context.Background(), sb.ID()))
	fresh, r := b.get(t)
	require.Equal(t, agent.ReplacedLost, r)
	require.NotEqual(t, sb.ID(), fresh.ID())
}

// A sandbox with a tool call running is never paused, however long the call runs; its
// idle time counts from the call's end.
func TestJanitorNeverPausesASandboxWithAToolRunning(t *testing.T) {
	b := setupJanitor(t)
	end := b.sbs.Begin(b.session)
	sb, _ := b.get(t)
	b.clock.Advance(3 * idlePause)
	require.Equal(t, agent.JanitorPass{Skipped: 1}, b.sweep(t))
	require.NoError(t, exec(sb))

	require.NoError(t, end(context.Background()))
	require.Equal(t, agent.JanitorPass{}, b.sweep(t), "used just now")
	b.clock.Advance(idlePause)
	require.Equal(t, agent.JanitorPass{Paused: 1}, b.sweep(t))
}

// The service: a pass at start, then one per Interval on the clock, until Stop.
func TestJanitorServicePassesOnItsClock(t *testing.T) {
	b := setupJanitor(t)
	type result struct {
		p   agent.JanitorPass
		err error
	}
	passes := make(chan result, 100)
	j, err := agent.NewJanitor(agent.JanitorConfig{
		Sandboxes: b.sbs, Store: b.st, IdlePause: idlePause, KillAfter: killAfter, Clock: b.clock,
		Interval: time.Minute,
		Swept:    func(p agent.JanitorPass, err error) { passes <- result{p, err} },
	})
	// next is the next pass that did something (a long Advance may fire the ticker more
	// than once, and the later passes find nothing due).
	next := func() agent.JanitorPass {
		for {
			r := <-passes
			require.NoError(t, r.err)
			if r.p != (agent.JanitorPass{}) {
				return r.p
			}
		}
	}
	require.NoError(t, err)
	sb, _ := b.get(t)
	require.NoError(t, j.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, j.Stop(context.Background())) })
	first := <-passes
	require.NoError(t, first.err)
	require.Equal(t, agent.JanitorPass{}, first.p, "the pass at start")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.clock.BlockUntilContext(ctx, 1)) // the ticker
	b.clock.Advance(idlePause)
	require.Equal(t, agent.JanitorPass{Paused: 1}, next())
	require.ErrorIs(t, exec(sb), sandbox.ErrPaused)
	b.clock.Advance(killAfter)
	require.Equal(t, agent.JanitorPass{Killed: 1}, next())
	_, err = b.p.Connect(context.Background(), sb.ID())
	require.ErrorIs(t, err, sandbox.ErrGone)
}

// usedCounter counts the statements that record a sandbox as used.
type usedCounter struct {
	*store.Store
	used atomic.Int32
}

func (u *usedCounter) SessionSandboxUsed(ctx context.Context, id uuid.UUID, now time.Time) error {
	u.used.Add(1)
	return u.Store.SessionSandboxUsed(ctx, id, now)
}

// A tool call that never asks for the sandbox (current_time) costs no statement: the
// storage rule's bound per tool call holds. One that used it records its end.
func TestACallWithoutTheSandboxRecordsNothing(t *testing.T) {
	b := setupJanitor(t)
	counter := &usedCounter{Store: b.st}
	sbs := agent.NewSandboxes(b.p, counter, b.clock)
	ctx := context.Background()

	require.NoError(t, sbs.Begin(b.session)(ctx))
	require.Zero(t, counter.used.Load(), "the call did not use the sandbox")

	end := sbs.Begin(b.session)
	sb, _, err := sbs.Get(ctx, b.session)
	require.NoError(t, err)
	require.NoError(t, exec(sb))
	before := counter.used.Load()
	require.NoError(t, end(ctx))
	require.Equal(t, before+1, counter.used.Load(), "its end is recorded")
}

// flakyPauser is a provider whose Pause fails, leaving the sandbox running, while fail
// is set: a sandbox with a process that would not stop.
type flakyPauser struct {
	*local.Provider
	fail atomic.Bool
}

func (f *flakyPauser) Pause(ctx context.Context, id string) error {
	if f.fail.Load() {
		return errors.New("its processes could not all be stopped; they run on")
	}
	return f.Provider.Pause(ctx, id)
}

// A pause that fails is an error of the pass, and the sandbox is not taken for paused:
// it is not killed KillAfter later as a paused one, and a later pass pauses it once it
// sat idle again.
func TestJanitorRetriesAPauseThatFailed(t *testing.T) {
	b := setupJanitor(t)
	flaky := &flakyPauser{Provider: b.p}
	flaky.fail.Store(true)
	sbs := agent.NewSandboxes(flaky, b.st, b.clock)
	janitor, err := agent.NewJanitor(agent.JanitorConfig{
		Sandboxes: sbs, Store: b.st, IdlePause: idlePause, KillAfter: killAfter, Clock: b.clock,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
	})
	require.NoError(t, err)
	sb, _, err := sbs.Get(context.Background(), b.session)
	require.NoError(t, err)
	require.NoError(t, exec(sb))

	b.clock.Advance(idlePause)
	p, err := janitor.Sweep(context.Background())
	require.ErrorContains(t, err, "could not all be stopped")
	require.Equal(t, agent.JanitorPass{}, p)
	require.NoError(t, exec(sb), "the sandbox runs")

	flaky.fail.Store(false)
	b.clock.Advance(idlePause)
	p, err = janitor.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, agent.JanitorPass{Paused: 1}, p, "the pause is tried again")
	require.ErrorIs(t, exec(sb), sandbox.ErrPaused)
}

// killAndReplace has the janitor kill the session's sandbox (paused, then KillAfter
// later) and gives the session a new one; it returns both.
func (b *janitorBundle) killAndReplace(t *testing.T) (killed, fresh sandbox.Sandbox) {
	t.Helper()
	killed, _ = b.get(t)
	writeFile(t, killed)
	require.NoError(t, b.sbs.Pause(context.Background(), b.session))
	b.clock.Advance(killAfter)
	require.Equal(t, agent.JanitorPass{Killed: 1}, b.sweep(t))
	fresh, r := b.get(t)
	require.Equal(t, agent.ReplacedIdle, r)
	writeFile(t, fresh)
	return killed, fresh
}

// A killed sandbox's workspace stays for the retention, counted from the kill on the
// janitor's clock, and a pass removes it then, not before; the session's new sandbox
// keeps its own.
func TestJanitorRemovesAKilledSandboxsWorkspaceAfterTheRetention(t *testing.T) {
	b := setupJanitor(t)
	const retention = 72 * time.Hour
	b.retention = retention
	b.restart(t)
	killed, fresh := b.killAndReplace(t)
	require.FileExists(t, filepath.Join(b.p.Workspace(killed.ID()), "file"), "kept for the retention")

	// The new sandbox is used now and then (a tool call gets it), so that it stays running.
	use := func() {
		sb, _ := b.get(t)
		require.Equal(t, fresh.ID(), sb.ID())
		require.NoError(t, exec(sb))
	}
	for range 2 {
		b.clock.Advance(retention/2 - time.Second)
		use()
		require.Equal(t, agent.JanitorPass{}, b.sweep(t))
	}
	require.FileExists(t, filepath.Join(b.p.Workspace(killed.ID()), "file"), "not before its time")
	b.clock.Advance(2 * time.Second)
	use()
	require.Equal(t, agent.JanitorPass{Removed: 1}, b.sweep(t))
	require.NoDirExists(t, filepath.Join(b.dir, killed.ID()))
	require.Equal(t, 1.0, b.removed(t, "retention"))
	require.Equal(t, agent.JanitorPass{}, b.sweep(t), "removed once")
	require.FileExists(t, filepath.Join(b.p.Workspace(fresh.ID()), "file"), "the live sandbox's workspace stays")
	require.NoError(t, exec(fresh))
}

// With the retention off, workspaces of killed sandboxes stay for good; those of a
// deleted session go all the same, the killed one's and the current one's (killed
// first), at the next pass.
func TestJanitorKeepsWorkspacesWithRetentionOff(t *testing.T) {
	b := setupJanitor(t)
	b.retention = agent.KeepWorkspaces
	b.restart(t)
	killed, fresh := b.killAndReplace(t)
	b.clock.Advance(10 * 365 * 24 * time.Hour)
	require.Equal(t, agent.JanitorPass{Paused: 1}, b.sweep(t))
	require.DirExists(t, b.p.Workspace(killed.ID()))

	require.NoError(t, b.sbs.Kill(context.Background(), b.session))
	require.NoError(t, b.st.SessionDelete(context.Background(), "alice", b.session, b.clock.Now()))
	require.Equal(t, agent.JanitorPass{Removed: 2}, b.sweep(t))
	require.NoDirExists(t, filepath.Join(b.dir, killed.ID()))
	require.NoDirExists(t, filepath.Join(b.dir, fresh.ID()))
	require.Equal(t, 2.0, b.removed(t, "deleted"))
	require.Equal(t, 0.0, b.removed(t, "retention"))
}

// The workspace of a live session's live sandbox is never removed: not when its record
// says otherwise (the sandbox is still the session's), and not while a tool call of the
// session runs, even for a sandbox that was replaced (the call may still use it).
func TestJanitorNeverRemovesAWorkspaceInUse(t *testing.T) {
	b := setupJanitor(t)
	b.retention = time.Nanosecond // due at the first pass after it is released
	b.restart(t)
	sb, _ := b.get(t)
	writeFile(t, sb)
	_, err := b.st.Pool().Exec(context.Background(), "UPDATE workspaces SET released_at = '2000-01-01', deleted = true WHERE sandbox_id = $1", sb.ID())
	require.NoError(t, err)
	require.Equal(t, agent.JanitorPass{}, b.sweep(t))
	require.FileExists(t, filepath.Join(b.p.Workspace(sb.ID()), "file"))
	require.NoError(t, exec(sb))

	// Lost behind the janitor's back while a call runs: the session gets a new sandbox,
	// and the old one's workspace waits for the call's end.
	end := b.sbs.Begin(b.session)
	require.NoError(t, b.p.Kill(context.Background(), sb.ID()))
	fresh, r := b.get(t)
	require.Equal(t, agent.ReplacedLost, r)
	b.clock.Advance(time.Second)
	require.Equal(t, agent.JanitorPass{Skipped: 1}, b.sweep(t))
	require.FileExists(t, filepath.Join(b.p.Workspace(sb.ID()), "file"))
	require.NoError(t, end(context.Background()))
	require.Equal(t, agent.JanitorPass{Removed: 1}, b.sweep(t))
	require.NoDirExists(t, filepath.Join(b.dir, sb.ID()))
	require.NoError(t, exec(fresh), "the new sandbox is untouched")
}

// Sandboxes are per node: a session deleted through node B, whose sandbox node A made,
// has its workspace removed by A's janitor at its next pass, not by B (B has no such
// directory, and removes nothing of its own). A session that moved to B leaves its
// sandbox on A, whose workspace A removes once the retention has passed.
func TestDeletionOnAnotherNodeRemovesTheWorkspaceOnItsOwn(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	nodeA, nodeB := "a", "b"
	a := newJanitorBundle(t, st, &nodeA)
	b := newJanitorBundle(t, st, &nodeB)
	b.clock = a.clock
	b.restart(t)
	ctx := context.Background()
	newSession := func() uuid.UUID {
		sess, err := st.SessionCreate(ctx, chat.Session{ID: uuid.New(), Owner: "alice", CreatedAt: chat.Timestamp(a.clock.Now())})
		require.NoError(t, err)
		return sess.ID
	}

	deleted := newSession()
	onA, _, err := a.sbs.Get(ctx, deleted)
	require.NoError(t, err)
	writeFile(t, onA)
	// B deletes it, as hub.Sessions.Delete does: kill, tombstone, remove its own.
	require.NoError(t, b.sbs.Kill(ctx, deleted))
	require.NoError(t, st.SessionDelete(ctx, "alice", deleted, b.clock.Now()))
	n, err := b.sbs.RemoveDeleted(ctx, deleted)
	require.NoError(t, err)
	require.Zero(t, n, "none of B's")
	require.Equal(t, agent.JanitorPass{}, b.sweep(t))
	require.DirExists(t, a.p.Workspace(onA.ID()))
	require.Equal(t, agent.JanitorPass{Removed: 1}, a.sweep(t))
	require.NoDirExists(t, filepath.Join(a.dir, onA.ID()))
	require.Equal(t, 1.0, a.removed(t, "deleted"))

	moved := newSession()
	old, _, err := a.sbs.Get(ctx, moved)
	require.NoError(t, err)
	writeFile(t, old)
	onB, r, err := b.sbs.Get(ctx, moved)
	require.NoError(t, err)
	require.Equal(t, agent.ReplacedIdle, r, "to B, A's sandbox is as if killed")
	a.clock.Advance(agent.DefaultWorkspaceRetention)
	require.Equal(t, agent.JanitorPass{Removed: 1}, a.sweep(t))
	require.NoDirExists(t, filepath.Join(a.dir, old.ID()))
	require.Equal(t, agent.JanitorPass{Paused: 1}, b.sweep(t), "B's own sandbox sat idle: paused, not removed")
	require.DirExists(t, b.p.Workspace(onB.ID()))
}

// A sandbox made for a session deleted meanwhile (by a node whose actor still ran it) is
// refused by the store and goes whole: nothing records it, so nothing else would ever
// remove its workspace.
func TestASandboxForADeletedSessionLeavesNothing(t *testing.T) {
	b := setupJanitor(t)
	require.NoError(t, b.st.SessionDelete(context.Background(), "alice", b.session, b.clock.Now()))
	_, _, err := b.sbs.Get(context.Background(), b.session)
	require.ErrorIs(t, err, store.ErrNotFound)
	entries, err := os.ReadDir(b.dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}
