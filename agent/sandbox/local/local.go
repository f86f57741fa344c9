// Package local is a sandbox provider that runs commands as child processes on this
// (Linux) machine, each sandbox with its own workspace directory. Every command runs in its own
// process group, so pausing (SIGSTOP), resuming (SIGCONT) and killing (SIGKILL) reach
// everything it started. A killed sandbox keeps its directory (marked so that a later
// process also sees it is gone) until Remove deletes it.
//
// The directory is the sandbox's record; memory holds only what the directory cannot say:
// that a sandbox is paused, and which of its processes are still running (written down
// too, but only for a later process: see below). A sandbox with
// neither (and no call in progress) is forgotten, and read back from its directory when
// it is next asked for, so the provider's memory follows the sandboxes in use, not every
// sandbox it ever saw.
//
// Sandbox processes never outlive chatd. At shutdown, Close kills them. When chatd dies
// without closing (SIGKILL, a crash, the OOM killer), every command dies with it: it is
// started with a parent-death signal (SIGKILL), forked from an OS thread kept for that
// (Linux sends the signal when the forking thread ends, not the process; see package
// launcher).
// What a command left in the background does not inherit that signal; the next chatd on
// the directory kills it with Sweep, at start-up and before it serves. Sweep finds it
// without the dead process's memory, two ways (record.go, sweep.go):
//
//   - each sandbox's directory holds a record of the process groups its commands run in,
//     with their members by pid and start time, so that a pid the kernel gave to another
//     process since is never taken for ours; a group is killed while a member it names is
//     still in it;
//   - every command's environment carries CHATD_SANDBOX (its sandbox's directory) and
//     CHATD_SANDBOX_OWNER (the chatd process that started it), which what it starts
//     inherits, also when it leaves the group with setsid; such a process is killed with
//     its group.
//
// Processes of a live chatd (another one sharing the directory) are left alone, and so
// is every process neither way shows to be a sandbox's.
//
// The limits: between chatd's death and the next start on the directory, what commands
// left in the background runs on (and for good if none comes). Sweep sees only its own
// PID namespace. A process that clears its environment escapes it when nothing else
// shows its group to be a sandbox's: when it left the group too (setsid env -i …), or
// when no process the record names and none with the marker is left in it. Linux drops
// the parent-death signal of a command that executes a set-user-ID program.
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/internal/launcher"
)

const killedMarker = ".killed"

// Provider manages local sandboxes under a directory.
type Provider struct {
	dir string
	// launcher forks every command, from a thread that outlives it.
	launcher launcher.Launcher
	// self is this chatd process, boot the kernel's boot, and nonce tells this provider's
	// record files from those of others in the same process: they go into records and
	// commands' environments (record.go).
	self  owner
	boot  string
	nonce string

	// mu guards boxes and each box's users; it is taken before a box's own mu.
	mu    sync.Mutex
	boxes map[string]*box
}

var _ sandbox.Provider = (*Provider)(nil)

// New returns a provider that keeps sandboxes under dir, creating it if needed.
func New(dir string) (*Provider, error) {
	abs, err := sandbox.PrepareDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox directory: %w", err)
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	return &Provider{
		dir:   abs,
		boxes: make(map[string]*box),
		self:  owner{PID: os.Getpid(), Start: startTime(os.Getpid())},
		boot:  bootID(),
		nonce: hex.EncodeToString(nonce[:]),
	}, nil
}

type state int

const (
	running state = iota
	paused
	killed
)

// box is a sandbox while it is in memory: from the first call that needs it until it is
// forgettable and no call holds it.
type box struct {
	id, root string
	// users counts the calls holding the box (Provider.mu): it is not forgotten under them.
	users int

	mu    sync.Mutex
	state state
	// marked is set once a killed sandbox's marker is on disk.
	marked bool
	// groups are the process groups of the sandbox's commands and of what they left in
	// the background, by group id, with the members known to be ours.
	groups map[int]members
	// rec keeps groups on disk, for a later process should this one die.
	rec recordFile
}

// save writes the box's groups to its record. A killed sandbox has none worth keeping:
// everything in them was sent SIGKILL. bx.mu is held.
func (bx *box) save() error {
	if bx.state == killed {
		return bx.rec.save(nil)
	}
	return bx.rec.save(bx.groups)
}

// saveUpdate saves after a change that is not the start of a command. It is best effort:
// a record that lags still names members that were ours, which is what the sweep checks
// before it kills, and every process still carries its environment's marker.
func (bx *box) saveUpdate() {
	_ = bx.save()
}

// forgettable reports whether the directory says all the box knows: a running sandbox
// with no process left reads back the same, and so does a killed one whose marker is
// written. A paused sandbox is kept: that it is paused, and what to resume, is only here.
// bx.mu is held.
func (bx *box) forgettable() bool {
	switch bx.state {
	case running:
		return len(bx.groups) == 0
	case killed:
		return bx.marked
	}
	return false
}

// members maps the pids of a group's processes to their start times, which tell a live
// process of ours from a later one that reused its pid.
type members map[int]uint64

// Workspace returns the working directory of sandbox id.
func (p *Provider) Workspace(id string) string {
	return filepath.Join(p.dir, id, "workspace")
}

// Create makes a new sandbox with an empty workspace. Until something runs in it, its
// directory is all there is of it.
func (p *Provider) Create(ctx context.Context) (sandbox.Sandbox, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := "local-" + hex.EncodeToString(b[:])
	// Made without following a symbolic link, as the bwrap provider does.
	dir, err := os.OpenFile(p.dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer dir.Close()
	root, err := sandbox.MkdirNoFollow(int(dir.Fd()), id, 0o755)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer root.Close()
	ws, err := sandbox.MkdirNoFollow(int(root.Fd()), "workspace", 0o755)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	ws.Close()
	return &handle{p: p, id: id}, nil
}

// acquire finds a sandbox and holds it in memory until release: one in memory already,
// or else one read back from its directory (created by this process or a previous one;
// it has no processes of ours, so it counts as running unless marked killed).
func (p *Provider) acquire(id string) (*box, error) {
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return nil, sandbox.ErrGone
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	bx, ok := p.boxes[id]
	if !ok {
		root := filepath.Join(p.dir, id)
		if _, err := os.Stat(filepath.Join(root, "workspace")); err != nil {
			return nil, sandbox.ErrGone
		}
		bx = &box{id: id, root: root, groups: make(map[int]members), rec: recordFile{
			path:  filepath.Join(root, recordPrefix+p.nonce+recordSuffix),
			boot:  p.boot,
			owner: p.self,
		}}
		if _, err := os.Stat(filepath.Join(root, killedMarker)); err == nil {
			bx.state, bx.marked = killed, true
		}
		p.boxes[id] = bx
	}
	bx.users++
	return bx, nil
}

// release ends a hold taken by acquire. The last one forgets the box when the directory
// says all it knows.
func (p *Provider) release(bx *box) {
	p.mu.Lock()
	bx.users--
	last := bx.users == 0
	p.mu.Unlock()
	if !last {
		return
	}
	// Background processes that ended are noticed here, outside p.mu (it reads /proc).
	bx.mu.Lock()
	if bx.state == running {
		bx.prune()
	}
	bx.mu.Unlock()

	p.mu.Lock()
	defer p.mu.Unlock()
	// Another call may have taken the box meanwhile (and paused it, say): decide again.
	// With no users, nobody else holds bx.mu, so this does not wait on a /proc scan.
	if bx.users > 0 || p.boxes[bx.id] != bx {
		return
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.forgettable() {
		delete(p.boxes, bx.id)
	}
}

// Connect returns the sandbox, resuming it (SIGCONT to its commands) if it is paused.
func (p *Provider) Connect(ctx context.Context, id string) (sandbox.Sandbox, error) {
	bx, err := p.acquire(id)
	if err != nil {
		return nil, err
	}
	defer p.release(bx)
	bx.mu.Lock()
	defer bx.mu.Unlock()
	switch bx.state {
	case killed:
		return nil, sandbox.ErrGone
	case paused:
		bx.signal(syscall.SIGCONT)
		bx.state = running
	}
	return &handle{p: p, id: id}, nil
}

// Pause stops every command of the sandbox (SIGSTOP to their process groups).
func (p *Provider) Pause(ctx context.Context, id string) error {
	bx, err := p.acquire(id)
	if err != nil {
		return err
	}
	defer p.release(bx)
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

// Kill ends every command of the sandbox and marks it gone. Its directory stays, until
// Remove. When the mark cannot be written, the sandbox stays gone for this process (which
// keeps it in memory) and a later Kill tries the mark again.
func (p *Provider) Kill(ctx context.Context, id string) error {
	bx, err := p.acquire(id)
	if errors.Is(err, sandbox.ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer p.release(bx)
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.state != killed {
		bx.signal(syscall.SIGKILL)
		bx.state = killed
		bx.saveUpdate()
	}
	if !bx.marked {
		if err := os.WriteFile(filepath.Join(bx.root, killedMarker), nil, 0o644); err != nil {
			return fmt.Errorf("mark sandbox %s killed: %w", id, err)
		}
		bx.marked = true
	}
	return nil
}

// Remove kills the sandbox (Kill) and deletes its directory, workspace and records,
// without following a symbolic link out of it (sandbox.RemoveDir). What a command left
// in the background that escaped the kill (see the package's limits) may still hold
// or write files in it: the removal then fails, or succeeds with that process running
// on in a deleted directory.
func (p *Provider) Remove(ctx context.Context, id string) error {
	if id == "" || strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
		return nil // not a name this provider gives: nothing of it is here
	}
	if err := p.Kill(ctx, id); err != nil {
		return err
	}
	// Killed and marked, the box is forgotten (or held by a call that finds it killed);
	// a later acquire finds no directory and says gone.
	if err := sandbox.RemoveDir(p.dir, id); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	return nil
}

// signal sends sig to every process group of the sandbox. A group none of whose known
// members is left is forgotten, not signalled: its id may now belong to a stranger.
// bx.mu is held.
func (bx *box) signal(sig syscall.Signal) {
	for pgid := range bx.groups {
		if !bx.refresh(pgid) {
			continue
		}
		if syscall.Kill(-pgid, sig) != nil {
			delete(bx.groups, pgid)
			continue
		}
		if sig == syscall.SIGKILL {
			// A stopped process only dies once it runs again.
			_ = syscall.Kill(-pgid, syscall.SIGCONT)
		}
	}
	bx.saveUpdate()
}

// prune forgets the groups with no known member left. bx.mu is held.
func (bx *box) prune() {
	for pgid := range bx.groups {
		bx.refresh(pgid)
	}
	bx.saveUpdate()
}

// refresh updates the members of group pgid, or forgets the group when none of its known
// members is left, and reports whether it is still ours. bx.mu is held.
func (bx *box) refresh(pgid int) bool {
	current := groupMembers(pgid)
	if !bx.groups[pgid].anyIn(current) {
		delete(bx.groups, pgid)
		return false
	}
	// Everything in the group now is ours: a live member holds the id.
	bx.groups[pgid] = current
	return true
}

// handle finds its sandbox by id at each call, so a call sees what Pause and Kill did to
// the sandbox however it was reached, also after the provider forgot it in between.
type handle struct {
	p  *Provider
	id string
}

func (h *handle) ID() string { return h.id }

// Exec runs command with sh -c in the workspace, in a process group of its own. The
// command (sh) gets SIGKILL when chatd dies; what it leaves in the background does not
// inherit that.
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
	bx, err := h.p.acquire(h.id)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer h.p.release(bx)
	cmd := exec.Command("/bin/sh", "-c", req.Command)
	cmd.Dir = h.p.Workspace(h.id)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Env = commandEnv(bx.root, h.p.self)
	// A background child still holding the output pipe must not keep Exec waiting.
	cmd.WaitDelay = 2 * time.Second

	bx.mu.Lock()
	switch bx.state {
	case killed:
		bx.mu.Unlock()
		return sandbox.ExecResult{}, sandbox.ErrGone
	case paused:
		bx.mu.Unlock()
		return sandbox.ExecResult{}, sandbox.ErrPaused
	}
	launched, err := h.p.launcher.Start(cmd)
	if err != nil {
		bx.mu.Unlock()
		return sandbox.ExecResult{}, fmt.Errorf("start command: %w", err)
	}
	pgid := cmd.Process.Pid
	bx.groups[pgid] = members{pgid: startTime(pgid)}
	if err := bx.save(); err != nil {
		// Unrecorded, the command could be missed if chatd died: it does not run.
		delete(bx.groups, pgid)
		bx.mu.Unlock()
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait()
		launched()
		return sandbox.ExecResult{}, fmt.Errorf("record command: %w", err)
	}
	bx.mu.Unlock()

	waited := make(chan error, 1)
	go func() {
		// See the leader exit without reaping it: while it is a zombie its group id
		// cannot be reused, so what is in the group then (processes left in the
		// background) is certainly ours.
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, pgid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
		left := groupMembers(pgid)
		delete(left, pgid)
		bx.mu.Lock()
		if len(left) == 0 {
			delete(bx.groups, pgid)
		} else {
			bx.groups[pgid] = left
		}
		bx.saveUpdate()
		bx.mu.Unlock()
		err := cmd.Wait()
		launched()
		waited <- err
	}()
	killedByCtx := false
	select {
	case err = <-waited:
	case <-ctx.Done():
		killedByCtx = true
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		err = <-waited
	}

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

func (m members) anyIn(current members) bool {
	for pid, start := range m {
		if s, ok := current[pid]; ok && s == start {
			return true
		}
	}
	return false
}

// groupMembers lists the processes of process group pgid, with their start times.
func groupMembers(pgid int) members {
	out := members{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok && st.pgid == pgid {
			out[pid] = st.start
		}
	}
	return out
}

func startTime(pid int) uint64 {
	st, _ := procStat(pid)
	return st.start
}

// stat is what chatd reads of a process in /proc/PID/stat.
type stat struct {
	state byte // R, S, D, T, Z, …
	pgid  int
	start uint64 // clock ticks since boot
}

// ended reports whether the process has ended (a zombie waits to be reaped).
func (st stat) ended() bool { return st.state == 'Z' || st.state == 'X' }

// procStat reads a process's state, group id and start time from /proc/PID/stat.
func procStat(pid int) (stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	// The command name, in parentheses, may hold spaces: fields start after its end.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): pgid is field 5, starttime field 22.
	if len(f) < 20 || len(f[0]) != 1 {
		return stat{}, false
	}
	pgid, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil {
		return stat{}, false
	}
	return stat{state: f[0][0], pgid: pgid, start: start}, true
}

// commandEnv is the whole environment of a sandboxed command in the sandbox directory
// root, started by chatd process self. chatd's own environment is never passed on: it
// holds the database URL and model API keys, and the command is whatever the model asked
// for. The marker (envSandbox, envOwner) is for the start-up sweep of a later process.
func commandEnv(root string, self owner) []string {
	workspace := filepath.Join(root, "workspace")
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	return []string{
		"PATH=" + path, "HOME=" + workspace, "LANG=" + lang, "TERM=dumb", "TMPDIR=" + workspace,
		envSandbox + "=" + root, envOwner + "=" + self.String(),
	}
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
	for id, bx := range p.boxes {
		bx.mu.Lock()
		bx.signal(syscall.SIGKILL)
		if bx.state == paused {
			bx.state = running
		}
		if bx.users == 0 {
			clear(bx.groups) // each was sent SIGKILL: nothing of them runs again
			bx.saveUpdate()
			if bx.forgettable() {
				delete(p.boxes, id)
			}
		}
		bx.mu.Unlock()
	}
}
