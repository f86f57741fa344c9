package sandbox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/chatd/chatd/agent/sandbox"
)

func TestPrepareDirCreates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b", "sandboxes")
	got, err := sandbox.PrepareDir(dir)
	require.NoError(t, err)
	require.Equal(t, dir, got)
	fi, err := os.Lstat(dir)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
	require.Zero(t, fi.Mode().Perm()&0o077, "mode %v: others may list it", fi.Mode())
	// The parents it made are traversable, not listable.
	fi, err = os.Lstat(filepath.Dir(dir))
	require.NoError(t, err)
	require.Zero(t, fi.Mode().Perm()&0o066, "mode %v", fi.Mode())

	// An existing one of chatd's, not writable by others, is fine: 0711 too.
	require.NoError(t, os.Chmod(dir, 0o711))
	_, err = sandbox.PrepareDir(dir)
	require.NoError(t, err)
}

// A sandbox directory someone else could have made, or can write to, is refused.
func TestPrepareDirRefuses(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	require.NoError(t, os.Mkdir(real, 0o700))

	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(real, link))
	_, err := sandbox.PrepareDir(link)
	require.ErrorContains(t, err, "symbolic link")

	// A dangling link: Stat would see nothing and make the directory it points to.
	dangling := filepath.Join(base, "dangling")
	target := filepath.Join(base, "planted")
	require.NoError(t, os.Symlink(target, dangling))
	_, err = sandbox.PrepareDir(dangling)
	require.ErrorContains(t, err, "symbolic link")
	require.NoDirExists(t, target)

	file := filepath.Join(base, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = sandbox.PrepareDir(file)
	require.ErrorContains(t, err, "not a directory")

	for _, mode := range []os.FileMode{0o777, 0o770, 0o1777, 0o702} {
		open := filepath.Join(base, fmt.Sprintf("open%o", mode))
		require.NoError(t, os.Mkdir(open, 0o700))
		require.NoError(t, unix.Chmod(open, uint32(mode)))
		_, err = sandbox.PrepareDir(open)
		require.ErrorContains(t, err, "writable by others", "mode %o", mode)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: the test of a directory of another user's is skipped")
		return
	}
	theirs := filepath.Join(base, "theirs")
	require.NoError(t, os.Mkdir(theirs, 0o700))
	require.NoError(t, os.Chown(theirs, 65534, 65534))
	_, err = sandbox.PrepareDir(theirs)
	require.ErrorContains(t, err, "belongs to uid 65534")
}

func TestMkdirNoFollow(t *testing.T) {
	base := t.TempDir()
	dir, err := os.Open(base)
	require.NoError(t, err)
	defer dir.Close()
	f, err := sandbox.MkdirNoFollow(int(dir.Fd()), "box", 0o700)
	require.NoError(t, err)
	f.Close()
	require.DirExists(t, filepath.Join(base, "box"))

	// A link planted by the name is not followed.
	target := t.TempDir()
	require.NoError(t, os.Symlink(target, filepath.Join(base, "planted")))
	_, err = sandbox.MkdirNoFollow(int(dir.Fd()), "planted", 0o700)
	require.Error(t, err)
	entries, err := os.ReadDir(target)
	require.NoError(t, err)
	require.Empty(t, entries)
}
