package sandbox_test

import (
	"os"
	"path/filepath"
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
		blocks(t, filepath.Join(dir, "a", "b", "f")) + blocks(t, filepath.Join(dir, "link")) + blocks(t, filepath.Join(dir, "dirlink")) +
		100*4096
	got, err := sandbox.DiskUsage(dir, 0)
	require.NoError(t, err)
	require.Equal(t, want, got, "the file once, its hard link not again, the links' targets not at all, each empty file 4 KiB")
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
