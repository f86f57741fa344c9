// Package local is a sandbox provider that runs commands as child processes on this
// machine, each sandbox with its own workspace directory. Every command runs in its own
// process group, so pausing (SIGSTOP), resuming (SIGCONT) and killing (SIGKILL) reach
// everything it started. A killed sandbox keeps its directory (marked so that a later
// process also sees it is gone).
//
// It isolates nothing beyond the working directory: commands run as chatd's user. It is
// for development and for deployments where that is acceptable; use a hosted provider
// otherwise.
package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chatd/chatd/agent/sandbox"
)

const killedMarker = ".killed"

// Provider manages local sandboxes under a directory.
type Provider struct {
	dir string

	mu    sync.Mutex
	boxes map[string]*box
}

var _ sandbox.Provider = (*Provider)(nil)

// New returns a provider that keeps sandboxes under dir, creating it if needed.
func New(dir string) (*Provider, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox directory: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return &Provider{dir: abs, boxes: make(map[string]*box)}, nil
}

type state int

const (
	running state = iota
	paused
	killed
)

type box struct {
	id, root string

	mu     sync.Mutex
	state  state
	groups map[int]struct{} // process groups of running commands
}

// Workspace returns the working directory of sandbox id.
func (p *Provider) Workspace(id string) string {
	return filepath.Join(p.dir, id, "workspace")
}

// Create makes a new sandbox with an empty workspace.
func (p *Provider) Create(ctx context.Context) (sandbox.Sandbox, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "local-" + hex.EncodeToString(b[:])
	if err := os.MkdirAll(p.Workspace(id), 0o755); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	bx := &box{id: id, root: filepath.Join(p.dir, id), groups: make(map[int]struct{})}
	p.mu.Lock()
	p.boxes[id] = bx
	p.mu.Unlock()
	return &handle{p: p, b: bx}, nil
}

// lookup finds a sandbox, also one a previous process created (it has no processes
// left, so it counts as running).
func (p *Provider) lookup(id string) (*box, error) {
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return nil, sandbox.ErrGone
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if bx, ok := p.boxes[id]; ok {
		return bx, nil
	}
	root := filepath.Join(p.dir, id)
	if _, err := os.Stat(filepath.Join(root, "workspace")); err != nil {
		return nil, sandbox.ErrGone
	}
	bx := &box{id: id, root: root, groups: make(map[int]struct{})}
	if _, err := os.Stat(filepath.Join(root, killedMarker)); err == nil {
		bx.state = killed
	}
	p.boxes[id] = bx
	return bx, nil
}

// Connect returns the sandbox, resuming it (SIGCONT to its commands) if it is paused.
func (p *Provider) Connect(ctx context.Context, id string) (sandbox.Sandbox, error) {
	bx, err := p.lookup(id)
	if err != nil {
		return nil, err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	switch bx.state {
	case killed:
		return nil, sandbox.ErrGone
	case paused:
		bx.signal(syscall.SIGCONT)
		bx.state = running
	}
	return &handle{p: p, b: bx}, nil
}

// Pause stops every command of the sandbox (SIGSTOP to their process groups).
func (p *Provider) Pause(ctx context.Context, id string) error {
	bx, err := p.lookup(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	switch bx.state {
	case killed:
		return sandbox.ErrGone
	case running:
		bx.signal(syscall.SIGSTOP)
		// A child forked while the first signal was delivered did not get it; its parent
		// is stopped now and can fork no more, so a second signal reaches everything.
		bx.signal(syscall.SIGSTOP)
		bx.state = paused
	}
	return nil
}

// Kill ends every command of the sandbox and marks it gone. Its directory stays.
func (p *Provider) Kill(ctx context.Context, id string) error {
	bx, err := p.lookup(id)
	if errors.Is(err, sandbox.ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.state == killed {
		return nil
	}
	bx.signal(syscall.SIGKILL)
	bx.state = killed
	if err := os.WriteFile(filepath.Join(bx.root, killedMarker), nil, 0o644); err != nil {
		return fmt.Errorf("mark sandbox %s killed: %w", id, err)
	}
	return nil
}

// signal sends sig to every process group of the sandbox, forgetting empty ones. bx.mu
// is held.
func (bx *box) signal(sig syscall.Signal) {
	for pgid := range bx.groups {
		if syscall.Kill(-pgid, sig) != nil {
			delete(bx.groups, pgid) // no process left in it
			continue
		}
		if sig == syscall.SIGKILL {
			// A stopped process only dies once it runs again.
			_ = syscall.Kill(-pgid, syscall.SIGCONT)
		}
	}
}

type handle struct {
	p *Provider
	b *box
}

func (h *handle) ID() string { return h.b.id }

// Exec runs command with sh -c in the workspace, in a process group of its own.
func (h *handle) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	out := req.Output
	if out == nil {
		out = io.Discard
	}
	w := &lockedWriter{w: out}
	cmd := exec.Command("/bin/sh", "-c", req.Command)
	cmd.Dir = h.p.Workspace(h.b.id)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "HOME="+cmd.Dir)
	// A background child still holding the output pipe must not keep Exec waiting.
	cmd.WaitDelay = 2 * time.Second

	h.b.mu.Lock()
	switch h.b.state {
	case killed:
		h.b.mu.Unlock()
		return sandbox.ExecResult{}, sandbox.ErrGone
	case paused:
		h.b.mu.Unlock()
		return sandbox.ExecResult{}, sandbox.ErrPaused
	}
	if err := cmd.Start(); err != nil {
		h.b.mu.Unlock()
		return sandbox.ExecResult{}, fmt.Errorf("start command: %w", err)
	}
	pgid := cmd.Process.Pid
	h.b.groups[pgid] = struct{}{}
	h.b.mu.Unlock()

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var err error
	killedByCtx := false
	select {
	case err = <-waited:
	case <-ctx.Done():
		killedByCtx = true
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		err = <-waited
	}
	h.b.mu.Lock()
	// Processes the command left in the background keep its group alive: pause, resume
	// and kill must reach them too. A group id is not reused while the group has members,
	// so a live group is safe to keep; an empty one is forgotten.
	if syscall.Kill(-pgid, 0) != nil {
		delete(h.b.groups, pgid)
	}
	h.b.mu.Unlock()

	res := sandbox.ExecResult{ExitCode: cmd.ProcessState.ExitCode()}
	if killedByCtx {
		res.ExitCode = -1
		res.TimedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
		if !res.TimedOut {
			return res, ctx.Err()
		}
		return res, nil
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) && !errors.Is(err, exec.ErrWaitDelay) {
		return res, err
	}
	return res, nil
}

// lockedWriter serializes stdout and stderr, which exec copies from two goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close ends every process the provider's sandboxes are running, for a server shutdown.
// The sandboxes themselves stay usable: a later process connects to them by id (with
// nothing running in them).
func (p *Provider) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, bx := range p.boxes {
		bx.mu.Lock()
		bx.signal(syscall.SIGKILL)
		if bx.state == paused {
			bx.state = running
		}
		bx.mu.Unlock()
	}
}
