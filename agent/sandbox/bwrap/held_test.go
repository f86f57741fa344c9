package bwrap_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/bwrap"
)

// helperEnv makes the test binary, copied into a workspace (installHelper), hold memory
// or a file in one of the ways that no process's own pages or directory entry show:
// BWRAP_TEST_HELPER=WHAT ./helper SIZE HOLD (see helper).
const helperEnv = "BWRAP_TEST_HELPER"

// installHelper copies the test binary into sb's workspace as helper.
func installHelper(t *testing.T, p *bwrap.Provider, sb sandbox.Sandbox) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	b, err := os.ReadFile(exe)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(p.Workspace(sb.ID()), "helper"), b, 0o755))
}

// helper makes SIZE bytes of what, says "ready", holds it for HOLD (a duration), then
// says "done" and exits:
//
//   - memfd: a memfd written through its descriptor, never mapped, the descriptor open;
//   - memfd-mapped: a memfd, its descriptor open, every page written through a mapping;
//   - memfd-mapped-only: a memfd mapped, its descriptor closed, every page written through
//     the mapping and then dropped from it (MADV_DONTNEED): the memfd keeps them, and
//     no process's page tables hold them;
//   - shared: shared anonymous memory, written and dropped from its mapping likewise;
//   - deleted-mapped: a file of the workspace, deleted, mapped, its descriptor closed,
//     written through the mapping;
//   - sysv: a SysV shared memory segment, attached, written, detached.
func helper(what string, args []string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, what, err)
		return 1
	}
	if len(args) != 2 {
		return fail(fmt.Errorf("usage: %s SIZE HOLD", what))
	}
	size, err := strconv.Atoi(args[0])
	if err != nil {
		return fail(err)
	}
	hold, err := time.ParseDuration(args[1])
	if err != nil {
		return fail(err)
	}
	touch := func(m []byte) {
		for i := 0; i < len(m); i += 4096 {
			m[i] = 1
		}
	}
	// mapped maps fd (or shared anonymous memory, fd -1) whole, closes fd, and writes
	// every page; dropped, it then drops the pages from the mapping.
	var m []byte
	mapped := func(fd int, dropped bool) error {
		flags := unix.MAP_SHARED
		if fd < 0 {
			flags |= unix.MAP_ANONYMOUS
		} else if err := unix.Ftruncate(fd, int64(size)); err != nil {
			return err
		}
		var err error
		if m, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, flags); err != nil {
			return err
		}
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		touch(m)
		if dropped {
			return unix.Madvise(m, unix.MADV_DONTNEED)
		}
		return nil
	}
	switch what {
	case "memfd":
		fd, err := unix.MemfdCreate("held", 0)
		if err != nil {
			return fail(err)
		}
		b := make([]byte, 1<<20)
		for left := size; left > 0; left -= len(b) {
			if _, err := unix.Write(fd, b[:min(len(b), left)]); err != nil {
				return fail(err)
			}
		}
	case "memfd-mapped", "memfd-mapped-only":
		fd, err := unix.MemfdCreate("held", 0)
		if err != nil {
			return fail(err)
		}
		if what == "memfd-mapped" {
			fd, err = unix.Dup(fd) // one to keep, one that mapped closes
		}
		if err == nil {
			err = mapped(fd, what == "memfd-mapped-only")
		}
		if err != nil {
			return fail(err)
		}
	case "shared":
		if err := mapped(-1, true); err != nil {
			return fail(err)
		}
	case "sysv":
		id, err := unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o600)
		if err != nil {
			return fail(err)
		}
		b, err := unix.SysvShmAttach(id, 0, 0)
		if err != nil {
			return fail(err)
		}
		touch(b)
		if err := unix.SysvShmDetach(b); err != nil {
			return fail(err)
		}
	case "deleted-mapped":
		fd, err := unix.Open("deleted", unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o644)
		if err == nil {
			if err = unix.Unlink("deleted"); err == nil {
				err = mapped(fd, false)
			}
		}
		if err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("unknown"))
	}
	fmt.Println("ready")
	time.Sleep(hold)
	fmt.Println("done")
	runtime.KeepAlive(m)
	return 0
}

func TestParseMapping(t *testing.T) {
	addrs, dev, ino, path, ok := bwrap.ParseMapping("00400000-00666000 rw-s 00000000 fe:01 172138                     /memfd:a b (deleted)")
	require.True(t, ok)
	require.Equal(t, "400000-666000", addrs, "as /proc/PID/map_files names it")
	require.Equal(t, unix.Mkdev(0xfe, 1), dev)
	require.Equal(t, uint64(172138), ino)
	require.Equal(t, "/memfd:a b (deleted)", path)
	_, _, ino, path, ok = bwrap.ParseMapping("7ffc1d887000-7ffc1d8a8000 rw-p 00000000 00:00 0                          [stack]")
	require.True(t, ok)
	require.Equal(t, uint64(0), ino)
	require.Equal(t, "[stack]", path)
	for _, line := range []string{"Pss_Shmem:        40960 kB", "VmFlags: rd wr sh mr mw me ms", ""} {
		_, _, _, _, ok = bwrap.ParseMapping(line)
		require.False(t, ok, line)
	}
}

// A file deleted from the workspace while a process holds it open still takes its
// blocks: it counts towards the workspace's size.
func TestLimitDiskDeletedFiles(t *testing.T) {
	const limit = 32 << 20 // the helper, below, is 10 MB
	p := newProvider(t, fast(bwrap.Limits{Disk: limit}))
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "exec 3>big; rm big; echo deleted; head -c 100000000 /dev/zero >&3; echo written; sleep 1000",
		Timeout: 30 * time.Second, Output: &out,
	})
	require.NoError(t, err)
	require.Equal(t, -1, res.ExitCode, out.String())
	require.False(t, res.TimedOut, "not stopped: %s", out.String())
	require.True(t, strings.HasPrefix(res.Exceeded, "the workspace grew past its limit of 32 MiB, counting "), res.Exceeded)
	require.True(t, strings.HasSuffix(res.Exceeded, " of deleted files its processes hold open"), res.Exceeded)
	require.Contains(t, out.String(), "deleted\n")
	stillWorks(t, p, sb)

	// One held by a mapping alone, its descriptor closed, is found where chatd may follow
	// /proc/PID/map_files (as root); elsewhere it is not (see the README).
	installHelper(t, p, sb)
	out.Reset()
	res, err = sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: helperEnv + "=deleted-mapped ./helper 50000000 300ms", Timeout: 30 * time.Second, Output: &out,
	})
	require.NoError(t, err)
	if os.Geteuid() == 0 {
		require.Equal(t, -1, res.ExitCode, out.String())
		require.True(t, strings.HasPrefix(res.Exceeded, "the workspace grew past its limit of 32 MiB, counting "), res.Exceeded)
	} else {
		require.Equal(t, 0, res.ExitCode, out.String())
		require.Empty(t, res.Exceeded)
	}
}

// Memory files (memfds, shared anonymous memory) count towards the memory of the
// sandbox's processes, whether mapped or not, each once.
func TestLimitMemoryFiles(t *testing.T) {
	p := newProvider(t, fast(bwrap.Limits{TotalMemory: 128 << 20}))
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	installHelper(t, p, sb)

	// Written through its descriptor, never mapped.
	out, res := helped(t, sb, "memfd", 200_000_000, "1000s")
	require.Equal(t, -1, res.ExitCode, out)
	require.Contains(t, res.Exceeded, "of memory together, over the limit of 128 MiB", out)
	stillWorks(t, p, sb)

	// Mapped and held: its pages are in the process's Pss_Shmem and in the memfd's size,
	// and count once: 75 MB and the rest (about 30 MB of the helper and inside, built with
	// the race detector) are under the limit; 75 MB twice would not be.
	out, res = helped(t, sb, "memfd-mapped", 75_000_000, "300ms")
	require.Equal(t, 0, res.ExitCode, out)
	require.Empty(t, res.Exceeded)
	require.Equal(t, "ready\ndone\n", out)
}

// Memory that only a mapping holds, its pages in no page table (dropped from it), counts
// where chatd may follow /proc/PID/map_files (as root); elsewhere it is not counted (see
// the README). The looks are slower here, so that the first comes once the pages are
// dropped: while they are being written, they count as any process's pages do. (Two
// seconds: on a loaded 2-core machine, 500 ms did not always cover writing 100 MB.)
func TestLimitMemoryOnlyMapped(t *testing.T) {
	p := newProvider(t, bwrap.Config{Limits: &bwrap.Limits{TotalMemory: 64 << 20}, WatchEvery: slowLooks, DiskEvery: slowLooks})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	installHelper(t, p, sb)
	for _, what := range []string{"memfd-mapped-only", "shared"} {
		out, res := helped(t, sb, what, 100_000_000, "6s")
		if os.Geteuid() == 0 {
			require.Equal(t, -1, res.ExitCode, "%s: %s", what, out)
			require.Contains(t, res.Exceeded, "of memory together, over the limit of 64 MiB", what)
			require.Equal(t, "ready\n", out)
		} else {
			require.Equal(t, 0, res.ExitCode, "%s: %s", what, out)
			require.Empty(t, res.Exceeded, what)
		}
	}
}

// slowLooks is how often the tests that need their helper's memory written before the
// first look have the sandbox look.
const slowLooks = 2 * time.Second

// helped runs helper in sb (see installHelper), making size bytes of what and holding
// them for hold, and returns its output and result.
func helped(t *testing.T, sb sandbox.Sandbox, what string, size int, hold string) (string, sandbox.ExecResult) {
	t.Helper()
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: fmt.Sprintf("%s=%s ./helper %d %s", helperEnv, what, size, hold), Timeout: 30 * time.Second, Output: &out,
	})
	require.NoError(t, err)
	require.False(t, res.TimedOut, "not stopped: %s", out.String())
	return out.String(), res
}

// SysV shared memory counts towards the memory of the sandbox's processes, attached or
// not: the sandbox's own process reports it from the command's IPC namespace. The looks
// are slower here, so that the first comes once the segment is detached.
func TestLimitMemorySysV(t *testing.T) {
	p := newProvider(t, bwrap.Config{Limits: &bwrap.Limits{TotalMemory: 64 << 20}, WatchEvery: slowLooks, DiskEvery: slowLooks})
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	installHelper(t, p, sb)
	out, res := helped(t, sb, "sysv", 100_000_000, "1000s")
	require.Equal(t, -1, res.ExitCode, out)
	require.Contains(t, res.Exceeded, "of memory together, over the limit of 64 MiB")
	require.Equal(t, "ready\n", out)
	stillWorks(t, p, sb)
}

// A command that stops the sandbox's own process, which reports its SysV shared memory,
// is stopped.
func TestLimitMemoryStoppedReports(t *testing.T) {
	p := newProvider(t, fast(bwrap.Limits{TotalMemory: 64 << 20}))
	sb, err := p.Create(context.Background())
	require.NoError(t, err)
	var out bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Command: "echo stopping; kill -STOP $PPID; sleep 1000", Timeout: 30 * time.Second, Output: &out,
	})
	require.NoError(t, err)
	require.False(t, res.TimedOut, "not stopped: %s", out.String())
	require.Equal(t, -1, res.ExitCode, out.String())
	require.Equal(t, "its processes stopped the sandbox's own process, which measures the command's SysV shared memory", res.Exceeded)
	require.Equal(t, "stopping\n", out.String(), "resumed, it sends the output")
	stillWorks(t, p, sb)
}
