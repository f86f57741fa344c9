package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

const (
	// MaxUsageDepth bounds how deep DiskUsage walks: it holds a directory open at each
	// level, and a sandbox can nest them without end.
	MaxUsageDepth = 128
	// MinEntryUsage is the least each directory entry counts for in DiskUsage, a file's
	// further hard links included: an empty file takes no block, but an inode, and a
	// million of them (or a million links to one file) would otherwise count for nothing,
	// and cost a walk as much as a workspace of gigabytes.
	MinEntryUsage = 4096
)

// ErrTooDeep is returned by DiskUsage for a tree deeper than MaxUsageDepth.
var ErrTooDeep = fmt.Errorf("directories nested deeper than %d levels", MaxUsageDepth)

// DiskUsage is how much of its file system the tree at dir takes: the blocks of every
// file, directory and link in it, each counting at least MinEntryUsage (4 KiB), a file
// with several hard links by its blocks once and by MinEntryUsage at each further link,
// so that no entry counts for nothing. It is what a sandbox's workspace is held to. Like RemoveDir it follows no
// symbolic link and stays on dir's file system (a mount point in the tree counts as one
// entry). Once the total is over most (when positive) it stops and returns what it has
// counted so far, over most: a tree much larger than its limit costs no more to measure
// than one at it.
//
// It fails for a tree deeper than MaxUsageDepth (ErrTooDeep) or with a directory it
// cannot read (its permissions taken away, when chatd does not run as root): what is in
// it cannot be counted, and a limit must not be got around so. Entries removed while it
// walks are not an error.
func DiskUsage(dir string, most int64) (int64, error) {
	top, err := openDir(unix.AT_FDCWD, dir)
	if err != nil {
		return 0, err
	}
	defer top.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(top.Fd()), &st); err != nil {
		return 0, &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	u := &usage{dev: st.Dev, most: most, total: entryUsage(&st), links: map[uint64]bool{}}
	err = u.walk(top, ".", 1)
	if errors.Is(err, errOverMost) {
		err = nil
	}
	return u.total, err
}

// errOverMost stops a walk whose total is over its bound.
var errOverMost = errors.New("over the bound")

// usage is one DiskUsage's walk.
type usage struct {
	dev   uint64
	most  int64
	total int64
	links map[uint64]bool // inodes with several links, counted
}

func entryUsage(st *unix.Stat_t) int64 {
	return max(st.Blocks*512, MinEntryUsage)
}

// walk counts what directory d, at rel and depth, holds.
func (u *usage) walk(d *os.File, rel string, depth int) error {
	for {
		names, rerr := d.Readdirnames(1024)
		for _, name := range names {
			if err := u.entry(int(d.Fd()), name, path.Join(rel, name), depth); err != nil {
				return err
			}
		}
		if rerr == io.EOF || (rerr == nil && len(names) == 0) {
			return nil
		}
		if rerr != nil {
			return &fs.PathError{Op: "read", Path: rel, Err: rerr}
		}
	}
}

// entry counts name, in the directory open as parent, with what it holds.
func (u *usage) entry(parent int, name, rel string, depth int) error {
	var st unix.Stat_t
	err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "stat", Path: rel, Err: err}
	}
	size := entryUsage(&st)
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if u.links[st.Ino] {
			size = MinEntryUsage // a further link: its entry, not the file again
		}
		u.links[st.Ino] = true
	}
	u.total += size
	if u.most > 0 && u.total > u.most {
		return errOverMost
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != u.dev {
		return nil
	}
	if depth > MaxUsageDepth {
		return fmt.Errorf("%s: %w", rel, ErrTooDeep)
	}
	d, err := openDir(parent, name)
	switch {
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return nil // gone, or replaced by a file or a link, counted already
	case err != nil:
		return &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	defer d.Close()
	return u.walk(d, rel, depth+1)
}
