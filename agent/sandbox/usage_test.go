package sandbox_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/sandbox"
)

// blocks is what path takes on disk, at least 4 KiB, as DiskUsage counts it.
func blocks(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	return max(fi.Sys().(*syscall.Stat_t).Blocks*512, 4096)
}

func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "big"), make([]byte, 8<<20), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "b", "f"), make([]byte, 1<<20), 0o644))
	require.NoError(t, os.Link(filepath.Join(dir, "a", "b", "f"), filepath.Join(dir, "a", "hard")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "big"), filepath.Join(dir, "link")))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "dirlink")))
	for i := range 100 {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "a", "empty"+string(rune('0'+i%10))+string(rune('0'+i/10))), nil, 0o644))
	}
	want := blocks(t, dir) + blocks(t, filepath.Join(dir, "a")) + blocks(t, filepath.Join(dir, "a", "b")) +
		blocks(t, filepath.Join(dir, "a", "b", "f")) + 4096 + blocks(t, filepath.Join(dir, "link")) + blocks(t, filepath.Join(dir, "dirlink")) +
		100*4096
	got, err := sandbox.DiskUsage(dir, 0)
	require.NoError(t, err)
	require.Equal(t, want, got, "the file once, its hard link 4 KiB, the links' targets not at all, each empty file 4 KiB")
	require.GreaterOrEqual(t, got, int64(1<<20+100*4096))

	// Bounded, it stops once over the bound.
	got, err = sandbox.DiskUsage(dir, 100<<10)
	require.NoError(t, err)
	require.Greater(t, got, int64(100<<10))
	require.Less(t, got, want)

	// A tree too deep to walk is an error: what is below cannot be counted.
	deep := t.TempDir()
	p := deep
	for range sandbox.MaxUsageDepth + 1 {
		p = filepath.Join(p, "d")
		require.NoError(t, os.Mkdir(p, 0o755))
	}
	_, err = sandbox.DiskUsage(deep, 0)
	require.ErrorIs(t, err, sandbox.ErrTooDeep)
	require.True(t, strings.HasPrefix(err.Error(), "d/d/d/"), err.Error())
	require.NoError(t, os.Remove(p))
	_, err = sandbox.DiskUsage(deep, 0)
	require.NoError(t, err, "as deep as it walks")
}

// Every directory entry counts, a file's further hard links too: links to one file cannot
// pile up for nothing (and make every walk long) under the limit.
func TestDiskUsageCountsEveryLink(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(f, make([]byte, 64<<10), 0o644))
	const links = 1000
	for i := range links {
		require.NoError(t, os.Link(f, filepath.Join(dir, "l"+strconv.Itoa(i))))
	}
	want := blocks(t, dir) + blocks(t, f) + links*sandbox.MinEntryUsage
	got, err := sandbox.DiskUsage(dir, 0)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// Bounded, the walk stops once the links alone are over the bound.
	got, err = sandbox.DiskUsage(dir, 100*sandbox.MinEntryUsage)
	require.NoError(t, err)
	require.Greater(t, got, int64(100*sandbox.MinEntryUsage))
	require.LessOrEqual(t, got, int64(100*sandbox.MinEntryUsage)+blocks(t, f))
}
