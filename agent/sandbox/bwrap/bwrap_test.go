package bwrap_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/bwrap"
)

// chatdEnv makes the test binary a stand-in chatd (fakeChatd) for TestDiesWithChatd.
const chatdEnv = "BWRAP_TEST_FAKE_CHATD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(chatdEnv); dir != "" {
		os.Exit(fakeChatd(dir))
	}
	if what := os.Getenv(helperEnv); what != "" {
		os.Exit(helper(what, os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// fakeChatd runs a command that leaves a process in the background, prints the pids of
// the sandbox's processes, and waits to be killed.
func fakeChatd(dir string) int {
	p, err := bwrap.New(bwrap.Config{Dir: dir, Bwrap: os.Getenv("CHATD_BWRAP")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sb, err := p.Create(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		_, _ = sb.Exec(context.Background(), sandbox.ExecRequest{Command: "sleep 1000 & sleep 1000"})
	}()
	for {
		// bwrap's init, sh and the two sleeps.
		if procs := p.Processes(sb.ID()); len(procs) >= 4 {
			var pids []string
			for pid := range procs {
				pids = append(pids, strconv.Itoa(pid))
			}
			fmt.Println(strings.Join(pids, " "))
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {}
}

// openTempDir is t.TempDir made traversable (not listable) by others: when the tests
// run as root, bwrap runs as nobody and must reach the workspaces under it.
func openTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	require.NoError(t, os.Chmod(dir, 0o711))
	return dir
}

func newProvider(t *testing.T, cfg bwrap.Config) *bwrap.Provider {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = openTempDir(t)
	}
	cfg.Bwrap = os.Getenv("CHATD_BWRAP") // make test-go sets it; else bwrap in PATH
	p, err := bwrap.New(cfg)
	require.NoError(t, err, "bubblewrap must be installed (scripts/bwrap.sh) and able to start a sandbox")
	t.Cleanup(p.Close)
	return p
}

// run runs command in sb as the shell tool would, returning its output and result.
func run(t *testing.T, sb sandbox.Sandbox, command string) (string, sandbox.ExecResult) {
	t.Helper()
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Command: command, Timeout: time.Minute, Output: &out})
	require.NoError(t, err)
	return out.String(), res
}

// waitFor polls cond until it holds (processes are real: there is no event to wait on),
// failing after a deadline.
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

func TestRunsInWorkspace(t *testing.T) {
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	out, res := run(t, sb, "pwd; echo $HOME; echo hello > f; cat f; exit 3")
	require.Equal(t, 3, res.ExitCode, out)
	require.Equal(t, "/workspace\n/workspace\nhello\n", out)
	b, err := os.ReadFile(filepath.Join(p.Workspace(sb.ID()), "f"))
	require.NoError(t, err)
	require.Equal(t, "hello\n", string(b))

	// A later call (another process, another namespace) sees the same workspace.
	sb2, err := p.Connect(context.Background(), sb.ID())
	require.NoError(t, err)
	out, res = run(t, sb2, "cat f")
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, "hello\n", out)
}

func TestNotFound(t *testing.T) {
	_, err := bwrap.New(bwrap.Config{Dir: t.TempDir(), Bwrap: filepath.Join(t.TempDir(), "bwrap")})
	require.ErrorIs(t, err, bwrap.ErrNotFound)
	require.Contains(t, err.Error(), "bubblewrap")

	t.Setenv("PATH", t.TempDir())
	_, err = bwrap.New(bwrap.Config{Dir: t.TempDir()})
	require.ErrorIs(t, err, bwrap.ErrNotFound)
}

// chatd dies without a word (SIGKILL): everything in its sandboxes dies with it, also
// what a command left in the background.
func TestDiesWithChatd(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), chatdEnv+"="+openTempDir(t))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var line [256]byte
	n, err := stdout.Read(line[:])
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the stand-in chatd said nothing: %v", err)
	}
	pids := strings.Fields(string(line[:n]))
	require.GreaterOrEqual(t, len(pids), 4, "%q", line[:n])
	for _, pid := range pids {
		require.NotEqual(t, "", procState(pid), "process %s runs", pid)
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	for _, pid := range pids {
		waitFor(t, "process "+pid+" to die", func() bool { st := procState(pid); return st == "" || st == "Z" })
	}
}

// procState is a process's state letter ("" when it is gone).
func procState(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

func TestTimeoutKillsEverything(t *testing.T) {
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Command: "sleep 100 & sleep 100", Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	require.True(t, res.TimedOut)
	require.Equal(t, -1, res.ExitCode)
	require.Empty(t, p.Processes(sb.ID()))
}

// The escape attempts: each is run as the shell tool runs a command, and each must fail.

func TestEscapeReadChatdEnvironment(t *testing.T) {
	secret := fmt.Sprintf("secret-%d", time.Now().UnixNano())
	t.Setenv("CHATD_TEST_SECRET", secret)
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	pid := strconv.Itoa(os.Getpid())
	out, res := run(t, sb, "cat /proc/"+pid+"/environ")
	require.NotEqual(t, 0, res.ExitCode, out)
	require.Contains(t, out, "No such file")
	require.NotContains(t, out, secret)
	// Nor any process's it can see, nor its own environment.
	out, _ = run(t, sb, "ls -d /proc/[0-9]*; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; env")
	require.NotContains(t, out, secret)
	require.NotContains(t, out, "/proc/"+pid+"\n", "chatd's process is visible")
}

func TestEscapeReadChatdData(t *testing.T) {
	// chatd's data: readable by anyone on the host, so only the sandbox keeps it out.
	data := t.TempDir()
	require.NoError(t, os.Chmod(data, 0o755))
	file := filepath.Join(data, "chatd.conf")
	require.NoError(t, os.WriteFile(file, []byte("DATABASE_URL=postgres://secret\n"), 0o644))
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	for _, cmd := range []string{"cat " + file, "ls " + data, "cat /proc/1/root" + file} {
		out, res := run(t, sb, cmd)
		require.NotEqual(t, 0, res.ExitCode, "%s: %s", cmd, out)
		require.NotContains(t, out, "postgres://secret", cmd)
	}
	// chatd's working directory is not there either.
	wd, err := os.Getwd()
	require.NoError(t, err)
	out, res := run(t, sb, "ls "+wd)
	require.NotEqual(t, 0, res.ExitCode, out)
}

func TestEscapeInheritedDescriptor(t *testing.T) {
	// A descriptor chatd inherited without close-on-exec (syscall.Open sets none).
	file := filepath.Join(t.TempDir(), "inherited")
	require.NoError(t, os.WriteFile(file, []byte("inherited-secret"), 0o644))
	fd, err := syscall.Open(file, syscall.O_RDONLY, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	n := strconv.Itoa(fd)
	out, _ := run(t, sb, "cat /proc/self/fd/"+n+"; cat <&"+n+"; ls -l /proc/self/fd")
	require.NotContains(t, out, "inherited-secret")
	require.NotContains(t, out, "inherited", "the descriptor is open in the sandbox")
}

func TestEscapeSignalChatd(t *testing.T) {
	got := make(chan os.Signal, 1)
	signal.Notify(got, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(got)
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	pid := strconv.Itoa(os.Getpid())
	out, res := run(t, sb, "kill -0 "+pid)
	require.NotEqual(t, 0, res.ExitCode, out)
	require.Contains(t, out, "No such process")
	out, res = run(t, sb, "kill -TERM "+pid+"; kill -HUP "+pid+"; kill -TERM -1")
	require.NotEqual(t, 0, res.ExitCode, out)
	select {
	case s := <-got:
		t.Fatalf("the test process (chatd) received %v from the sandbox", s)
	default:
	}
}

func TestEscapeReadOtherWorkspace(t *testing.T) {
	p := newProvider(t, bwrap.Config{})
	a, err := p.Create(context.Background())
	require.NoError(t, err)
	b, err := p.Create(context.Background())
	require.NoError(t, err)
	_, res := run(t, b, "echo b-secret > notes")
	require.Equal(t, 0, res.ExitCode)
	other := p.Workspace(b.ID())
	for _, cmd := range []string{"cat " + other + "/notes", "ls " + filepath.Dir(other), "cat ../*/workspace/notes"} {
		out, res := run(t, a, cmd)
		require.NotEqual(t, 0, res.ExitCode, "%s: %s", cmd, out)
		require.NotContains(t, out, "b-secret", cmd)
	}
	out, _ := run(t, a, "ls -a /workspace/.. /")
	require.NotContains(t, out, b.ID())
	require.NotContains(t, out, a.ID())
}

func TestEscapeWriteOutsideWorkspace(t *testing.T) {
	// A host directory anyone may write to: only the sandbox keeps writes out.
	host := t.TempDir()
	require.NoError(t, os.Chmod(host, 0o777))
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	out, res := run(t, sb, "touch /usr/evil")
	require.NotEqual(t, 0, res.ExitCode, out)
	require.Contains(t, out, "Read-only file system")
	out, res = run(t, sb, "echo x >> /etc/passwd")
	require.NotEqual(t, 0, res.ExitCode, out)
	// bwrap's own root and /dev are tmpfs, in memory and unbounded: read-only too.
	for _, cmd := range []string{"touch /evil", "touch /dev/evil", "mkdir /evil"} {
		out, res = run(t, sb, cmd)
		require.NotEqual(t, 0, res.ExitCode, "%s: %s", cmd, out)
		require.Contains(t, out, "Read-only file system", cmd)
	}
	// The sandbox's /tmp is its own: what it writes there never reaches the host.
	_, _ = run(t, sb, "mkdir -p "+host+" && echo x > "+host+"/evil; echo x > /tmp/evil-"+sb.ID())
	require.NoFileExists(t, filepath.Join(host, "evil"))
	require.NoFileExists(t, filepath.Join(os.TempDir(), "evil-"+sb.ID()))
	require.NoFileExists(t, "/usr/evil")
	// Nor to the next command.
	out, res = run(t, sb, "cat /tmp/evil-"+sb.ID())
	require.NotEqual(t, 0, res.ExitCode, out)
}

func TestEscapeNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	accepted := make(chan struct{}, 10)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			accepted <- struct{}{}
		}
	}()
	defer wg.Wait()
	defer ln.Close()
	connect := "bash -c 'echo hi > /dev/tcp/127.0.0.1/" + port + "'"

	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	out, res := run(t, sb, connect)
	require.NotEqual(t, 0, res.ExitCode, out)
	require.Contains(t, out, "Connection refused") // the sandbox's own, empty loopback

	// The control: with the network on, the same command reaches the listener, so the
	// refusal above is the sandbox's doing.
	pn := newProvider(t, bwrap.Config{Network: true})
	sbn, err := pn.Create(context.Background())
	require.NoError(t, err)
	out, res = run(t, sbn, connect)
	require.Equal(t, 0, res.ExitCode, out)
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener saw no connection from the networked sandbox")
	}
	select {
	case <-accepted:
		t.Fatal("the listener saw a connection from the sandbox without network")
	default:
	}
}

func TestEscapeForkBomb(t *testing.T) {
	const limit = 40
	p := newProvider(t, bwrap.Config{Limits: &bwrap.Limits{Processes: limit}})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	done := make(chan sandbox.ExecResult, 1)
	var out bytes.Buffer
	go func() {
		res, _ := sb.Exec(context.Background(), sandbox.ExecRequest{Command: "b() { b | b; }; while :; do b; done", Timeout: 10 * time.Second, Output: &out})
		done <- res
	}()
	most := 0
	var res sandbox.ExecResult
	for ended := false; !ended; {
		most = max(most, len(p.Processes(sb.ID())))
		select {
		case res = <-done:
			ended = true
		default:
		}
	}
	t.Logf("at most %d processes seen; result %+v", most, res)
	require.LessOrEqual(t, most, limit, "RLIMIT_NPROC did not bound the bomb")
	// It ran into the limit: forks failed (the shell ends when it cannot fork).
	require.Contains(t, out.String(), "Cannot fork")
	waitFor(t, "the namespace to end", func() bool { return len(p.Processes(sb.ID())) == 0 })
	require.NotEqual(t, 0, res.ExitCode)
	// chatd is fine: it still starts processes, and the sandbox still runs commands.
	require.NoError(t, exec.Command("true").Run())
	alive, r := run(t, sb, "echo alive")
	require.Equal(t, 0, r.ExitCode)
	require.Equal(t, "alive\n", alive)
}

func TestEscapeFillDisk(t *testing.T) {
	const fsize, tmp = 1 << 20, 4 << 20
	p := newProvider(t, bwrap.Config{Limits: &bwrap.Limits{FileSize: fsize, TmpSize: tmp}})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	out, res := run(t, sb, "head -c 100000000 /dev/zero > big")
	require.Equal(t, 128+int(syscall.SIGXFSZ), res.ExitCode, out)
	require.Contains(t, out, "File size limit exceeded")
	require.Equal(t, "a process wrote past the largest file size, 1 MiB (SIGXFSZ, exit code 153)", res.Exceeded)
	fi, err := os.Stat(filepath.Join(p.Workspace(sb.ID()), "big"))
	require.NoError(t, err)
	require.LessOrEqual(t, fi.Size(), int64(fsize))
	require.Greater(t, fi.Size(), int64(0))
	// Many files under the limit each: /tmp is bounded as a whole.
	out, res = run(t, sb, "i=0; while [ $i -lt 20 ]; do i=$((i+1)); head -c 1000000 /dev/zero > /tmp/f$i || exit 7; done")
	require.Equal(t, 7, res.ExitCode, out)
	require.Contains(t, out, "No space left")
}

func TestPauseFreezesBackgroundProcess(t *testing.T) {
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	log := filepath.Join(p.Workspace(sb.ID()), "log")
	size := func() int64 {
		fi, err := os.Stat(log)
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), sandbox.ExecRequest{
			Command: "(while :; do echo x >> log; sleep 0.01; done) & wait",
		})
		done <- err
	}()
	waitFor(t, "the loop to write", func() bool { return size() > 0 })

	require.NoError(t, p.Pause(context.Background(), sb.ID()))
	procs := p.Stopped(sb.ID())
	require.NotEmpty(t, procs)
	for pid, st := range procs {
		require.True(t, st, "process %d is not stopped (%v)", pid, p.Processes(sb.ID()))
	}
	paused := size()
	select {
	case <-time.After(300 * time.Millisecond): // a window in which a running loop writes ~30 lines
	case err := <-done:
		t.Fatalf("the command ended while paused: %v", err)
	}
	require.Equal(t, paused, size(), "the file grew while the sandbox was paused")
	_, err = sb.Exec(context.Background(), sandbox.ExecRequest{Command: "true"})
	require.ErrorIs(t, err, sandbox.ErrPaused)

	_, err = p.Connect(context.Background(), sb.ID())
	require.NoError(t, err)
	waitFor(t, "the loop to write again", func() bool { return size() > paused })

	// Kill ends it all, paused or not.
	require.NoError(t, p.Pause(context.Background(), sb.ID()))
	require.NoError(t, p.Kill(context.Background(), sb.ID()))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return after Kill")
	}
	require.Empty(t, p.Processes(sb.ID()))
	_, err = p.Connect(context.Background(), sb.ID())
	require.True(t, errors.Is(err, sandbox.ErrGone))
	killedAt := size()
	_, err = sb.Exec(context.Background(), sandbox.ExecRequest{Command: "true"})
	require.ErrorIs(t, err, sandbox.ErrGone)
	require.Equal(t, killedAt, size())
}

func TestGoneSurvivesProvider(t *testing.T) {
	dir := openTempDir(t)
	p := newProvider(t, bwrap.Config{Dir: dir})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	require.NoError(t, p.Kill(context.Background(), sb.ID()))
	p2 := newProvider(t, bwrap.Config{Dir: dir})
	_, err = p2.Connect(context.Background(), sb.ID())
	require.ErrorIs(t, err, sandbox.ErrGone)
	_, err = p2.Connect(context.Background(), "bwrap-unknown")
	require.ErrorIs(t, err, sandbox.ErrGone)
	// A local provider's sandbox in the same directory is not one of ours.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "local-0123456789abcdef", "workspace"), 0o755))
	_, err = p2.Connect(context.Background(), "local-0123456789abcdef")
	require.ErrorIs(t, err, sandbox.ErrGone)
	for _, id := range []string{"bwrap-../x", "bwrap-", ".."} {
		_, err = p2.Connect(context.Background(), id)
		require.ErrorIs(t, err, sandbox.ErrGone, id)
	}
	require.True(t, strings.HasPrefix(sb.ID(), "bwrap-"))
}

// A sandbox directory another user could have made or can write to is refused: it could
// be a link to theirs, where they read every workspace or plant files in one.
func TestRefusesUnsafeDir(t *testing.T) {
	base := openTempDir(t)
	real := filepath.Join(base, "real")
	require.NoError(t, os.Mkdir(real, 0o711))
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(real, link))
	open := filepath.Join(base, "open")
	require.NoError(t, os.Mkdir(open, 0o700))
	require.NoError(t, os.Chmod(open, 0o1777))
	for dir, want := range map[string]string{link: "symbolic link", open: "writable by others"} {
		_, err := bwrap.New(bwrap.Config{Dir: dir, Bwrap: os.Getenv("CHATD_BWRAP")})
		require.ErrorContains(t, err, want, dir)
	}
	entries, err := os.ReadDir(real)
	require.NoError(t, err)
	require.Empty(t, entries, "a sandbox was made through the link")
}

// A Pause that cannot see every process stopped (here one whose state always reads R, as
// if the kernel never stopped it) fails, within its bound, and leaves the sandbox
// running, every process resumed: it never claims a pause it did not make. (A state of D
// would not do: a process in an uninterruptible wait with the SIGSTOP pending counts as
// stopped, and Pause sends it that SIGSTOP.)
func TestPauseFailsWhenAProcessWillNotStop(t *testing.T) {
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), sandbox.ExecRequest{Command: "sleep 1000 & sleep 1000"})
		done <- err
	}()
	// bwrap's init, sh and the two sleeps.
	waitFor(t, "the command to start", func() bool { return len(p.Processes(sb.ID())) >= 4 })
	stuck := 0
	for pid := range p.Processes(sb.ID()) {
		stuck = max(stuck, pid) // a sleep
	}
	p.SetFreeze(100*time.Millisecond, func(pid int) (byte, bool) {
		if pid == stuck {
			return 'R', true
		}
		return bwrap.ProcState(pid)
	})

	err = p.Pause(context.Background(), sb.ID())
	require.Error(t, err)
	require.Contains(t, err.Error(), "could not all be stopped")
	p.SetFreeze(time.Second, nil)
	procs := p.Processes(sb.ID())
	require.GreaterOrEqual(t, len(procs), 4)
	for pid, st := range procs {
		require.NotContains(t, "Tt", string(st), "process %d is left stopped", pid)
	}
	// Not paused: it runs commands, and a later Pause (the process unstuck) works.
	out, res := run(t, sb, "echo running")
	require.Equal(t, 0, res.ExitCode, out)
	require.NoError(t, p.Pause(context.Background(), sb.ID()))
	for pid, st := range p.Processes(sb.ID()) {
		require.Contains(t, "TtZ", string(st), "process %d is not stopped", pid)
	}
	require.NoError(t, p.Kill(context.Background(), sb.ID()))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return after Kill")
	}
}

// Processes that fork without end while Pause walks them are all stopped: a child forked
// during a pass is found by the next.
func TestPauseStopsProcessesForkedDuringIt(t *testing.T) {
	p := newProvider(t, bwrap.Config{Limits: &bwrap.Limits{Processes: 64}})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(context.Background(), sandbox.ExecRequest{Command: "f() { while :; do sleep 100 & (:) 2>/dev/null; done; }; f 2>/dev/null & f 2>/dev/null"})
		done <- err
	}()
	waitFor(t, "the forks to begin", func() bool { return len(p.Processes(sb.ID())) >= 10 })
	for range 5 {
		require.NoError(t, p.Pause(context.Background(), sb.ID()))
		// Pause counts a process that sleeps in the kernel with a SIGSTOP pending as
		// stopped: it stops as it leaves the kernel, and may show R for that moment. One
		// that escaped would run on and never show T.
		var running []string
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(time.Millisecond)
		for {
			running = running[:0]
			for pid, st := range p.Processes(sb.ID()) {
				if !strings.ContainsRune("TtZ", rune(st)) {
					running = append(running, fmt.Sprintf("%d %c", pid, st))
				}
			}
			if len(running) == 0 {
				break
			}
			require.False(t, time.Now().After(deadline), "not stopped after Pause: %v", running)
			<-tick.C
		}
		tick.Stop()
		_, err := p.Connect(context.Background(), sb.ID())
		require.NoError(t, err)
	}
	require.NoError(t, p.Kill(context.Background(), sb.ID()))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return after Kill")
	}
}

// slowBwrap is bwrap behind a script that, for a command naming hold-me, waits for a
// line on a FIFO before it starts bwrap: a bwrap that has not reported yet. It returns
// the script and the FIFO, both reachable by the sandbox user.
func slowBwrap(t *testing.T) (script, fifo string) {
	t.Helper()
	real := os.Getenv("CHATD_BWRAP")
	if real == "" {
		var err error
		real, err = exec.LookPath("bwrap")
		require.NoError(t, err)
	}
	dir := openTempDir(t)
	fifo = filepath.Join(dir, "hold")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	require.NoError(t, os.Chmod(fifo, 0o666))
	script = filepath.Join(dir, "bwrap")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\ncase \"$*\" in *hold-me*) read x < "+fifo+" ;; esac\nexec "+real+" \"$@\"\n"), 0o755))
	return script, fifo
}

// holding starts command in sb, whose bwrap waits on fifo, and returns once it waits
// there (the FIFO open for writing), with the writer that releases it and what Exec
// returns.
func holding(t *testing.T, sb sandbox.Sandbox, fifo, command string) (*os.File, <-chan sandbox.ExecResult, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	done := make(chan sandbox.ExecResult, 1)
	go func() {
		res, _ := sb.Exec(context.Background(), sandbox.ExecRequest{Command: command, Timeout: time.Minute, Output: &out})
		done <- res
	}()
	opened := make(chan *os.File, 1)
	go func() {
		// Opening a FIFO for writing returns when a reader opened it: the script.
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			opened <- w
		}
	}()
	select {
	case w := <-opened:
		t.Cleanup(func() { w.Close() })
		return w, done, &out
	case res := <-done:
		t.Fatalf("the command ended before its bwrap started: %+v %s", res, out.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the script never waited on the FIFO")
	}
	return nil, nil, nil
}

// A bwrap that has not reported its namespace yet holds up no other sandbox: another
// command runs meanwhile, Pause says it cannot pause the one starting rather than wait
// or claim it, and Kill ends it.
func TestSlowStartBlocksNoOtherSandbox(t *testing.T) {
	script, fifo := slowBwrap(t)
	p, err := bwrap.New(bwrap.Config{Dir: openTempDir(t), Bwrap: script})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	a, err := p.Create(context.Background())
	require.NoError(t, err)
	b, err := p.Create(context.Background())
	require.NoError(t, err)

	w, aDone, aOut := holding(t, a, fifo, "echo hold-me")
	bDone := make(chan string, 1)
	go func() {
		var out bytes.Buffer
		_, _ = b.Exec(context.Background(), sandbox.ExecRequest{Command: "echo b ran", Timeout: time.Minute, Output: &out})
		bDone <- out.String()
	}()
	select {
	case out := <-bDone:
		require.Equal(t, "b ran\n", out)
	case <-time.After(10 * time.Second):
		t.Fatal("the second sandbox's command waited on the first's start")
	}
	err = p.Pause(context.Background(), a.ID())
	require.ErrorContains(t, err, "starting")

	_, err = w.WriteString("go\n")
	require.NoError(t, err)
	select {
	case res := <-aDone:
		require.Equal(t, 0, res.ExitCode, aOut.String())
		require.Equal(t, "hold-me\n", aOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the held command did not end once released")
	}

	// Killed while it starts, it ends.
	_, aDone, _ = holding(t, a, fifo, "echo hold-me again")
	require.NoError(t, p.Kill(context.Background(), a.ID()))
	select {
	case res := <-aDone:
		require.NotEqual(t, 0, res.ExitCode)
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return after Kill")
	}
	require.Empty(t, p.Processes(a.ID()))
}

// Remove ends the sandbox's processes and deletes its directory, with what the sandbox
// made hard to delete (as root, the sandbox user's files); what its links point to
// stays. Another provider's sandbox in the directory is left alone.
func TestRemoveKillsAndDeletes(t *testing.T) {
	dir := openTempDir(t)
	p := newProvider(t, bwrap.Config{Dir: dir})
	ctx := context.Background()
	sb, err := p.Create(ctx)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, sandbox.ExecRequest{
			Command: `mkdir -p d/e && touch d/e/f && chmod 000 d/e d && ln -s / root && ln -s /etc/passwd passwd && (while :; do echo x >> log; sleep 0.01; done) & wait`,
		})
		done <- err
	}()
	waitFor(t, "the loop to write", func() bool {
		_, err := os.Stat(filepath.Join(p.Workspace(sb.ID()), "log"))
		return err == nil
	})

	require.NoError(t, p.Remove(ctx, sb.ID()))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return after Remove")
	}
	require.Empty(t, p.Processes(sb.ID()))
	require.NoDirExists(t, filepath.Join(dir, sb.ID()))
	_, err = p.Connect(ctx, sb.ID())
	require.ErrorIs(t, err, sandbox.ErrGone)
	require.NoError(t, p.Remove(ctx, sb.ID()), "removing twice is fine")
	require.FileExists(t, "/etc/passwd")

	require.NoError(t, os.MkdirAll(filepath.Join(dir, "local-0123456789abcdef", "workspace"), 0o755))
	require.NoError(t, p.Remove(ctx, "local-0123456789abcdef"))
	require.DirExists(t, filepath.Join(dir, "local-0123456789abcdef", "workspace"), "not this provider's")
	for _, bad := range []string{"", "..", "bwrap-../x"} {
		require.NoError(t, p.Remove(ctx, bad), bad)
	}
	require.DirExists(t, dir)
}

// countingWriter counts what chatd read of a command's output, keeping its start and end.
type countingWriter struct {
	n    int64
	kept sandbox.HeadTail
	buf  bytes.Buffer
}

func newCountingWriter() *countingWriter {
	c := &countingWriter{}
	c.kept = sandbox.HeadTail{Head: 4 << 20, Tail: 4 << 20, Out: &c.buf}
	return c
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.kept.Write(p)
}

func (c *countingWriter) String() string {
	_ = c.kept.Close()
	return c.buf.String()
}

// A command's output over the limit its caller keeps is cut in the sandbox: chatd reads
// the head, a marker of what was left out, and the real end, and no more, however much
// the command writes. What the command leaves in the background, holding the output
// open, does not hold up the end, and is killed.
func TestOutputIsCutInTheSandbox(t *testing.T) {
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	const keep = 1 << 20
	out := newCountingWriter()
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Command:     "echo BEGIN; sleep 1000 & head -c 200000000 /dev/zero | tr '\\0' x; echo; echo END-MARKER; exit 3",
		Timeout:     time.Minute,
		Output:      out,
		OutputLimit: keep,
	})
	require.NoError(t, err)
	require.Equal(t, 3, res.ExitCode)
	require.Empty(t, res.Exceeded)
	s := out.String()
	require.LessOrEqual(t, out.n, int64(keep+sandbox.MaxMarker), "chatd read more than the limit")
	require.True(t, strings.HasPrefix(s, "BEGIN\nxxx"), "%.20q", s)
	require.True(t, strings.Contains(s, sandbox.OmittedMarker(int64(200000000+len("BEGIN\n\nEND-MARKER\n")-keep))), "no marker, or another count")
	require.True(t, strings.HasSuffix(s, "xxx\nEND-MARKER\n"), "%q", s[len(s)-40:])
	waitFor(t, "the namespace to end", func() bool { return len(p.Processes(sb.ID())) == 0 })

	// Under the limit, or with none, all of it comes.
	for _, limit := range []int{0, keep} {
		out := newCountingWriter()
		res, err = sb.Exec(context.Background(), sandbox.ExecRequest{
			Command: "head -c 300000 /dev/zero | tr '\\0' y; echo; echo END; exit 4", Timeout: time.Minute, Output: out, OutputLimit: limit,
		})
		require.NoError(t, err)
		require.Equal(t, 4, res.ExitCode)
		require.Equal(t, strings.Repeat("y", 300000)+"\nEND\n", out.String())
	}
}

// The command cannot write to chatd's end of the output around the filter: the processes
// that hold it are not its to open through /proc.
func TestEscapeOutputFilter(t *testing.T) {
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	out := newCountingWriter()
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "for p in /proc/[0-9]*; do for fd in 1 2 4 5; do head -c 5000000 /dev/zero > $p/fd/$fd && echo wrote $p/fd/$fd; done; done; " +
			"cat /proc/1/fd/5 /proc/2/fd/5 > copy && echo copied the executable; exit 0",
		Timeout: time.Minute, Output: out, OutputLimit: 64 << 10,
	})
	require.NoError(t, err)
	s := out.String()
	require.LessOrEqual(t, out.n, int64(64<<10+sandbox.MaxMarker), s)
	require.NotContains(t, s, "wrote /proc/1/")
	require.NotContains(t, s, "wrote /proc/2/")
	require.NotContains(t, s, "copied")
	require.Contains(t, s, "Permission denied")
	require.Equal(t, 0, res.ExitCode)
}

// The limits: each test crosses one and sees the command end with an error that names
// it, and the sandbox, and chatd, carry on.

// fast looks at the limits that are totals every few milliseconds.
func fast(l bwrap.Limits) bwrap.Config {
	return bwrap.Config{Limits: &l, WatchEvery: 5 * time.Millisecond, DiskEvery: 5 * time.Millisecond}
}

// stillWorks checks that the sandbox runs commands after one crossed a limit, and that
// nothing of that one is left.
func stillWorks(t *testing.T, p *bwrap.Provider, sb sandbox.Sandbox) {
	t.Helper()
	waitFor(t, "the namespace to end", func() bool { return len(p.Processes(sb.ID())) == 0 })
	require.NoError(t, exec.Command("true").Run(), "chatd cannot start a process")
	out, res := run(t, sb, "echo alive")
	require.Equal(t, 0, res.ExitCode, out)
	require.Equal(t, "alive\n", out)
}

func TestLimitOpenFiles(t *testing.T) {
	p := newProvider(t, bwrap.Config{Limits: &bwrap.Limits{OpenFiles: 6}})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	out, res := run(t, sb, "touch f; exec 3<f 4<f 5<f 6<f 7<f; echo opened")
	require.NotEqual(t, 0, res.ExitCode, out)
	require.Contains(t, out, "Too many open files")
	require.NotContains(t, out, "opened")
	stillWorks(t, p, sb)

	// By default a command gets 1024, not chatd's own.
	pd := newProvider(t, bwrap.Config{})
	sbd, err := pd.Create(context.Background())
	require.NoError(t, err)
	out, _ = run(t, sbd, "ulimit -n; ulimit -Hn")
	require.Equal(t, "1024\n1024\n", out)
}

// The CPU time of a command's processes together: four processes, each far from the
// limit (RLIMIT_CPU) when their sum reaches it.
func TestLimitCPUTimeTogether(t *testing.T) {
	p := newProvider(t, fast(bwrap.Limits{CPUSeconds: 1}))
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "echo spinning; for i in 1 2 3 4; do (while :; do :; done) & done; wait",
		Timeout: time.Minute, Output: &out, OutputLimit: 1 << 20,
	})
	require.NoError(t, err)
	require.Equal(t, -1, res.ExitCode, out.String())
	require.False(t, res.TimedOut)
	require.Contains(t, res.Exceeded, "of CPU time together, over the limit of 1s")
	require.Equal(t, "spinning\n", out.String(), "the output sent before the stop is kept")
	stillWorks(t, p, sb)

	// One process alone is held by RLIMIT_CPU (or the watch, whichever looks first).
	res, err = sb.Exec(context.Background(), sandbox.ExecRequest{Command: "while :; do :; done", Timeout: time.Minute})
	require.NoError(t, err)
	require.Contains(t, res.Exceeded, "CPU time")
}

// The memory of a sandbox's processes together: four processes holding 30 MB each,
// under the limit of 64 MiB alone and not together.
func TestLimitMemoryTogether(t *testing.T) {
	p := newProvider(t, fast(bwrap.Limits{TotalMemory: 64 << 20}))
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		// tail holds the last 30 MB of its input until the input ends, which sleep delays.
		Command: "echo LAST-WORDS; for i in 1 2 3 4; do { head -c 30000000 /dev/zero; sleep 1000; } | tail -c 30000000 > /dev/null & done; wait",
		Timeout: time.Minute, Output: &out, OutputLimit: 1 << 20,
	})
	require.NoError(t, err)
	require.Equal(t, -1, res.ExitCode, out.String())
	require.Contains(t, res.Exceeded, "the sandbox's processes used")
	require.Contains(t, res.Exceeded, "of memory together, over the limit of 64 MiB")
	require.Equal(t, "LAST-WORDS\n", out.String())
	stillWorks(t, p, sb)

	// One of them is within it.
	out.Reset()
	res, err = sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "head -c 30000000 /dev/zero | tail -c 30000000 | wc -c", Timeout: time.Minute, Output: &out,
	})
	require.NoError(t, err)
	require.Empty(t, res.Exceeded)
	require.Equal(t, "30000000\n", out.String())
}

// The workspace's size: many files, each under the largest file size.
func TestLimitDisk(t *testing.T) {
	const limit = 8 << 20
	p := newProvider(t, fast(bwrap.Limits{Disk: limit, FileSize: 1 << 20}))
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	ws := p.Workspace(sb.ID())
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "echo writing; i=0; while :; do head -c 1000000 /dev/zero > f$i; i=$((i+1)); done",
		Timeout: time.Minute, Output: &out, OutputLimit: 1 << 20,
	})
	require.NoError(t, err)
	require.Equal(t, -1, res.ExitCode, out.String())
	require.Equal(t, "the workspace grew past its limit of 8 MiB", res.Exceeded)
	require.Equal(t, "writing\n", out.String())
	size, err := sandbox.DiskUsage(ws, 0)
	require.NoError(t, err)
	require.Greater(t, size, int64(limit))
	t.Logf("the workspace holds %d bytes after the stop (limit %d)", size, limit)
	// Over its limit by how much the command wrote between two looks, which depends on
	// the machine: made 9 MB, over the limit and under twice it (see
	// TestLimitDiskFarOverAtStart), for what follows.
	waitFor(t, "the namespace to end", func() bool { return len(p.Processes(sb.ID())) == 0 })
	names, err := filepath.Glob(filepath.Join(ws, "f*"))
	require.NoError(t, err)
	for _, n := range names {
		require.NoError(t, os.Remove(n))
	}
	for i := range 9 {
		require.NoError(t, os.WriteFile(filepath.Join(ws, "f"+strconv.Itoa(i)), make([]byte, 1000000), 0o644))
	}
	stillWorks(t, p, sb)

	// Over its limit, the workspace still lets a command run that does not grow it, and
	// stops one that does.
	out.Reset()
	res, err = sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "ls | wc -l > /dev/null; head -c 2000000 /dev/zero > more; echo wrote; sleep 1000", Timeout: time.Minute, Output: &out,
	})
	require.NoError(t, err)
	require.Contains(t, res.Exceeded, "the workspace, over its limit of 8 MiB when the command started")
	// Deleting brings it back under.
	out2, res := run(t, sb, "rm -f f* more; echo cleaned")
	require.Equal(t, 0, res.ExitCode, out2)
	require.Empty(t, res.Exceeded)
	out2, res = run(t, sb, "for i in 1 2 3 4; do head -c 1000000 /dev/zero > g$i; done; echo fits")
	require.Equal(t, "fits\n", out2)
	require.Empty(t, res.Exceeded)

	// A workspace nested too deep to measure stops the command.
	res, err = sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "i=0; while [ $i -lt 200 ]; do mkdir d && cd d || exit 9; i=$((i+1)); done; sleep 1000", Timeout: time.Minute,
	})
	require.NoError(t, err)
	require.Contains(t, res.Exceeded, "the workspace could not be measured")
	require.Contains(t, res.Exceeded, "nested deeper than")
}

// The workspace is measured at most every diskAtMost (10 s), however long a walk of it
// takes: a workspace made slow to walk cannot put the looks minutes apart.
func TestDiskWaitIsBounded(t *testing.T) {
	for _, c := range []struct{ took, every, want time.Duration }{
		{time.Millisecond, time.Second, time.Second},
		{100 * time.Millisecond, time.Second, 2 * time.Second},
		{5 * time.Second, time.Second, 10 * time.Second},
		{time.Minute, time.Second, 10 * time.Second},
		{time.Minute, 20 * time.Second, 20 * time.Second}, // a longer interval set
	} {
		require.Equal(t, c.want, bwrap.DiskWait(c.took, c.every, 10*time.Second), "took %s, every %s", c.took, c.every)
	}
}

// A workspace over twice its limit as a command starts is measured only that far (not
// walked whole before every command), and counts as twice it: the command is stopped
// unless it brings the workspace under that.
func TestLimitDiskFarOverAtStart(t *testing.T) {
	const limit = 1 << 20
	p := newProvider(t, fast(bwrap.Limits{Disk: limit}))
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	big := filepath.Join(p.Workspace(sb.ID()), "big")
	require.NoError(t, os.WriteFile(big, make([]byte, 3*limit), 0o644))
	out, res := run(t, sb, "sleep 1000")
	require.Equal(t, -1, res.ExitCode, out)
	require.False(t, res.TimedOut)
	require.Equal(t, "the workspace was over twice its limit of 1 MiB when the command started, and still is: delete files to bring it under", res.Exceeded)
	require.NoError(t, os.Remove(big))
	stillWorks(t, p, sb)
}

// The sandbox's /proc hides what tells only of the host (its kernel's command line and
// symbols, its boot id, its devices), and keeps what programs read to size themselves.
func TestProcHidesTheHost(t *testing.T) {
	p := newProvider(t, bwrap.Config{})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	hostBoot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	require.NoError(t, err)
	hostCmdline, err := os.ReadFile("/proc/cmdline")
	require.NoError(t, err)
	out, res := run(t, sb, "cat /proc/sys/kernel/random/boot_id /proc/cmdline; head -c 100 /proc/kallsyms; ls /proc/acpi /proc/bus /proc/irq; touch /proc/acpi/x")
	require.NotEqual(t, 0, res.ExitCode, out)
	require.NotContains(t, out, strings.TrimSpace(string(hostBoot)))
	require.NotContains(t, out, strings.TrimSpace(string(hostCmdline)))
	require.Contains(t, out, "cat: /proc/cmdline: Permission denied")
	require.Contains(t, out, "head: cannot open '/proc/kallsyms' for reading: Permission denied")
	require.Contains(t, out, "touch: cannot touch '/proc/acpi/x': Read-only file system")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		require.True(t, strings.HasSuffix(line, "Permission denied") || strings.HasSuffix(line, ":") || strings.HasSuffix(line, "Read-only file system") || line == "",
			"%q: a hidden file or directory showed something", line)
	}
	out, res = run(t, sb, "nproc >/dev/null && head -1 /proc/meminfo && cat /proc/sys/kernel/ostype")
	require.Equal(t, 0, res.ExitCode, out)
	require.Contains(t, out, "MemTotal:")
	require.Contains(t, out, "Linux")
}

// A command stopped at a limit sends the end of its output, kept in the sandbox, as one
// that ends does.
func TestStopKeepsTheEndOfTheOutput(t *testing.T) {
	p := newProvider(t, fast(bwrap.Limits{Disk: 4 << 20}))
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	out := newCountingWriter()
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "echo BEGIN; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo END-MARKER; " +
			"i=0; while :; do head -c 500000 /dev/zero > f$i; i=$((i+1)); done",
		Timeout: time.Minute, Output: out, OutputLimit: 1 << 20,
	})
	require.NoError(t, err)
	require.Equal(t, "the workspace grew past its limit of 4 MiB", res.Exceeded)
	s := out.String()
	require.LessOrEqual(t, out.n, int64(1<<20+sandbox.MaxMarker))
	require.True(t, strings.HasPrefix(s, "BEGIN\nxxx"), "%.20q", s)
	require.True(t, strings.Contains(s, "bytes of output left out] …\n"), "no marker")
	require.True(t, strings.HasSuffix(s, "xxx\nEND-MARKER\n"), "%q", s[len(s)-40:])
}
