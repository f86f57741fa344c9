package sandbox_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/chatd/chatd/agent/sandbox"
)

// removeEnv, set, makes the test binary a RemoveDir of its two arguments (the test runs
// it as another user) instead of the tests.
const removeEnv = "CHATD_TEST_REMOVE_DIR"

func TestMain(m *testing.M) {
	if os.Getenv(removeEnv) != "" {
		if err := sandbox.RemoveDir(os.Args[1], os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// sandboxTree makes a sandbox's directory, box, in a new sandbox directory, with what a
// sandbox can leave in its workspace: nested directories, files, links pointing out of
// it (to a file, a directory and /), and directories it made unreadable and unwritable.
// outside is a directory beside the sandbox directory that the links point into.
func sandboxTree(t *testing.T, base string) (dir, outside string) {
	t.Helper()
	dir, err := sandbox.PrepareDir(filepath.Join(base, "sandboxes"))
	require.NoError(t, err)
	outside = filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(filepath.Join(outside, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "precious"), []byte("keep"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "sub", "precious"), []byte("keep"), 0o644))

	ws := filepath.Join(dir, "box", "workspace")
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "a", "b", "c"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "a", "b", "c", "file"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "readonly"), []byte("x"), 0o400))
	require.NoError(t, os.Symlink(filepath.Join(outside, "precious"), filepath.Join(ws, "to-file")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "sub"), filepath.Join(ws, "to-dir")))
	require.NoError(t, os.Symlink("/", filepath.Join(ws, "to-root")))
	require.NoError(t, os.Symlink("../../../outside", filepath.Join(ws, "a", "up")))
	require.NoError(t, unix.Mkfifo(filepath.Join(ws, "fifo"), 0o600))
	for _, mode := range []uint32{0o500, 0o300, 0o000} {
		locked := filepath.Join(ws, fmt.Sprintf("locked%o", mode))
		require.NoError(t, os.MkdirAll(filepath.Join(locked, "inner"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(locked, "inner", "file"), []byte("x"), 0o644))
		require.NoError(t, os.Symlink(outside, filepath.Join(locked, "inner", "out")))
		require.NoError(t, unix.Chmod(filepath.Join(locked, "inner"), mode))
		require.NoError(t, unix.Chmod(locked, mode))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "box", ".killed"), nil, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "neighbour", "workspace"), 0o755))
	return dir, outside
}

// requireOutsideIntact checks that nothing the links pointed to was touched.
func requireOutsideIntact(t *testing.T, dir, outside string) {
	t.Helper()
	for _, f := range []string{"precious", "sub/precious"} {
		b, err := os.ReadFile(filepath.Join(outside, f))
		require.NoError(t, err, f)
		require.Equal(t, "keep", string(b))
	}
	require.DirExists(t, filepath.Join(dir, "neighbour", "workspace"), "another sandbox's directory stays")
}

// A sandbox's directory goes with everything in it; what its links point to, and the
// sandbox directory's other entries, stay.
func TestRemoveDirRemovesTheTreeAndNothingElse(t *testing.T) {
	t.Parallel()
	dir, outside := sandboxTree(t, t.TempDir())
	require.NoError(t, sandbox.RemoveDir(dir, "box"))
	require.NoDirExists(t, filepath.Join(dir, "box"))
	requireOutsideIntact(t, dir, outside)
	require.NoError(t, sandbox.RemoveDir(dir, "box"), "a name that is not there is not an error")
}

// A tree deeper than any path (a sandbox can nest directories without end) is removed
// with a bounded number of descriptors.
func TestRemoveDirRemovesADeepTree(t *testing.T) {
	t.Parallel()
	dir, err := sandbox.PrepareDir(filepath.Join(t.TempDir(), "sandboxes"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "box", "workspace"), 0o755))
	fd, err := unix.Open(filepath.Join(dir, "box", "workspace"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	name := strings.Repeat("d", 200) // 1000 levels of it are far beyond PATH_MAX
	for i := range 1000 {
		require.NoError(t, unix.Mkdirat(fd, name, 0o755))
		if i%100 == 0 {
			require.NoError(t, unix.Mkdirat(fd, "side", 0o755))
			side, err := unix.Openat(fd, "side/", unix.O_RDONLY|unix.O_DIRECTORY, 0)
			require.NoError(t, err)
			require.NoError(t, unix.Mkdirat(side, "x", 0o500))
			require.NoError(t, unix.Close(side))
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		require.NoError(t, err)
		require.NoError(t, unix.Close(fd))
		fd = next
	}
	require.NoError(t, unix.Close(fd))

	require.NoError(t, sandbox.RemoveDir(dir, "box"))
	require.NoDirExists(t, filepath.Join(dir, "box"))
}

// Nothing that chatd did not make is removed: not a link in the sandbox directory, nor
// what it points to, nor a file, nor a directory of another user's; and nothing in a
// sandbox directory that others could have written to.
func TestRemoveDirRefuses(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir, outside := sandboxTree(t, base)

	for _, name := range []string{"", ".", "..", "box/workspace", "../outside"} {
		require.Error(t, sandbox.RemoveDir(dir, name), "%q", name)
	}
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "planted")))
	require.ErrorContains(t, sandbox.RemoveDir(dir, "planted"), "symbolic link")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o600))
	require.ErrorContains(t, sandbox.RemoveDir(dir, "file"), "not a directory")
	requireOutsideIntact(t, dir, outside)

	// The sandbox directory itself as a link: it is not followed.
	link := filepath.Join(base, "link")
	require.NoError(t, os.Symlink(dir, link))
	require.Error(t, sandbox.RemoveDir(link, "box"))
	require.DirExists(t, filepath.Join(dir, "box"))

	require.NoError(t, os.Chmod(dir, 0o777))
	require.ErrorContains(t, sandbox.RemoveDir(dir, "box"), "writable by others")
	require.DirExists(t, filepath.Join(dir, "box"))
	require.NoError(t, os.Chmod(dir, 0o700))

	if os.Geteuid() != 0 {
		t.Log("not root: the test of a directory of another user's is skipped")
		return
	}
	require.NoError(t, os.Chown(filepath.Join(dir, "neighbour"), 65534, 65534))
	require.ErrorContains(t, sandbox.RemoveDir(dir, "neighbour"), "belongs to uid 65534")
	require.DirExists(t, filepath.Join(dir, "neighbour", "workspace"))
}

// chatd not running as root (bwrap's commands then run as chatd's user too) removes a
// tree whose directories the sandbox made unreadable and unwritable: it gives them back
// to itself first. Run as root, the test runs RemoveDir as another user (nobody) on a
// tree of that user's.
func TestRemoveDirAsAnOrdinaryUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		// Already an ordinary user: the first test removed its locked directories.
		t.Skip("covered by TestRemoveDirRemovesTheTreeAndNothingElse when not root")
	}
	base, err := os.MkdirTemp("", "removedir")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	require.NoError(t, os.Chmod(base, 0o711)) // nobody reaches what it owns below
	dir, outside := sandboxTree(t, base)
	require.NoError(t, filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, 65534, 65534)
	}))
	// The test binary, where nobody can run it.
	self, err := os.Executable()
	require.NoError(t, err)
	bin, err := os.ReadFile(self)
	require.NoError(t, err)
	remover := filepath.Join(base, "remove")
	require.NoError(t, os.WriteFile(remover, bin, 0o755))
	cmd := exec.Command(remover, dir, "box")
	cmd.Env = append(os.Environ(), removeEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoDirExists(t, filepath.Join(dir, "box"))
	requireOutsideIntact(t, dir, outside)
}
