package hub_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/local"
	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
)

// killer stands for the sessions' sandboxes: Kill waits for the test's go-ahead, so the
// test can act while a deletion is half done (its actor stopped, its rows still there).
type killer struct {
	entered chan struct{}
	release chan struct{}
	fail    error
}

func (k *killer) Kill(ctx context.Context, _ uuid.UUID) error {
	close(k.entered)
	select {
	case <-k.release:
		return k.fail
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *killer) RemoveDeleted(context.Context, uuid.UUID) (int, error) { return 0, nil }
func (k *killer) Files(context.Context, uuid.UUID) ([]sandbox.File, bool, error) {
	return nil, false, sandbox.ErrNoWorkspace
}
func (k *killer) OpenFile(context.Context, uuid.UUID, string) (*os.File, fs.FileInfo, error) {
	return nil, nil, sandbox.ErrNoWorkspace
}

func newKiller() *killer {
	return &killer{entered: make(chan struct{}), release: make(chan struct{})}
}

// A hello that comes while a session is being deleted waits for the deletion, then finds
// the tombstone: no actor loads the session in between and serves it afterwards.
func TestHelloDuringADeletionFindsTheTombstone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, script.New(script.Text("ok")))
	ctx := testCtx(t)
	id := uuid.New()
	first := newSub()
	_, _, err := e.hub.Hello(ctx, id, hello(first))
	require.NoError(t, err)

	k := newKiller()
	sessions := hub.NewSessions(e.hub, e.st, k)
	deleted := make(chan error, 1)
	go func() { deleted <- sessions.Delete(ctx, owner, id) }()
	<-k.entered
	_, live := e.hub.Lookup(id)
	require.False(t, live, "the session's actor stopped before its sandbox is killed")

	started, helloed := make(chan struct{}), make(chan error, 1)
	go func() {
		close(started)
		_, _, err := e.hub.Hello(ctx, id, hello(newSub()))
		helloed <- err
	}()
	<-started
	// Without the wait, the hello would start an actor at once (and load the session
	// before its rows are gone): give it the chance, then let the deletion go on.
	for range 1000 {
		if _, live := e.hub.Lookup(id); live {
			require.NoError(t, <-helloed)
			t.Fatal("a hello started an actor for a session being deleted")
		}
		runtime.Gosched()
	}
	close(k.release)
	require.NoError(t, <-deleted)
	require.ErrorIs(t, <-helloed, conversation.ErrDeleted)
	require.ErrorIs(t, sessions.Delete(ctx, owner, id), hub.ErrNotFound)
}

// A deletion that fails (the sandbox could not be killed) keeps the session: it can be
// used and deleted again.
func TestFailedDeletionKeepsTheSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, script.New(script.Text("ok")))
	ctx := testCtx(t)
	id := uuid.New()
	_, _, err := e.hub.Hello(ctx, id, hello(newSub()))
	require.NoError(t, err)

	k := newKiller()
	k.fail = errors.New("the sandbox provider is down")
	close(k.release)
	err = hub.NewSessions(e.hub, e.st, k).Delete(ctx, owner, id)
	var ce *conversation.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, conversation.CodeInternal, ce.Code)

	_, _, err = e.hub.Hello(ctx, id, hello(newSub()))
	require.NoError(t, err, "the session is still there")
	require.ErrorIs(t, hub.NewSessions(e.hub, e.st, nil).Delete(ctx, "mallory", id), hub.ErrNotFound)
	require.NoError(t, hub.NewSessions(e.hub, e.st, nil).Delete(ctx, owner, id))
}

// A deletion that arrives while the hub shuts down is refused with a code that says so,
// not an unexplained fault, and leaves the session as it was.
func TestDeletionDuringShutdownSaysSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, script.New(script.Text("ok")))
	ctx := testCtx(t)
	id := uuid.New()
	_, _, err := e.hub.Hello(ctx, id, hello(newSub()))
	require.NoError(t, err)
	require.NoError(t, e.hub.Shutdown(ctx))

	err = hub.NewSessions(e.hub, e.st, nil).Delete(ctx, owner, id)
	var ce *conversation.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, conversation.CodeInternal, ce.Code)
	require.Contains(t, ce.Message, "shutting down")
	sess, err := e.st.SessionGet(ctx, id)
	require.NoError(t, err)
	require.Nil(t, sess.DeletedAt, "the session is kept")
}

// A deleted session leaves no workspace: neither its current sandbox's nor that of one
// it had before (lost, and replaced), which the session no longer names. Another
// session's sandbox is untouched.
func TestDeletionRemovesEveryWorkspace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, script.New(script.Text("ok")))
	ctx := testCtx(t)
	dir := t.TempDir()
	p, err := local.New(dir)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	sbs := agent.NewSandboxes(p, e.st, nil)
	id, other := uuid.New(), uuid.New()
	for _, s := range []uuid.UUID{id, other} {
		_, _, err := e.hub.Hello(ctx, s, hello(newSub()))
		require.NoError(t, err)
	}
	run := func(s uuid.UUID, command string) string {
		sb, _, err := sbs.Get(ctx, s)
		require.NoError(t, err)
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: command})
		require.NoError(t, err)
		require.Zero(t, res.ExitCode)
		return sb.ID()
	}
	lost := run(id, "echo old > file && chmod 000 .")
	require.NoError(t, p.Kill(ctx, lost)) // behind the session's back
	current := run(id, "echo new > file && sleep 1000 > /dev/null 2>&1 &")
	kept := run(other, "echo theirs > file")
	for _, sb := range []string{lost, current, kept} {
		require.DirExists(t, filepath.Join(dir, sb))
	}

	require.NoError(t, hub.NewSessions(e.hub, e.st, sbs).Delete(ctx, owner, id))
	require.NoDirExists(t, filepath.Join(dir, lost))
	require.NoDirExists(t, filepath.Join(dir, current))
	require.FileExists(t, filepath.Join(p.Workspace(kept), "file"), "another session's workspace stays")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
}
