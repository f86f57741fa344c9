package local_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/local"
)

// chatdEnv, set to a directory, makes the test binary a chatd that runs sandbox commands
// there and waits to be killed (fakeChatd), so that a test can kill it like a crash.
const chatdEnv = "CHATD_LOCAL_TEST_CHATD"

// The commands fakeChatd runs. Sandbox a's runs until chatd dies, with children that stay
// in its group (one under nohup, one with its environment cleared) and one that leaves it
// with setsid. Sandbox b's ends at once and leaves a child with its environment cleared:
// only the record names it. Each writes the pids to files in its workspace.
const (
	commandA = `sleep 1000 > /dev/null 2>&1 & echo $! > bg
nohup sleep 1000 > /dev/null 2>&1 & echo $! > nohup
setsid sleep 1000 > /dev/null 2>&1 & echo $! > setsid
env -i sleep 1000 > /dev/null 2>&1 & echo $! > noenv
echo $$ > leader
echo ready
wait`
	commandB = `env -i sleep 1000 > /dev/null 2>&1 & echo $! > noenv; echo $$ > leader`
)

// fakeChatd is chatd as far as sandboxes go: it runs commandA and commandB in two sandboxes
// of dir, prints their ids once both run, and waits to be killed.
func fakeChatd(dir string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "fake chatd:", err)
		return 1
	}
	p, err := local.New(dir)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	a, err := p.Create(ctx)
	if err != nil {
		return fail(err)
	}
	b, err := p.Create(ctx)
	if err != nil {
		return fail(err)
	}
	if _, err := b.Exec(ctx, sandbox.ExecRequest{Command: commandB}); err != nil {
		return fail(err)
	}
	ready := &firstWrite{c: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := a.Exec(ctx, sandbox.ExecRequest{Command: commandA, Output: ready})
		done <- err
	}()
	select {
	case <-ready.c:
	case err := <-done:
		return fail(fmt.Errorf("command a ended: %v", err))
	}
	fmt.Println(a.ID(), b.ID())
	return fail(fmt.Errorf("command a ended: %v", <-done))
}

// firstWrite closes c at the first write.
type firstWrite struct {
	once sync.Once
	c    chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.c) })
	return len(p), nil
}

// gone reports whether pid has ended (a zombie waits for a parent to reap it).
func gone(pid int) bool {
	s := procState(pid)
	return s == "" || s == "Z"
}

// procStart reads the start time of pid (0 when it is gone).
func procStart(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	start, _ := strconv.ParseUint(f[19], 10, 64)
	return start
}

// sandboxProcesses lists the live processes in groups or whose environment names a
// sandbox under dir.
func sandboxProcesses(t *testing.T, dir string, groups ...int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || gone(pid) {
			continue
		}
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		marked := strings.Contains("\x00"+string(env), "\x00CHATD_SANDBOX="+dir+"/")
		pgid, err := syscall.Getpgid(pid)
		if marked || (err == nil && containsInt(groups, pgid)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A chatd killed with SIGKILL leaves nothing of its sandboxes running once the next one
// has started: the command itself dies with it (parent-death signal), and the next one's
// sweep kills what commands left in the background, whether it stayed in the command's
// group, left it (setsid) or cleared its environment.
func TestNothingOutlivesAKilledChatd(t *testing.T) {
	dir := t.TempDir()
	chatd := exec.Command(os.Args[0], "-test.run=^$")
	chatd.Env = append(os.Environ(), chatdEnv+"="+dir)
	chatd.Stderr = os.Stderr
	out, err := chatd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, chatd.Start())
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		lines <- sc.Text()
	}()
	var ids []string
	select {
	case line := <-lines:
		ids = strings.Fields(line)
	case <-time.After(30 * time.Second):
		_ = chatd.Process.Kill()
		_ = chatd.Wait()
		t.Fatal("the fake chatd did not get ready")
	}
	require.Len(t, ids, 2, "the fake chatd failed")
	wsA, wsB := filepath.Join(dir, ids[0], "workspace"), filepath.Join(dir, ids[1], "workspace")
	leader := readInt(t, filepath.Join(wsA, "leader"))
	left := map[string]int{
		"a: background": readInt(t, filepath.Join(wsA, "bg")),
		"a: nohup":      readInt(t, filepath.Join(wsA, "nohup")),
		"a: setsid":     readInt(t, filepath.Join(wsA, "setsid")),
		"a: no env":     readInt(t, filepath.Join(wsA, "noenv")),
		"b: no env":     readInt(t, filepath.Join(wsB, "noenv")),
	}
	groupA, groupB := leader, readInt(t, filepath.Join(wsB, "leader"))
	require.Positive(t, groupA)
	require.Positive(t, groupB)
	// Should the sweep fail, the test still ends what it made.
	t.Cleanup(func() {
		for _, pid := range left {
			if start := procStart(pid); start != 0 && !gone(pid) {
				if p, err := os.FindProcess(pid); err == nil && procStart(pid) == start {
					_ = p.Kill()
				}
			}
		}
	})
	for name, pid := range left {
		require.Positive(t, pid, name)
		require.False(t, gone(pid), name)
	}
	// $! is known before the child has run setsid(2).
	setsid := left["a: setsid"]
	waitFor(t, "setsid to leave the command's group", func() bool {
		pgid, err := syscall.Getpgid(setsid)
		return err == nil && pgid == setsid
	})

	require.NoError(t, chatd.Process.Kill())
	require.Error(t, chatd.Wait())

	waitFor(t, "the command to die with chatd", func() bool { return gone(leader) })
	for name, pid := range left {
		require.False(t, gone(pid), "%s: the parent-death signal does not reach the background", name)
	}

	p, err := local.New(dir)
	require.NoError(t, err)
	swept, err := p.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, local.Swept{Sandboxes: 2, Groups: 3, Processes: 5}, swept)
	for name, pid := range left {
		require.True(t, gone(pid), "%s: the sweep returns once what it killed has ended", name)
	}
	require.Empty(t, sandboxProcesses(t, dir, groupA, groupB, setsid), "nothing of the sandboxes is left")
	records, err := filepath.Glob(filepath.Join(dir, "*", ".processes-*"))
	require.NoError(t, err)
	require.Empty(t, records, "the dead chatd's records are removed")

	swept, err = p.Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, swept, "a second sweep finds nothing")
	sb, err := p.Connect(context.Background(), ids[0])
	require.NoError(t, err)
	_, err = sb.Exec(context.Background(), sandbox.ExecRequest{Command: "test -f bg"})
	require.NoError(t, err, "the sandboxes themselves are kept")
}

// Processes of a live chatd sharing the directory (here another provider of this process)
// are not the sweep's.
func TestSweepLeavesALiveChatdsProcesses(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	live, err := local.New(dir)
	require.NoError(t, err)
	sb, err := live.Create(ctx)
	require.NoError(t, err)
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "sleep 1000 > /dev/null 2>&1 & echo $! > bg"})
	require.NoError(t, err)
	bg := readInt(t, filepath.Join(live.Workspace(sb.ID()), "bg"))
	t.Cleanup(func() { _ = live.Kill(ctx, sb.ID()) })

	next, err := local.New(dir)
	require.NoError(t, err)
	swept, err := next.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, swept)
	require.Equal(t, "S", procState(bg))

	require.NoError(t, live.Kill(ctx, sb.ID()))
	waitFor(t, "the process to be gone", func() bool { return gone(bg) })
}
