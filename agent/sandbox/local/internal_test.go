package local

import (
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

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
	pgid, start, ok := procStat(pid)
	require.True(t, ok)
	require.Equal(t, pid, pgid)
	require.Positive(t, start)
	require.Equal(t, members{pid: start}, groupMembers(pid))

	self, _, ok := procStat(os.Getpid())
	require.True(t, ok)
	require.Equal(t, syscall.Getpgrp(), self)
	_, _, ok = procStat(1 << 30)
	require.False(t, ok)
}
