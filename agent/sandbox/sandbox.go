// Package sandbox defines where an agent's tools run commands: a per-session sandbox that
// can be created, resumed, paused and killed. Implementations live in subpackages (local
// runs child processes on this machine); a hosted one (an E2B-style HTTP API) implements
// the same two interfaces, and the agent loop does not change.
package sandbox

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrGone is returned for a sandbox that was killed or never existed: its session needs
// a new one.
var ErrGone = errors.New("sandbox is gone")

// ErrPaused is returned by Exec on a paused sandbox; Connect resumes it.
var ErrPaused = errors.New("sandbox is paused")

// Provider creates and manages sandboxes by id. Ids are opaque strings the caller stores
// (chatd keeps one per session) and hands back later, possibly to another process.
type Provider interface {
	// Create starts a new sandbox.
	Create(ctx context.Context) (Sandbox, error)
	// Connect returns the sandbox with id, resuming it if it is paused. It returns
	// ErrGone when the sandbox was killed or is unknown.
	Connect(ctx context.Context, id string) (Sandbox, error)
	// Pause freezes the sandbox and everything running in it, to save resources while
	// its session waits. Pausing a paused sandbox is a no-op; ErrGone as for Connect.
	Pause(ctx context.Context, id string) error
	// Kill ends the sandbox and everything running in it. Killing a gone sandbox is not
	// an error. What the sandbox wrote (its workspace) is kept until Remove.
	Kill(ctx context.Context, id string) error
	// Remove kills the sandbox, as Kill does, then deletes its workspace and whatever
	// else the provider keeps of it: the id is gone for good. Removing a sandbox that is
	// not there is not an error. The caller makes sure nothing uses the sandbox any more
	// (chatd removes only sandboxes no live session has).
	Remove(ctx context.Context, id string) error
}

// File is a file of a session's workspace.
type File struct {
	// Path is relative to the workspace, with / between its parts.
	Path       string    `json:"path"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modifiedAt"`
}

// Errors of listing and serving a session's workspace.
var (
	// ErrNoWorkspace: the session has no workspace (it never ran a tool that needed a
	// sandbox, or its workspaces were removed), or the provider keeps none on disk.
	ErrNoWorkspace = errors.New("the session has no workspace")
	// ErrWorkspaceElsewhere: the session's workspace is on another chatd node's machine.
	ErrWorkspaceElsewhere = errors.New("the session's workspace is on another chatd node")
	// ErrBadPath: a path that is not a relative path inside the workspace.
	ErrBadPath = errors.New("the path must be relative to the workspace, without . or .. parts, a leading / or control characters")
)

// Workspaces is a Provider whose sandboxes' workspaces are directories on this machine,
// which chatd lists and serves (GET /v1/sessions/{id}/files).
type Workspaces interface {
	// Workspace returns the directory of sandbox id's workspace (which may not exist).
	Workspace(id string) string
}

// Sandbox runs commands.
type Sandbox interface {
	ID() string
	// Exec runs a shell command and waits for it. Output (stdout and stderr together)
	// is written to req.Output as it comes. The command is killed, with everything it
	// started, when ctx ends or the timeout passes.
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
}

// ExecRequest is a command to run.
type ExecRequest struct {
	Command string
	Timeout time.Duration // 0 for none beyond ctx
	Output  io.Writer     // may be nil
	// OutputLimit, when positive, is how much of the command's output its caller keeps:
	// a provider that can (bwrap) keeps the first and the last half of a longer output
	// where the command runs, with OmittedMarker between them, so that Output receives
	// at most OutputLimit+MaxMarker bytes and chatd reads no more. Others pass on all of
	// it, and the caller keeps what it wants (HeadTail).
	OutputLimit int
}

// ExecResult is how a command ended.
type ExecResult struct {
	ExitCode int  // -1 when it was killed
	TimedOut bool // killed because the timeout passed
	// Exceeded, when not empty, says which of the sandbox's limits the command crossed:
	// the sandbox stopped it (ExitCode -1), or the kernel killed one of its processes for
	// it (ExitCode is then the shell's, such as 152 for CPU time).
	Exceeded string
}
