package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// PrepareDir makes dir ready to hold sandboxes and returns its absolute path. A missing
// dir is created, mode 0700 (missing parents 0711: traversable, not listable, so that a
// sandbox user other than chatd's can still reach it). An existing one must be a real
// directory (not a symbolic link), belong to chatd's user and be writable by no one else:
// whoever can write to it, or made it, could read every workspace or plant files and
// links in one before its sandbox runs.
func PrepareDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	fi, err := os.Lstat(abs)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(abs), 0o711); err != nil {
			return "", err
		}
		// Mkdir does not follow a symbolic link put in its place meanwhile: it fails, and
		// the check below sees what is there.
		if err := os.Mkdir(abs, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", err
		}
		fi, err = os.Lstat(abs)
	}
	if err != nil {
		return "", err
	}
	if err := checkDir(abs, fi); err != nil {
		return "", err
	}
	return abs, nil
}

// checkDir refuses a sandbox directory that is not chatd's alone.
func checkDir(dir string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link: name the directory it points to, if that is chatd's", dir)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot tell who owns it", dir)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("%s belongs to uid %d, not to chatd's user (uid %d): whoever made it can read and plant workspaces; remove it or name another directory", dir, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by others than its owner (mode %04o): run chmod go-w on it or name another directory", dir, fi.Mode().Perm())
	}
	return nil
}

// MkdirNoFollow creates directory name in the directory open as dirfd (unix.AT_FDCWD for
// the working directory), with mode perm, and returns it open. It never follows a
// symbolic link: Mkdirat fails on an existing name, and the name is opened with
// O_NOFOLLOW and checked to be the directory just made (a directory of chatd's user).
// The caller closes the file.
func MkdirNoFollow(dirfd int, name string, perm uint32) (*os.File, error) {
	if err := unix.Mkdirat(dirfd, name, perm); err != nil {
		return nil, &fs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, fmt.Errorf("%s: made as uid %d, found owned by uid %d", name, os.Geteuid(), st.Uid)
	}
	return f, nil
}
