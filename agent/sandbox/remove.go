package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	// removeBatch is how many names RemoveDir reads from a directory at a time.
	removeBatch = 1024
	// maxRemoveDepth bounds the directories RemoveDir holds open at once: a subdirectory
	// found deeper is moved up to the top of the tree and removed from there, so that a
	// tree of any depth (a sandbox can nest directories without end) needs no more
	// descriptors than this.
	maxRemoveDepth = 32
)

// RemoveDir removes name, a sandbox's directory in dir (a provider's directory, which
// PrepareDir accepted), and everything in it. It is how a provider deletes a workspace,
// and it deletes nothing else:
//
//   - dir must still be chatd's alone (as PrepareDir checks), and name a directory in it,
//     not a symbolic link, that chatd's user owns: one that chatd made.
//   - Nothing is reached through a symbolic link: each directory is opened relative to
//     its parent's descriptor without following one, and a link in the tree is removed,
//     never what it points to, so a sandbox cannot aim the removal outside its workspace.
//   - It stays on dir's file system: a directory in the tree that is on another one (a
//     mount point) stops the removal with an error and is left alone.
//
// A directory in the tree that the sandbox made unreadable or unwritable (chmod 0, say)
// is given back to its owner's use first, when that is chatd's user; as root,
// permissions do not stop it anyway. A name that is not there is not an error. The
// caller kills the sandbox's processes first: one still writing in the tree can make
// the removal fail, and a later call tries again.
func RemoveDir(dir, name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("remove %q from %s: not the name of a sandbox's directory", name, dir)
	}
	parent, err := openDir(unix.AT_FDCWD, dir)
	if err != nil {
		return fmt.Errorf("remove %s from %s: %w", name, dir, err)
	}
	defer parent.Close()
	fi, err := parent.Stat()
	if err != nil {
		return fmt.Errorf("remove %s from %s: %w", name, dir, err)
	}
	if err := checkDir(dir, fi); err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	top, err := openDir(int(parent.Fd()), name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("remove %s from %s: not a directory (a symbolic link or a file): chatd did not make it", name, dir)
	case err != nil:
		return fmt.Errorf("remove %s from %s: %w", name, dir, err)
	}
	defer top.Close()
	var pst, st unix.Stat_t
	if err := unix.Fstat(int(parent.Fd()), &pst); err != nil {
		return fmt.Errorf("remove %s from %s: %w", name, dir, err)
	}
	if err := unix.Fstat(int(top.Fd()), &st); err != nil {
		return fmt.Errorf("remove %s from %s: %w", name, dir, err)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("remove %s from %s: it belongs to uid %d, not to chatd's user (uid %d): chatd did not make it", name, dir, st.Uid, os.Geteuid())
	}
	if st.Dev != pst.Dev {
		return fmt.Errorf("remove %s from %s: it is on another file system (a mount point)", name, dir)
	}
	r := &remover{top: int(top.Fd()), dev: st.Dev}
	for {
		moved := r.moved
		err := r.remove(int(parent.Fd()), name, name, 0)
		if err == nil || r.moved == moved {
			if err != nil {
				return fmt.Errorf("remove sandbox directory %s: %w", path.Join(dir, name), err)
			}
			return nil
		}
		// Deep subdirectories were moved up to the top meanwhile: remove those too.
	}
}

// remover is one RemoveDir's walk.
type remover struct {
	top   int    // the tree's top directory, open: where deep subdirectories are moved
	dev   uint64 // the tree's file system
	moved int    // subdirectories moved up so far
}

// remove removes directory name in the directory open as parent, at depth below the
// top, with everything in it; rel names it for errors. Like os.RemoveAll it reads the
// directory a batch at a time and opens it again for the next batch: removing entries
// may reorder a directory, and reading on could skip some.
func (r *remover) remove(parent int, name, rel string, depth int) error {
	var firstErr error
	for {
		d, err := r.open(parent, name, rel)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		var read int
		for {
			names, rerr := d.Readdirnames(removeBatch)
			if rerr != nil && rerr != io.EOF {
				d.Close()
				return &fs.PathError{Op: "read", Path: rel, Err: rerr}
			}
			read = len(names)
			failed := 0
			for _, child := range names {
				if err := r.removeChild(int(d.Fd()), child, rel+"/"+child, depth+1); err != nil {
					failed++
					if firstErr == nil {
						firstErr = err
					}
				}
			}
			// A batch none of whose entries could go is skipped, to reach the others.
			if failed != removeBatch {
				break
			}
		}
		d.Close()
		if read < removeBatch {
			break
		}
	}
	err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
	switch {
	case err == nil || errors.Is(err, unix.ENOENT):
		return nil
	case firstErr != nil:
		return firstErr
	}
	return &fs.PathError{Op: "remove", Path: rel, Err: err}
}

// removeChild removes name, at depth, from the directory open as parent: a file or a
// symbolic link at once, a directory with what it holds.
func (r *remover) removeChild(parent int, name, rel string, depth int) error {
	err := unix.Unlinkat(parent, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return &fs.PathError{Op: "remove", Path: rel, Err: err}
	}
	if depth < maxRemoveDepth {
		return r.remove(parent, name, rel, depth)
	}
	return r.moveUp(parent, name, rel)
}

// moveUp moves directory name, too deep to open, from parent to the top of the tree,
// where a later round of RemoveDir removes it.
func (r *remover) moveUp(parent int, name, rel string) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	to := ".removing-" + strconv.Itoa(r.moved) + "-" + hex.EncodeToString(b[:])
	rename := func() error {
		err := unix.Renameat2(parent, name, r.top, to, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) { // a file system without flags: the name is random
			err = unix.Renameat(parent, name, r.top, to)
		}
		return err
	}
	err := rename()
	if errors.Is(err, unix.EACCES) {
		// Moving a directory rewrites its "..": it must be writable.
		if err = r.makeUsable(parent, name, rel); err == nil {
			err = rename()
		}
	}
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "move", Path: rel, Err: err}
	}
	r.moved++
	return nil
}

// open opens directory name in parent for the removal, without following a symbolic
// link, and makes it readable, writable and searchable for chatd's user when it is
// theirs. It refuses a directory on another file system.
func (r *remover) open(parent int, name, rel string) (*os.File, error) {
	d, err := openDir(parent, name)
	if errors.Is(err, unix.EACCES) {
		if err = r.makeUsable(parent, name, rel); err == nil {
			d, err = openDir(parent, name)
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		d.Close()
		return nil, &fs.PathError{Op: "stat", Path: rel, Err: err}
	}
	if st.Dev != r.dev {
		d.Close()
		return nil, fmt.Errorf("%s is on another file system (a mount point): left alone", rel)
	}
	if st.Mode&0o700 != 0o700 && int(st.Uid) == os.Geteuid() {
		if err := unix.Fchmod(int(d.Fd()), st.Mode&0o7777|0o700); err != nil {
			d.Close()
			return nil, &fs.PathError{Op: "chmod", Path: rel, Err: err}
		}
	}
	return d, nil
}

// makeUsable gives directory name in parent, which chatd's user cannot open or move,
// back to that user's use (u+rwx), when it is theirs. It is reached through a descriptor
// that pins it (O_PATH, without following a link): a name swapped meanwhile for a link
// changes nothing outside the tree.
func (r *remover) makeUsable(parent int, name, rel string) error {
	fd, err := unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: rel, Err: err}
	}
	if int(st.Uid) != os.Geteuid() {
		return &fs.PathError{Op: "open", Path: rel, Err: unix.EACCES}
	}
	// fchmod does not take an O_PATH descriptor; its /proc link reaches the same inode.
	if err := unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), st.Mode&0o7777|0o700); err != nil {
		return &fs.PathError{Op: "chmod", Path: rel, Err: err}
	}
	return nil
}

// openDir opens directory name in the directory open as dirfd (unix.AT_FDCWD for the
// working directory) without following a symbolic link. Its error is the system's.
func openDir(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}
