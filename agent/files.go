package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/chatd/chatd/agent/sandbox"
)

// File is a file of a session's workspace (sandbox.File).
type File = sandbox.File

// MaxFiles bounds a workspace's listing.
const MaxFiles = 10_000

// Errors of Files and OpenFile (the sandbox package's, so that callers need not import
// this one).
var (
	ErrNoWorkspace        = sandbox.ErrNoWorkspace
	ErrWorkspaceElsewhere = sandbox.ErrWorkspaceElsewhere
	ErrBadPath            = sandbox.ErrBadPath
)

// Files lists the files of the session's workspace: its sandbox's now, or, once that was
// killed, the last one it had until the retention removes it. Directories are implied
// by the paths; symbolic links and other non-regular files are left out. More than
// MaxFiles are cut (more reports it).
func (s *Sandboxes) Files(ctx context.Context, sessionID uuid.UUID) (files []File, more bool, err error) {
	id, err := s.workspaceOf(ctx, sessionID)
	if err != nil {
		return nil, false, err
	}
	return s.listWorkspace(id, MaxFiles)
}

// OpenFile opens a file of the session's workspace for reading. The path is checked
// (ErrBadPath), and it may not leave the workspace, through .. or a symbolic link.
func (s *Sandboxes) OpenFile(ctx context.Context, sessionID uuid.UUID, name string) (*os.File, fs.FileInfo, error) {
	if !ValidWorkspacePath(name) {
		return nil, nil, ErrBadPath
	}
	id, err := s.workspaceOf(ctx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	ws, ok := s.provider.(sandbox.Workspaces)
	if !ok {
		return nil, nil, ErrNoWorkspace
	}
	root, err := os.OpenRoot(ws.Workspace(id))
	if err != nil {
		return nil, nil, ErrNoWorkspace
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a file: %w", name, fs.ErrNotExist)
		}
		return nil, nil, err
	}
	return f, info, nil
}

// ValidWorkspacePath tells a path a workspace file may have: relative, clean (no ., ..
// or empty parts), valid UTF-8 without NUL or control characters.
func ValidWorkspacePath(name string) bool {
	if name == "" || !utf8.ValidString(name) || strings.HasPrefix(name, "/") || path.Clean(name) != name || !fs.ValidPath(name) {
		return false
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// workspaceOf is the sandbox whose workspace the session has on this node.
func (s *Sandboxes) workspaceOf(ctx context.Context, sessionID uuid.UUID) (string, error) {
	id, here, err := s.store.SessionWorkspace(ctx, sessionID)
	switch {
	case err != nil:
		return "", fmt.Errorf("look up the session's workspace: %w", err)
	case id == "":
		return "", ErrNoWorkspace
	case !here:
		return "", ErrWorkspaceElsewhere
	}
	return id, nil
}

// listWorkspace lists sandbox id's workspace, at most max files.
func (s *Sandboxes) listWorkspace(id string, max int) ([]File, bool, error) {
	ws, ok := s.provider.(sandbox.Workspaces)
	if !ok {
		return nil, false, ErrNoWorkspace
	}
	root, err := os.OpenRoot(ws.Workspace(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, ErrNoWorkspace
	}
	if err != nil {
		return nil, false, err
	}
	defer root.Close()
	files := []File{}
	more := false
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: left out
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if len(files) == max {
			more = true
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		files = append(files, File{Path: p, Size: info.Size(), ModifiedAt: info.ModTime().UTC()})
		return nil
	})
	return files, more, err
}

// humanSize writes n bytes for people: 12 B, 3.1 KiB, 2.0 MiB.
func humanSize(n int64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	case n < 1024*1024*1024:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1024*1024))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1024*1024*1024))
}
