package local_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/local"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(chatdEnv); dir != "" {
		os.Exit(fakeChatd(dir))
	}
	goleak.VerifyTestMain(m)
}

func newProvider(t *testing.T) *local.Provider {
	t.Helper()
	p, err := local.New(t.TempDir())
	require.NoError(t, err)
	return p
}

// waitFor polls cond on a ticker until it holds (processes are real: there is no event
// to wait on), failing after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// procState returns the state letter of a process ("" when it no longer exists).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return strings.Fields(s[i+1:])[0]
}

// groupPIDs lists the processes of process group pgid.
func groupPIDs(t *testing.T, pgid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killPending reports whether pid has a SIGKILL waiting to be delivered: the signal is
// pending from the moment it is sent, before the process is scheduled to die of it.
func killPending(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		name, mask, ok := strings.Cut(line, ":")
		if !ok || (name != "SigPnd" && name != "ShdPnd") {
			continue
		}
		bits, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
		require.NoError(t, err)
		if bits&(1<<(syscall.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1 // caught mid-write
	}
	return n
}

func TestExecOutputAndExitCode(t *testing.T) {
	p := newProvider(t)
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Command: "echo hello; echo oops >&2; pwd; exit 3", Output: &out})
	require.NoError(t, err)
	require.Equal(t, 3, res.ExitCode)
	require.False(t, res.TimedOut)
	require.Equal(t, "hello\noops\n"+p.Workspace(sb.ID())+"\n", out.String())

	// Files persist between commands of one sandbox.
	_, err = sb.Exec(context.Background(), sandbox.ExecRequest{Command: "echo kept > notes.txt"})
	require.NoError(t, err)
	out.Reset()
	_, err = sb.Exec(context.Background(), sandbox.ExecRequest{Command: "cat notes.txt", Output: &out})
	require.NoError(t, err)
	require.Equal(t, "kept\n", out.String())
}

func TestExecTimeoutKillsTheWholeGroup(t *testing.T) {
	p := newProvider(t)
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	ws := p.Workspace(sb.ID())
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "sleep 30 & echo $! > child; wait",
		Timeout: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	require.True(t, res.TimedOut)
	require.Equal(t, -1, res.ExitCode)
	child := readInt(t, filepath.Join(ws, "child"))
	require.Positive(t, child)
	waitFor(t, "the background child to die", func() bool { s := procState(child); return s == "" || s == "Z" })
}

// Cancelling the context kills the command and what it started: the child process is gone.
func TestExecCancelKillsTheProcess(t *testing.T) {
	p := newProvider(t)
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	ws := p.Workspace(sb.ID())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "echo $$ > pid; sleep 30"})
		done <- err
	}()
	waitFor(t, "the command to start", func() bool { return readInt(t, filepath.Join(ws, "pid")) > 0 })
	pid := readInt(t, filepath.Join(ws, "pid"))
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	waitFor(t, "the process to be gone", func() bool { s := procState(pid); return s == "" || s == "Z" })
}

// A command's parent-death signal fires when the thread that forked it ends, and threads
// end while chatd runs: the Go runtime ends the thread of any goroutine that returns while
// locked to it. Many threads ending that way, while commands run, kill none of them.
func TestCommandsOutliveChatdsThreads(t *testing.T) {
	p := newProvider(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const commands = 8
	done := make(chan error, commands)
	var pidFiles []string
	for range commands {
		sb, err := p.Create(ctx)
		require.NoError(t, err)
		pidFiles = append(pidFiles, filepath.Join(p.Workspace(sb.ID()), "pid"))
		go func() {
			_, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "echo $$ > pid; sleep 1000"})
			done <- err
		}()
	}
	var pids []int
	for _, f := range pidFiles {
		waitFor(t, "a command to start", func() bool { return readInt(t, f) > 0 })
		pids = append(pids, readInt(t, f))
	}

	// More threads than the runtime keeps idle: any that forked a command, had it been an
	// ordinary one, is among them.
	const n = 64
	tids := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			runtime.LockOSThread()
			tids <- unix.Gettid()
		})
	}
	wg.Wait()
	close(tids)
	for tid := range tids {
		if tid == os.Getpid() {
			continue // the main thread is parked for good instead of ending
		}
		waitFor(t, "a locked thread to end", func() bool {
			_, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid))
			return os.IsNotExist(err)
		})
	}
	for _, pid := range pids {
		require.Equal(t, "S", procState(pid), "the command still runs")
		require.False(t, killPending(t, pid), "and is not about to die")
	}

	cancel()
	for range commands {
		require.ErrorIs(t, <-done, context.Canceled)
	}
}

// Pause really stops the processes (the kernel reports them stopped and their counter does
// not move), resume lets them continue, kill ends them and the sandbox is gone for good.
func TestPauseResumeKill(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	sb, err := p.Create(ctx)
	require.NoError(t, err)
	ws := p.Workspace(sb.ID())
	count := filepath.Join(ws, "count")

	var wg sync.WaitGroup
	var res sandbox.ExecResult
	wg.Go(func() {
		res, _ = sb.Exec(ctx, sandbox.ExecRequest{Command: `echo $$ > pid; i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; sleep 0.005; done`})
	})
	waitFor(t, "the counter to run", func() bool { return readInt(t, count) > 3 })
	pgid := readInt(t, filepath.Join(ws, "pid"))

	require.NoError(t, p.Pause(ctx, sb.ID()))
	require.NoError(t, p.Pause(ctx, sb.ID()), "pausing twice is fine")
	waitFor(t, "every process of the group to be stopped", func() bool {
		pids := groupPIDs(t, pgid)
		for _, pid := range pids {
			// A child that was being forked as the signal came may have run to its end
			// and wait, a zombie, for its stopped parent (Z); a shell that vforked a
			// child the signal stopped before its exec waits on it (D). None progresses.
			if s := procState(pid); s != "T" && s != "Z" && s != "D" {
				return false
			}
		}
		return len(pids) > 0
	})
	frozen := readInt(t, count)
	tick := time.NewTicker(20 * time.Millisecond)
	for range 10 {
		<-tick.C
		require.Equal(t, frozen, readInt(t, count), "a paused sandbox made progress")
	}
	tick.Stop()
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
	require.ErrorIs(t, err, sandbox.ErrPaused)

	again, err := p.Connect(ctx, sb.ID())
	require.NoError(t, err)
	require.Equal(t, sb.ID(), again.ID())
	waitFor(t, "the counter to move again", func() bool { return readInt(t, count) > frozen })

	require.NoError(t, p.Kill(ctx, sb.ID()))
	wg.Wait()
	require.Equal(t, -1, res.ExitCode)
	waitFor(t, "the group to be gone", func() bool { return len(groupPIDs(t, pgid)) == 0 })

	_, err = p.Connect(ctx, sb.ID())
	require.ErrorIs(t, err, sandbox.ErrGone)
	require.ErrorIs(t, p.Pause(ctx, sb.ID()), sandbox.ErrGone)
	require.NoError(t, p.Kill(ctx, sb.ID()), "killing twice is fine")
	require.FileExists(t, count, "a killed sandbox keeps its directory")
}

// Another process (a restarted chatd) finds sandboxes by id: live ones can be used, killed
// ones stay gone.
func TestSandboxesOutliveTheProvider(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	p1, err := local.New(dir)
	require.NoError(t, err)
	live, err := p1.Create(ctx)
	require.NoError(t, err)
	_, err = live.Exec(ctx, sandbox.ExecRequest{Command: "echo 1 > f"})
	require.NoError(t, err)
	dead, err := p1.Create(ctx)
	require.NoError(t, err)
	require.NoError(t, p1.Kill(ctx, dead.ID()))

	p2, err := local.New(dir)
	require.NoError(t, err)
	sb, err := p2.Connect(ctx, live.ID())
	require.NoError(t, err)
	var out bytes.Buffer
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "cat f", Output: &out})
	require.NoError(t, err)
	require.Equal(t, "1\n", out.String())
	_, err = p2.Connect(ctx, dead.ID())
	require.ErrorIs(t, err, sandbox.ErrGone)
	for _, bad := range []string{"", "..", "../x", "nope"} {
		_, err = p2.Connect(ctx, bad)
		require.ErrorIs(t, err, sandbox.ErrGone, bad)
	}
}

// A command may leave processes running in the background (a dev server, say): pausing,
// resuming and killing the sandbox reach them too.
func TestBackgroundProcessesFollowTheSandbox(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	sb, err := p.Create(ctx)
	require.NoError(t, err)
	ws := p.Workspace(sb.ID())
	count := filepath.Join(ws, "count")
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		Command: `(i=0; while :; do i=$((i+1)); echo $i > count.tmp; mv count.tmp count; sleep 0.005; done) > /dev/null 2>&1 & echo $! > bgpid`,
	})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode)
	bg := readInt(t, filepath.Join(ws, "bgpid"))
	waitFor(t, "the background counter to run", func() bool { return readInt(t, count) > 3 })

	require.NoError(t, p.Pause(ctx, sb.ID()))
	waitFor(t, "the background process to be stopped", func() bool { s := procState(bg); return s == "T" || s == "D" })
	frozen := readInt(t, count)
	tick := time.NewTicker(20 * time.Millisecond)
	for range 5 {
		<-tick.C
		require.Equal(t, frozen, readInt(t, count))
	}
	tick.Stop()

	_, err = p.Connect(ctx, sb.ID())
	require.NoError(t, err)
	waitFor(t, "the background counter to move again", func() bool { return readInt(t, count) > frozen })

	require.NoError(t, p.Kill(ctx, sb.ID()))
	waitFor(t, "the background process to be gone", func() bool { s := procState(bg); return s == "" || s == "Z" })
}

// Shutting the provider down ends the processes it started, paused ones too, and leaves
// the sandbox usable for the next process.
func TestCloseEndsProcessesButKeepsSandboxes(t *testing.T) {
	dir := t.TempDir()
	p, err := local.New(dir)
	require.NoError(t, err)
	ctx := context.Background()
	sb, err := p.Create(ctx)
	require.NoError(t, err)
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: `sleep 1000 > /dev/null 2>&1 & echo $! > bgpid`})
	require.NoError(t, err)
	bg := readInt(t, filepath.Join(p.Workspace(sb.ID()), "bgpid"))
	require.NoError(t, p.Pause(ctx, sb.ID()))
	waitFor(t, "the process to be stopped", func() bool { s := procState(bg); return s == "T" || s == "D" })

	p.Close()
	waitFor(t, "the process to be gone", func() bool { s := procState(bg); return s == "" || s == "Z" })
	next, err := local.New(dir)
	require.NoError(t, err)
	again, err := next.Connect(ctx, sb.ID())
	require.NoError(t, err)
	_, err = again.Exec(ctx, sandbox.ExecRequest{Command: "true"})
	require.NoError(t, err)
}

// A command sees a minimal environment, never chatd's: that holds the database URL and
// the model API keys, and the command is whatever the model asked for.
func TestCommandsDoNotSeeChatdsEnvironment(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://user:secret@db/chatd")
	t.Setenv("ANTHROPIC_API_KEY", "sk-test-secret")
	p := newProvider(t)
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	var out bytes.Buffer
	_, err = sb.Exec(context.Background(), sandbox.ExecRequest{Command: "env", Output: &out})
	require.NoError(t, err)
	env := out.String()
	require.NotContains(t, env, "secret")
	require.NotContains(t, env, "DATABASE_URL")
	require.Contains(t, env, "HOME="+p.Workspace(sb.ID())+"\n")
	require.Contains(t, env, "PATH=")
	// The marker for the start-up sweep: the sandbox's directory, and chatd.
	require.Contains(t, env, "CHATD_SANDBOX="+filepath.Dir(p.Workspace(sb.ID()))+"\n")
	require.Regexp(t, "(?m)^CHATD_SANDBOX_OWNER="+strconv.Itoa(os.Getpid())+":[0-9]+$", env)
}

// A background process that ended leaves nothing to signal: the sandbox forgets its group
// instead of signalling an id someone else may hold by now.
func TestEndedBackgroundGroupsAreForgotten(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	sb, err := p.Create(ctx)
	require.NoError(t, err)
	ws := p.Workspace(sb.ID())
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: `sleep 0.1 > /dev/null 2>&1 & echo $! > bgpid`})
	require.NoError(t, err)
	bg := readInt(t, filepath.Join(ws, "bgpid"))
	waitFor(t, "the background process to end", func() bool { s := procState(bg); return s == "" || s == "Z" })
	require.NoError(t, p.Pause(ctx, sb.ID()))
	_, err = p.Connect(ctx, sb.ID())
	require.NoError(t, err)
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
	require.NoError(t, err)
}

// Remove ends the sandbox's processes, those left in the background too, and deletes its
// directory, also what the sandbox made hard to delete; what its links point to stays.
// Another provider on the directory (a restarted chatd) removes one it did not make.
func TestRemoveKillsAndDeletes(t *testing.T) {
	dir := t.TempDir()
	p, err := local.New(dir)
	require.NoError(t, err)
	ctx := context.Background()
	outside := filepath.Join(t.TempDir(), "precious")
	require.NoError(t, os.WriteFile(outside, []byte("keep"), 0o644))
	sb, err := p.Create(ctx)
	require.NoError(t, err)
	ws := p.Workspace(sb.ID())
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: `mkdir -p d/e && touch d/e/f && chmod 000 d/e d && ln -s ` + outside + ` link && (while :; do sleep 0.01; done) > /dev/null 2>&1 & echo $! > bgpid`})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode)
	bg := readInt(t, filepath.Join(ws, "bgpid"))
	require.NotEmpty(t, procState(bg))

	require.NoError(t, p.Remove(ctx, sb.ID()))
	waitFor(t, "the background process to be gone", func() bool { s := procState(bg); return s == "" || s == "Z" })
	require.NoDirExists(t, filepath.Join(dir, sb.ID()))
	_, err = p.Connect(ctx, sb.ID())
	require.ErrorIs(t, err, sandbox.ErrGone)
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
	require.ErrorIs(t, err, sandbox.ErrGone)
	require.NoError(t, p.Remove(ctx, sb.ID()), "removing twice is fine")
	b, err := os.ReadFile(outside)
	require.NoError(t, err)
	require.Equal(t, "keep", string(b))

	other, err := p.Create(ctx)
	require.NoError(t, err)
	p2, err := local.New(dir)
	require.NoError(t, err)
	require.NoError(t, p2.Remove(ctx, other.ID()))
	require.NoDirExists(t, filepath.Join(dir, other.ID()))
	for _, bad := range []string{"", ".", "..", "../x"} {
		require.NoError(t, p2.Remove(ctx, bad), bad)
	}
	require.DirExists(t, dir)
}
