package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/sandbox"
)

// inMemory is how many sandboxes the provider holds in memory.
func (p *Provider) inMemory() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.boxes)
}

// The provider holds a sandbox in memory only while its directory cannot say everything:
// while it is paused or runs processes. Create, use, pause, resume and kill cycles leave
// nothing behind, and a handle taken before the provider forgot its sandbox still sees
// what Pause and Kill did to it.
func TestForgetsSandboxesItNoLongerNeeds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := New(dir)
	require.NoError(t, err)
	ctx := context.Background()

	for range 10 {
		sb, err := p.Create(ctx)
		require.NoError(t, err)
		require.Zero(t, p.inMemory(), "a new sandbox is its directory")
		_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "echo hi >> f"})
		require.NoError(t, err)
		require.Zero(t, p.inMemory(), "a command that ended leaves nothing to remember")

		require.NoError(t, p.Pause(ctx, sb.ID()))
		require.Equal(t, 1, p.inMemory(), "only memory knows it is paused")
		_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
		require.ErrorIs(t, err, sandbox.ErrPaused, "the handle sees the pause")
		_, err = p.Connect(ctx, sb.ID())
		require.NoError(t, err)
		require.Zero(t, p.inMemory())
		_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
		require.NoError(t, err, "resumed")

		require.NoError(t, p.Kill(ctx, sb.ID()))
		require.Zero(t, p.inMemory(), "its marker says it is gone")
		_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
		require.ErrorIs(t, err, sandbox.ErrGone, "the handle sees the kill")
		_, err = p.Connect(ctx, sb.ID())
		require.ErrorIs(t, err, sandbox.ErrGone)
		require.ErrorIs(t, p.Pause(ctx, sb.ID()), sandbox.ErrGone)
		require.NoError(t, p.Kill(ctx, sb.ID()))
		require.Zero(t, p.inMemory(), "looking a killed sandbox up does not keep it")
	}

	// Paused while it was never in memory, then killed: kept, then not.
	sb, err := p.Create(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Pause(ctx, sb.ID()))
	require.Equal(t, 1, p.inMemory())
	require.NoError(t, p.Kill(ctx, sb.ID()))
	require.Zero(t, p.inMemory())

	// A process left running in the background is remembered (to pause and kill it)
	// until the sandbox is killed.
	sb, err = p.Create(ctx)
	require.NoError(t, err)
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "sleep 1000 > /dev/null 2>&1 &"})
	require.NoError(t, err)
	require.Equal(t, 1, p.inMemory())
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
	require.NoError(t, err)
	require.Equal(t, 1, p.inMemory())
	require.NoError(t, p.Kill(ctx, sb.ID()))
	require.Zero(t, p.inMemory())

	// A later process reads every state back from the directories.
	next, err := New(dir)
	require.NoError(t, err)
	_, err = next.Connect(ctx, sb.ID())
	require.ErrorIs(t, err, sandbox.ErrGone)
	require.Zero(t, next.inMemory())
}

// Calls racing on one sandbox never forget it while it is paused: a Pause that returned
// keeps it in memory whatever else ends at that moment.
func TestPausedSandboxIsNeverForgotten(t *testing.T) {
	t.Parallel()
	p, err := New(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	sb, err := p.Create(ctx)
	require.NoError(t, err)

	stop := make(chan struct{})
	var (
		wg         sync.WaitGroup
		mu         sync.Mutex
		unexpected []error
	)
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
				if err != nil && !errors.Is(err, sandbox.ErrPaused) {
					mu.Lock()
					unexpected = append(unexpected, err)
					mu.Unlock()
				}
			}
		})
	}
	for range 30 {
		require.NoError(t, p.Pause(ctx, sb.ID()))
		require.Equal(t, 1, p.inMemory())
		_, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
		require.ErrorIs(t, err, sandbox.ErrPaused)
		require.Equal(t, 1, p.inMemory())
		_, err = p.Connect(ctx, sb.ID())
		require.NoError(t, err)
	}
	close(stop)
	wg.Wait()
	require.Empty(t, unexpected)
	require.Zero(t, p.inMemory())
}

// A group is ours only while a process we recorded (same pid, same start time) is in it.
func TestGroupOwnership(t *testing.T) {
	known := members{100: 5, 101: 9}
	require.True(t, known.anyIn(members{100: 5}))
	require.True(t, known.anyIn(members{101: 9, 300: 1}), "a recorded member left and new children came: still ours")
	require.False(t, known.anyIn(members{100: 7}), "pid 100 was reused by a later process")
	require.False(t, known.anyIn(members{}), "the group is empty: its id is free")
}

func TestProcStatReadsGroupAndStartTime(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	st, ok := procStat(pid)
	require.True(t, ok)
	require.Equal(t, pid, st.pgid)
	require.Positive(t, st.start)
	require.False(t, st.ended())
	require.Equal(t, members{pid: st.start}, groupMembers(pid))

	self, ok := procStat(os.Getpid())
	require.True(t, ok)
	require.Equal(t, syscall.Getpgrp(), self.pgid)
	_, ok = procStat(1 << 30)
	require.False(t, ok)
}

// recordPath is where p keeps the record of sandbox id.
func recordPath(p *Provider, id string) string {
	return filepath.Join(p.dir, id, recordPrefix+p.nonce+recordSuffix)
}

// readRecord reads the record p keeps of sandbox id (nil when there is none).
func readRecord(t *testing.T, p *Provider, id string) *record {
	t.Helper()
	b, err := os.ReadFile(recordPath(p, id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var r record
	require.NoError(t, json.Unmarshal(b, &r))
	return &r
}

// The record on disk follows the groups a sandbox runs, with this process as their
// owner: what a command left in the background is in it, and it is gone once nothing
// runs (the command ended, the sandbox was killed, the provider closed).
func TestRecordFollowsTheGroups(t *testing.T) {
	t.Parallel()
	p, err := New(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	sb, err := p.Create(ctx)
	require.NoError(t, err)

	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
	require.NoError(t, err)
	require.Nil(t, readRecord(t, p, sb.ID()), "nothing runs")

	var out bytes.Buffer
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "sleep 1000 > /dev/null 2>&1 & echo $$ $!", Output: &out})
	require.NoError(t, err)
	var leader, bg int
	_, err = fmt.Sscan(out.String(), &leader, &bg)
	require.NoError(t, err)
	want := &record{
		Boot:   bootID(),
		Owner:  owner{PID: os.Getpid(), Start: startTime(os.Getpid())},
		Groups: map[int]members{leader: {bg: startTime(bg)}},
	}
	require.Equal(t, want, readRecord(t, p, sb.ID()), "the leader ended; its group lives on in the background")
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
	require.NoError(t, err)
	require.Equal(t, want, readRecord(t, p, sb.ID()))
	require.NoError(t, p.Pause(ctx, sb.ID()))
	require.Equal(t, want, readRecord(t, p, sb.ID()), "paused processes are still there")
	require.NoError(t, p.Kill(ctx, sb.ID()))
	require.Nil(t, readRecord(t, p, sb.ID()), "killed")

	sb, err = p.Create(ctx)
	require.NoError(t, err)
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "sleep 1000 > /dev/null 2>&1 &"})
	require.NoError(t, err)
	require.NotNil(t, readRecord(t, p, sb.ID()))
	p.Close()
	require.Nil(t, readRecord(t, p, sb.ID()), "closed")
}

// A command whose group cannot be recorded could outlive a crash of chatd unseen: it is
// killed, and Exec says why.
func TestUnrecordedCommandsDoNotRun(t *testing.T) {
	t.Parallel()
	p, err := New(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	sb, err := p.Create(ctx)
	require.NoError(t, err)
	// A directory where the file goes: renaming the record into place fails, also as root.
	require.NoError(t, os.Mkdir(recordPath(p, sb.ID()), 0o700))
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: "sleep 1000"})
	require.ErrorContains(t, err, "record command")
	require.Zero(t, res)
	require.Zero(t, p.inMemory(), "no group of it is left")

	require.NoError(t, os.Remove(recordPath(p, sb.ID())))
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Command: "true"})
	require.NoError(t, err)
}

// The sweep kills nothing it has not shown to be a sandbox's. A stranger (a process this
// test started, unrelated to any sandbox) is named by three records: one of a dead chatd
// whose recorded process had the stranger's pid but another start time (the pid was
// reused), one of a live chatd, and one from an earlier boot. It survives all three; the
// dead chatd's records are removed, the live one's kept.
func TestSweepSparesStrangers(t *testing.T) {
	t.Parallel()
	stranger := exec.Command("sleep", "1000")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, stranger.Start())
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	pid := stranger.Process.Pid
	start := startTime(pid)
	require.Positive(t, start)

	// A chatd that has died: a process this test started and ended.
	died := exec.Command("sleep", "1000")
	require.NoError(t, died.Start())
	dead := owner{PID: died.Process.Pid, Start: startTime(died.Process.Pid)}
	require.NoError(t, died.Process.Kill())
	require.Error(t, died.Wait())

	p, err := New(t.TempDir())
	require.NoError(t, err)
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	root := filepath.Join(p.dir, sb.ID())
	write := func(name string, r record) string {
		path := filepath.Join(root, recordPrefix+name+recordSuffix)
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o600))
		return path
	}
	reused := write("reused", record{Boot: bootID(), Owner: dead, Groups: map[int]members{pid: {pid: start + 1}}})
	live := write("live", record{Boot: bootID(), Owner: p.self, Groups: map[int]members{pid: {pid: start}}})
	earlier := write("earlier", record{Boot: "an-earlier-boot", Owner: dead, Groups: map[int]members{pid: {pid: start}}})

	swept, err := p.Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, swept)
	st, ok := procStat(pid)
	require.True(t, ok)
	require.Equal(t, start, st.start)
	require.False(t, st.ended(), "the stranger runs")
	require.NoFileExists(t, reused)
	require.NoFileExists(t, earlier)
	require.FileExists(t, live)
}
