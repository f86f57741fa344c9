// Package bwrap is a sandbox provider that runs every command under bubblewrap (bwrap,
// Debian's bubblewrap package): in new user, pid, ipc, uts and (unless the network is
// on) network namespaces, with the system read-only, the sandbox's workspace the only
// writable directory, private /tmp, /proc and /dev, a clean environment and resource
// limits. A command sees nothing of chatd: not its files, not its processes, not its
// environment, not other sandboxes' workspaces.
//
// Each command gets namespaces of its own (one bwrap per command); the workspace, a
// directory under the provider's directory, is what the sandbox's commands share. What a
// command starts in the background ends with it: bwrap exits when the command does, and
// its namespace dies with it (unlike the local provider, where it runs on).
//
// Pause stops every process in the sandbox's pid namespaces (SIGSTOP, repeated until a
// look at them all finds each one stopped and none new, so a process forked meanwhile is
// stopped too); Connect resumes them (SIGCONT). A Pause that cannot see every process
// stopped within freezeWait (processes that fork new ones faster than it looks, say)
// resumes them and fails: it never says paused of a sandbox that may still run. (A cgroup freezer would be
// exact, but needs a delegated cgroup v2 hierarchy, which chatd cannot count on.) Kill
// ends every namespace: bwrap is killed, and with it the namespace's first process
// (bwrap's --die-with-parent), and Linux kills everything in a pid namespace whose first
// process died. The processes are found by their pid namespace (/proc/PID/ns/pid), which
// a sandboxed process cannot leave.
//
// Between bwrap and the command's shell runs chatd's own executable (inside.go): it cuts
// output over the caller's limit (ExecRequest.OutputLimit) to its head and tail in the
// sandbox, so that chatd never reads more, and when the shell exits it kills what the
// command left in the background and sends the tail; closing its control pipe stops the
// command the same way, keeping the end of its output. It also reports the SysV shared
// memory of the command's IPC namespace, which chatd cannot see, for the watch of the
// sandbox's memory (watch.go).
//
// Sandbox processes never outlive chatd: bwrap is started with a parent-death signal
// (from a thread kept for that, package launcher) and passes it on to the namespace's
// first process. So, unlike the local provider, nothing needs sweeping at start-up.
//
// When chatd runs as root, bwrap and the commands run as another user (by default
// nobody, 65534): a process of root's would ignore the process limit and own the
// host's root files. The workspaces then belong to that user and the provider's
// directory is made traversable (0711, not listable) so that bwrap can reach them.
package bwrap

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/internal/launcher"
)

// ErrNotFound is returned by New when bwrap cannot be found.
var ErrNotFound = errors.New("bubblewrap (bwrap) was not found: install Debian's bubblewrap package (apt-get install bubblewrap) or name its path with CHATD_BWRAP")

// Limits bound what a command, and a sandbox, may use. Those of each process are
// setrlimits (the kernel enforces them: the process gets an error or a signal); the
// totals are watched while the command runs (watch.go), and a command over one is
// stopped. Zero is no limit.
type Limits struct {
	// CPUSeconds is the CPU time of a command's processes together (watched), and of
	// each (RLIMIT_CPU: SIGXCPU at it, SIGKILL a second later).
	CPUSeconds uint64
	Memory     uint64 // address space of each process, bytes (RLIMIT_AS)
	// TotalMemory is the memory of a sandbox's processes together, bytes, with the
	// memory files and SysV shared memory they hold (watched: see memoryUse, heldFiles).
	// Its /tmp and /dev/shm are bounded apart, by TmpSize.
	TotalMemory uint64
	Processes   uint64 // processes in the command's namespace (RLIMIT_NPROC)
	OpenFiles   uint64 // open files of each process (RLIMIT_NOFILE)
	FileSize    uint64 // largest file a process may write, bytes (RLIMIT_FSIZE)
	Disk        uint64 // size of the workspace, bytes (watched: sandbox.DiskUsage, and heldFiles)
	TmpSize     uint64 // size of the private /tmp and /dev/shm (tmpfs, each), bytes
}

// DefaultLimits are the limits of a provider that sets none.
var DefaultLimits = Limits{
	CPUSeconds:  600,
	Memory:      4 << 30,
	TotalMemory: 2 << 30,
	Processes:   256,
	OpenFiles:   1024,
	FileSize:    1 << 30,
	Disk:        2 << 30,
	TmpSize:     256 << 20,
}

// NobodyID is the user and group the commands run as when chatd runs as root.
const NobodyID = 65534

// Config configures a Provider.
type Config struct {
	// Dir holds the sandboxes' workspaces.
	Dir string
	// Bwrap is bwrap's path; empty looks for bwrap in PATH.
	Bwrap string
	// Network gives commands the host's network (--share-net); off by default.
	Network bool
	// Limits bound the commands' processes; nil means DefaultLimits.
	Limits *Limits
	// UID and GID are who commands run as when chatd runs as root (0 means NobodyID).
	// Otherwise they run as chatd's user.
	UID, GID uint32
	// WatchEvery and DiskEvery are how often a running command's processes and its
	// workspace are measured against the limits that are totals (see watch.go); 0 (or
	// less) means 250ms and 1s.
	WatchEvery, DiskEvery time.Duration
}

const (
	// idPrefix begins every id of this provider's sandboxes.
	idPrefix     = "bwrap-"
	killedMarker = ".killed"
	// workspacePath is where the workspace is in the sandbox.
	workspacePath = "/workspace"
	// outputGrace is how long Exec keeps reading output once the command has exited.
	outputGrace = 500 * time.Millisecond
	// stopGrace is how long a command that Exec stops (its time limit, a sandbox limit)
	// has to end and send the end of its output (see inside) before it is killed.
	stopGrace = 2 * time.Second
	// defaultFreezeWait bounds how long Pause waits for the sandbox's processes to stop.
	defaultFreezeWait = 2 * time.Second
)

// Provider manages bubblewrap sandboxes under a directory.
type Provider struct {
	dir     string
	bwrap   string
	prlimit string
	// exe is chatd's executable (O_PATH), which every sandbox runs (see inside).
	exe *os.File
	// procMasks are bwrap's arguments that hide what the sandbox's /proc tells of the
	// host (procMasks).
	procMasks []string
	network   bool
	limits    Limits
	// cred is who bwrap runs as; nil for chatd's user.
	cred *syscall.Credential

	launcher launcher.Launcher

	// freezeWait bounds how long Pause waits for the sandbox's processes to stop, and
	// procState reads a process's state; tests change them.
	freezeWait time.Duration
	procState  func(pid int) (byte, bool)
	// watchEvery and diskEvery are how often a running command's processes and its
	// workspace are measured against the limits, and diskAtMost the longest the
	// workspace goes unmeasured (watch).
	watchEvery, diskEvery, diskAtMost time.Duration
	// shmDev is the device of the kernel's tmpfs of memory files (shm false: unknown);
	// mapFiles says whether chatd can stat what a process maps (see heldFiles).
	shmDev   uint64
	shm      bool
	mapFiles bool

	// mu guards boxes and everything in them. It is never held while waiting on bwrap.
	mu    sync.Mutex
	boxes map[string]*box
}

var _ sandbox.Provider = (*Provider)(nil)

type state int

const (
	running state = iota
	paused
	killed
)

// box is a sandbox while memory knows more than its directory: it is paused, something
// runs in it, or it is killed and not yet marked so on disk.
type box struct {
	state  state
	marked bool
	spaces map[*space]struct{}
}

// space is one command's bwrap and pid namespace, until bwrap exits.
type space struct {
	cmd *exec.Cmd
	// sysv is the SysV shared memory of the command's IPC namespace, bytes, as inside
	// last reported it (see inside.go).
	sysv *atomic.Uint64
	// starting: bwrap runs and has not reported its namespace yet, whose processes
	// cannot be found meanwhile.
	starting bool
	ns       uint64 // the pid namespace's inode; 0 until reported, or when bwrap never did
}

// New returns a provider keeping sandboxes under cfg.Dir. It checks that bubblewrap is
// there and can start a sandbox here (user namespaces may be disabled), by running one.
func New(cfg Config) (*Provider, error) {
	bw := cfg.Bwrap
	if bw == "" {
		bw = "bwrap"
	}
	path, err := exec.LookPath(bw)
	if err != nil {
		if cfg.Bwrap != "" {
			return nil, fmt.Errorf("%w (%s: %v)", ErrNotFound, cfg.Bwrap, err)
		}
		return nil, ErrNotFound
	}
	// prlimit sets the limits in the sandbox, where the host's /usr is visible.
	prlimit := "/usr/bin/prlimit"
	if _, err := os.Stat(prlimit); err != nil {
		return nil, fmt.Errorf("the sandbox needs prlimit (Debian's util-linux) at %s: %w", prlimit, err)
	}
	limits := DefaultLimits
	if cfg.Limits != nil {
		limits = *cfg.Limits
	}
	// Opened by /proc/self/exe, it is the running executable even if its file was
	// replaced or removed since; run by its descriptor (insidePath), it needs no place
	// in the sandbox's file system, nor can the command read it.
	fd, err := unix.Open("/proc/self/exe", unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open chatd's executable: %w", err)
	}
	p := &Provider{
		bwrap:   path,
		prlimit: prlimit,
		exe:     os.NewFile(uintptr(fd), "chatd"),
		network: cfg.Network,
		limits:  limits,
		boxes:   make(map[string]*box),

		freezeWait: defaultFreezeWait,
		procState:  procState,
		procMasks:  procMasks(),
		watchEvery: cmp.Or(max(cfg.WatchEvery, 0), defaultWatchEvery),
		diskEvery:  cmp.Or(max(cfg.DiskEvery, 0), defaultDiskEvery),
		diskAtMost: defaultDiskAtMost,
		mapFiles:   canStatMappings(),
	}
	p.shmDev, p.shm = shmDevice()
	if os.Geteuid() == 0 {
		uid, gid := cfg.UID, cfg.GID
		if uid == 0 {
			uid = NobodyID
		}
		if gid == 0 {
			gid = NobodyID
		}
		p.cred = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	}
	if p.dir, err = sandbox.PrepareDir(cfg.Dir); err != nil {
		return nil, fmt.Errorf("sandbox directory: %w", err)
	}
	if p.cred != nil {
		// bwrap, running as the sandbox user, must reach the workspaces; nobody else
		// may list them.
		if err := os.Chmod(p.dir, 0o711); err != nil {
			return nil, fmt.Errorf("sandbox directory: %w", err)
		}
	}
	if err := p.probe(); err != nil {
		return nil, err
	}
	return p, nil
}

// probe runs a command in a throwaway sandbox.
func (p *Provider) probe() error {
	sb, err := p.Create(context.Background())
	if err != nil {
		return err
	}
	defer func() { _ = p.Remove(context.Background(), sb.ID()) }()
	var out strings.Builder
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Command: "exit 0", Timeout: time.Minute, Output: &out})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit code %d: %s", res.ExitCode, strings.TrimSpace(out.String()))
	}
	if err != nil {
		return fmt.Errorf("bubblewrap (%s) cannot start a sandbox here (are user namespaces allowed? is %s reachable by uid %d?): %w",
			p.bwrap, p.dir, p.uid(), err)
	}
	return nil
}

func (p *Provider) uid() int {
	if p.cred != nil {
		return int(p.cred.Uid)
	}
	return os.Geteuid()
}

// Workspace returns the host directory of sandbox id's workspace.
func (p *Provider) Workspace(id string) string {
	return filepath.Join(p.dir, id, "workspace")
}

// Create makes a new sandbox with an empty workspace.
func (p *Provider) Create(ctx context.Context) (sandbox.Sandbox, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := idPrefix + hex.EncodeToString(b[:])
	mode := uint32(0o700)
	if p.cred != nil {
		mode = 0o711
	}
	// No directory is reached through a symbolic link: each is opened without following
	// one and the next made in it, and the workspace is given to the sandbox user through
	// its descriptor.
	dir, err := os.OpenFile(p.dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer dir.Close()
	root, err := sandbox.MkdirNoFollow(int(dir.Fd()), id, mode)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer root.Close()
	ws, err := sandbox.MkdirNoFollow(int(root.Fd()), "workspace", 0o700)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	defer ws.Close()
	if p.cred != nil {
		if err := ws.Chown(int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			return nil, fmt.Errorf("create sandbox: %w", err)
		}
	}
	return &handle{p: p, id: id}, nil
}

// get returns sandbox id's box, from memory or read back from its directory. An id
// this provider did not make (a local sandbox's, from before bwrap was chosen, whose
// workspace the sandbox user may not reach) is gone: its session gets a new sandbox.
// p.mu is held.
func (p *Provider) get(id string) (*box, error) {
	if !strings.HasPrefix(id, idPrefix) || strings.ContainsAny(id, `/\`) {
		return nil, sandbox.ErrGone
	}
	if bx, ok := p.boxes[id]; ok {
		return bx, nil
	}
	root := filepath.Join(p.dir, id)
	if fi, err := os.Lstat(filepath.Join(root, "workspace")); err != nil || !fi.IsDir() {
		return nil, sandbox.ErrGone
	}
	bx := &box{spaces: make(map[*space]struct{})}
	if _, err := os.Stat(filepath.Join(root, killedMarker)); err == nil {
		bx.state, bx.marked = killed, true
	}
	p.boxes[id] = bx
	return bx, nil
}

// tidy forgets a box whose directory says all there is to know. p.mu is held.
func (p *Provider) tidy(id string, bx *box) {
	if p.boxes[id] != bx {
		return
	}
	if (bx.state == running && len(bx.spaces) == 0) || (bx.state == killed && bx.marked) {
		delete(p.boxes, id)
	}
}

// Connect returns the sandbox, resuming its processes if it is paused.
func (p *Provider) Connect(ctx context.Context, id string) (sandbox.Sandbox, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	bx, err := p.get(id)
	if err != nil {
		return nil, err
	}
	defer p.tidy(id, bx)
	switch bx.state {
	case killed:
		return nil, sandbox.ErrGone
	case paused:
		p.signal(bx, syscall.SIGCONT)
		bx.state = running
	}
	return &handle{p: p, id: id}, nil
}

// Pause stops every process of the sandbox.
func (p *Provider) Pause(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	bx, err := p.get(id)
	if err != nil {
		return err
	}
	defer p.tidy(id, bx)
	switch bx.state {
	case killed:
		return sandbox.ErrGone
	case running:
		if err := p.freeze(bx); err != nil {
			return fmt.Errorf("pause sandbox %s: %w", id, err)
		}
		bx.state = paused
	}
	return nil
}

// Kill ends every process of the sandbox and marks it gone; its directory stays, until
// Remove.
func (p *Provider) Kill(ctx context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	bx, err := p.get(id)
	if errors.Is(err, sandbox.ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	defer p.tidy(id, bx)
	if bx.state != killed {
		p.killAll(bx)
		bx.state = killed
	}
	if !bx.marked {
		if err := os.WriteFile(filepath.Join(p.dir, id, killedMarker), nil, 0o644); err != nil {
			return fmt.Errorf("mark sandbox %s killed: %w", id, err)
		}
		bx.marked = true
	}
	return nil
}

// Remove kills the sandbox (Kill) and deletes its directory and workspace, without
// following a symbolic link out of it (sandbox.RemoveDir). Its namespaces are gone
// with their processes, and with them the workspace's bind mount: nothing of the
// sandbox's holds the directory. As root, chatd removes the workspace of the sandbox
// user's; otherwise that workspace is chatd's user's, and a directory in it that the
// sandbox made unwritable is made writable first. An id this provider does not give
// (another provider's sandbox, from before bwrap was chosen) is left alone: its
// processes may be ones bwrap cannot reach.
func (p *Provider) Remove(ctx context.Context, id string) error {
	if !strings.HasPrefix(id, idPrefix) || strings.ContainsAny(id, `/\`) {
		return nil
	}
	if err := p.Kill(ctx, id); err != nil {
		return err
	}
	if err := sandbox.RemoveDir(p.dir, id); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	return nil
}

// Close ends every process of every sandbox, for a server shutdown. The sandboxes stay
// usable, with nothing running in them.
func (p *Provider) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, bx := range p.boxes {
		p.killAll(bx)
		if bx.state == paused {
			bx.state = running
		}
	}
}

// killAll kills every namespace of the box: bwrap, whose death kills the namespace's
// first process (--die-with-parent), whose death kills the rest. Each process found in
// them is sent SIGKILL too, which also ends a stopped one. p.mu is held.
func (p *Provider) killAll(bx *box) {
	for sp := range bx.spaces {
		_ = sp.cmd.Process.Kill()
	}
	p.signal(bx, syscall.SIGKILL)
}

// signal sends sig once to every process in the box's namespaces. p.mu is held.
func (p *Provider) signal(bx *box, sig syscall.Signal) {
	for pid := range p.members(namespaces(bx)) {
		_ = syscall.Kill(pid, sig)
	}
}

// pendingCalm is how long freeze watches for new processes while one counts as stopped
// only by its pending SIGSTOP.
const pendingCalm = 20 * time.Millisecond

// errFreeze is why Pause failed: the sandbox runs on.
var errFreeze = errors.New("its processes could not all be stopped; they run on")

// freeze stops every process in the box's namespaces, or fails and leaves them all
// running. It sends SIGSTOP to each process not stopped until a look at /proc finds
// every one stopped and none that the look before did not: a child forked while its
// parent was being stopped (listed after the walk read its place in /proc, as a reused
// lower pid is) shows in the next look. A process in an uninterruptible wait counts once
// its SIGSTOP is pending (see stopped); freeze waits for the rest up to p.freezeWait,
// then sends SIGCONT to all and fails. A command still starting, whose namespace is not known yet, fails it
// at once. p.mu is held.
//
// While some process counts only by its pending SIGSTOP, the looks must find nothing new
// for pendingCalm before freeze trusts them: such a process may be inside fork, blocked
// on a kernel lock, with a child it has not made visible yet; once fork returns, the
// parent stops, but the child runs (a SIGSTOP sent to the parent alone does not make
// fork start over), and shows in a later look. Seen under load in
// TestPauseStopsProcessesForkedDuringIt: a sleep left running after Pause.
func (p *Provider) freeze(bx *box) error {
	for sp := range bx.spaces {
		if sp.starting {
			return errors.New("a command is starting, and its processes cannot be found yet")
		}
	}
	nss := namespaces(bx)
	if len(nss) == 0 {
		return nil
	}
	deadline := time.Now().Add(p.freezeWait)
	var (
		last map[int]byte
		calm time.Time // since when the looks have found the same processes, all stopped
	)
	for pass := 0; ; pass++ {
		now := p.members(nss)
		settled := len(now) == len(last)
		running, pending := 0, false
		for pid, st := range now {
			if _, ok := last[pid]; !ok {
				settled = false
			}
			if stopped(pid, st) {
				pending = pending || st == 'D'
				continue
			}
			settled = false
			running++
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		switch {
		case !settled:
			calm = time.Time{}
		case calm.IsZero():
			calm = time.Now()
		}
		if settled && (!pending || time.Since(calm) >= pendingCalm) {
			return nil
		}
		if time.Now().After(deadline) {
			p.signal(bx, syscall.SIGCONT)
			return fmt.Errorf("%w (%d of %d still running after %s)", errFreeze, running, len(now), p.freezeWait)
		}
		last = now
		if pass < 10 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Millisecond)
		}
	}
}

// stopped reports whether process pid, in state st, runs no more code of its own: it is
// stopped or dead, or it sleeps in the kernel with a SIGSTOP pending, which stops it the
// moment it wakes, before it returns to its own code. The last is a shell that vforked a
// child (state D, waiting for the child to exec) when the SIGSTOP reached the child
// before its exec: the parent cannot stop while the child is stopped, and needs not.
func stopped(pid int, st byte) bool {
	switch st {
	case 'T', 't', 'Z', 'X':
		return true
	case 'D':
		return stopPending(pid)
	}
	return false
}

// stopPending reports whether process pid has a SIGSTOP pending, for itself or for its
// thread group (/proc/PID/status: SigPnd, ShdPnd).
func stopPending(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(uint(syscall.SIGSTOP)-1)) != 0 {
			return true
		}
	}
	return false
}

func namespaces(bx *box) map[uint64]bool {
	nss := make(map[uint64]bool, len(bx.spaces))
	for sp := range bx.spaces {
		if sp.ns != 0 {
			nss[sp.ns] = true
		}
	}
	return nss
}

// members lists the processes in the pid namespaces nss, with their states (R, S, T, Z…).
func (p *Provider) members(nss map[uint64]bool) map[int]byte {
	out := map[int]byte{}
	for pid := range p.memberNamespaces(nss) {
		if st, ok := p.procState(pid); ok {
			out[pid] = st
		}
	}
	return out
}

// pidNamespace reads the inode of process pid's pid namespace.
func pidNamespace(pid int) (uint64, bool) {
	link, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	if err != nil {
		return 0, false
	}
	// pid:[4026531836]
	s, ok := strings.CutPrefix(link, "pid:[")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64)
	return n, err == nil
}

// procState reads a process's state from /proc/PID/stat.
func procState(pid int) (byte, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, false
	}
	return s[i+2], true
}

// closeOnExec marks every descriptor of chatd's beyond stdin, stdout and stderr
// close-on-exec, so that bwrap, which passes on what it inherits, hands the sandbox none
// of them. Go opens its own descriptors so; one chatd inherited (from its parent, a
// service manager's socket, say) would otherwise reach the command. Exec's own pipes
// are passed explicitly.
func closeOnExec() {
	if unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Before Linux 5.11: one at a time.
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}

// The sandbox's /proc is its own (its pid namespace's), but much of it is the host's:
// the kernel's, and the machine's. What only tells of the host, or of its kernel's
// insides, is hidden: a file by /dev/null bound over it (reading it fails: the bind is
// nodev), a directory by an empty read-only tmpfs. Without capabilities, the sandbox
// cannot unmount them. What programs read to size themselves (meminfo, cpuinfo, stat,
// loadavg, /proc/sys) stays, as do mounts (which name the workspace's host directory)
// and the command lines of the sandbox's processes (bwrap's among them).
var (
	procHiddenFiles = []string{
		"cmdline", "config.gz", "kallsyms", "kcore", "keys", "key-users", "kmsg", "modules",
		"iomem", "ioports", "kpagecgroup", "kpagecount", "kpageflags", "latency_stats",
		"sched_debug", "slabinfo", "sysrq-trigger", "timer_list", "timer_stats",
		"vmallocinfo", "sys/kernel/random/boot_id",
	}
	procHiddenDirs = []string{"acpi", "asound", "bus", "driver", "irq", "scsi"}
)

// procMasks are bwrap's arguments that hide procHiddenFiles and procHiddenDirs in the
// sandbox's /proc, those this kernel has (as the host's /proc shows): bwrap cannot mount
// over what is not there.
func procMasks() []string {
	var a []string
	for _, f := range procHiddenFiles {
		if fi, err := os.Lstat("/proc/" + f); err == nil && !fi.IsDir() {
			a = append(a, "--ro-bind", "/dev/null", "/proc/"+f)
		}
	}
	for _, d := range procHiddenDirs {
		if fi, err := os.Lstat("/proc/" + d); err == nil && fi.IsDir() {
			a = append(a, "--size", "4096", "--tmpfs", "/proc/"+d, "--remount-ro", "/proc/"+d)
		}
	}
	return a
}

// args is bwrap's command line for command in sandbox id, keeping keep bytes of its
// output (0: all); bwrap reports to fd 3, and finds chatd's executable at exeFD.
func (p *Provider) args(id, command string, keep int) []string {
	a := []string{
		"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--disable-userns", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--hostname", "sandbox",
		"--json-status-fd", "3",
	}
	if p.network {
		a = append(a, "--share-net")
	} else {
		a = append(a, "--unshare-net")
	}
	// The system, read-only; on a merged-/usr system /bin and the like are symlinks.
	a = append(a, "--ro-bind", "/usr", "/usr")
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", target, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	// Of /etc, only what programs need to run, resolve names and check certificates:
	// the rest may hold the host's secrets (chatd's own configuration, say).
	for _, f := range []string{
		"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
		"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf",
		"/etc/resolv.conf", "/etc/gai.conf", "/etc/services", "/etc/protocols",
		"/etc/ssl/certs", "/etc/ca-certificates", "/etc/localtime", "/etc/mime.types",
	} {
		a = append(a, "--ro-bind-try", f, f)
	}
	// The writable places are sized tmpfs (/tmp, /dev/shm) and the workspace: bwrap's
	// root and /dev are tmpfs too, in memory and unbounded, so they are made read-only
	// once everything is mounted.
	var size []string
	if p.limits.TmpSize > 0 {
		size = []string{"--size", strconv.FormatUint(p.limits.TmpSize, 10)}
	}
	a = append(a, "--proc", "/proc")
	a = append(a, p.procMasks...)
	a = append(a, "--dev", "/dev")
	a = append(append(a, size...), "--tmpfs", "/dev/shm")
	a = append(append(a, size...), "--tmpfs", "/tmp")
	a = append(a, "--bind", p.Workspace(id), workspacePath,
		"--remount-ro", "/dev", "--remount-ro", "/",
		"--chdir", workspacePath,
		"--clearenv",
		"--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin",
		"--setenv", "HOME", workspacePath,
		"--setenv", "LANG", "C.UTF-8",
		"--setenv", "TERM", "dumb",
		"--setenv", "TMPDIR", "/tmp",
		"--", insidePath, insideArg, strconv.Itoa(keep), strconv.FormatInt(p.reportEvery().Milliseconds(), 10), p.prlimit)
	l := p.limits
	if l.CPUSeconds > 0 {
		// SIGXCPU at the limit, which kills with a status that says why (152), and
		// SIGKILL a second later for a process that ignores it.
		a = append(a, fmt.Sprintf("--cpu=%d:%d", l.CPUSeconds, l.CPUSeconds+1))
	}
	for _, lim := range []struct {
		name string
		v    uint64
	}{{"as", l.Memory}, {"nproc", l.Processes}, {"nofile", l.OpenFiles}, {"fsize", l.FileSize}} {
		if lim.v > 0 {
			a = append(a, "--"+lim.name+"="+strconv.FormatUint(lim.v, 10))
		}
	}
	return append(a, "--", "/bin/sh", "-c", command)
}

// handle finds its sandbox by id at each call.
type handle struct {
	p  *Provider
	id string
}

func (h *handle) ID() string { return h.id }

// status is what bwrap writes to its status descriptor: first the namespace's first
// process and namespaces, then, when the command ends, its exit code.
type status struct {
	ChildPID     int    `json:"child-pid"`
	PIDNamespace uint64 `json:"pid-namespace"`
	ExitCode     *int   `json:"exit-code"`
}

// Exec runs command with sh -c in the sandbox's workspace and returns when it ends, with
// everything it started in the background. A command stopped for its time limit or a
// sandbox limit is given stopGrace to send the end of its output (see inside); one whose
// ctx is cancelled, or that sends more output than req.OutputLimit lets through (which
// only a command that got around inside could), is killed at once.
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
	keep := max(req.OutputLimit, 0)
	p := h.p
	// The workspace's size as the command starts (see overDisk).
	var diskAtStart int64
	if p.limits.Disk > 0 {
		diskAtStart = p.diskAtStart(h.id)
	}

	var pipes [4][2]*os.File // status, output, control, report: read and write ends
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			for _, pp := range pipes[:i] {
				pp[0].Close()
				pp[1].Close()
			}
			return sandbox.ExecResult{}, err
		}
		pipes[i] = [2]*os.File{r, w}
	}
	statusR, statusW := pipes[0][0], pipes[0][1]
	outR, outW := pipes[1][0], pipes[1][1]
	controlR, controlW := pipes[2][0], pipes[2][1]
	reportR, reportW := pipes[3][0], pipes[3][1]
	defer statusR.Close()
	defer outR.Close()
	defer controlW.Close()
	closeChild := func() {
		statusW.Close()
		outW.Close()
		controlR.Close()
		reportW.Close()
	}
	// inside's reports of the SysV shared memory, until it exits (or Exec returns).
	sysv := new(atomic.Uint64)
	reportsRead := make(chan struct{})
	go func() {
		defer close(reportsRead)
		sc := bufio.NewScanner(reportR)
		for sc.Scan() {
			if n, err := strconv.ParseUint(sc.Text(), 10, 64); err == nil {
				sysv.Store(n)
			}
		}
	}()
	defer func() {
		reportR.Close()
		<-reportsRead
	}()
	cmd := exec.Command(p.bwrap, p.args(h.id, req.Command, keep)...)
	cmd.Stdout, cmd.Stderr = outW, outW
	cmd.ExtraFiles = []*os.File{statusW, controlR, p.exe, reportW} // 3, controlFD, exeFD, reportFD
	// bwrap itself gets nothing of chatd's environment either.
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.cred}

	p.mu.Lock()
	bx, err := p.get(h.id)
	if err == nil {
		switch bx.state {
		case killed:
			err = sandbox.ErrGone
		case paused:
			err = sandbox.ErrPaused
		}
	}
	if err != nil {
		p.mu.Unlock()
		closeChild()
		return sandbox.ExecResult{}, err
	}
	closeOnExec()
	launched, err := p.launcher.Start(cmd)
	closeChild()
	if err != nil {
		p.tidy(h.id, bx)
		p.mu.Unlock()
		return sandbox.ExecResult{}, fmt.Errorf("start bwrap: %w", err)
	}
	// bwrap is in the box before anything can pause or kill it, known by its process
	// until it reports its namespace: Kill kills it, Pause fails rather than miss its
	// processes. The report is awaited without p.mu: a bwrap slow to start holds up no
	// other sandbox, nor Kill.
	sp := &space{cmd: cmd, starting: true, sysv: sysv}
	bx.spaces[sp] = struct{}{}
	p.mu.Unlock()

	// The first status is the namespace, and a later one the command's exit code.
	reported := make(chan uint64, 1) // closed without a value when bwrap never reports
	ended := make(chan int, 1)
	go func() {
		dec := json.NewDecoder(statusR)
		var first status
		if dec.Decode(&first) != nil { // bwrap failed, and says why on its output
			close(reported)
			return
		}
		reported <- first.PIDNamespace
		for {
			var st status
			if dec.Decode(&st) != nil {
				return
			}
			if st.ExitCode != nil {
				ended <- *st.ExitCode
				return
			}
		}
	}()
	// exceeded says why the command must stop: a sandbox limit it crossed. overflow
	// says it sent more output than inside lets through: it got around it, and chatd
	// reads no more of it.
	exceeded := make(chan string, 1)
	overflow := make(chan string, 1)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		var w io.Writer = out
		if keep > 0 {
			w = &capWriter{w: out, left: int64(keep + sandbox.MaxMarker)}
		}
		if _, err := io.Copy(w, outR); errors.Is(err, errOutputOver) {
			overflow <- fmt.Sprintf("it sent more than %d bytes of output, around the sandbox's output filter", keep+sandbox.MaxMarker)
		}
	}()
	exited := make(chan struct{}) // bwrap exited
	go func() {
		_ = cmd.Wait()
		launched()
		p.mu.Lock()
		delete(bx.spaces, sp)
		p.tidy(h.id, bx)
		p.mu.Unlock()
		close(exited)
	}()
	// kill ends the command and its namespace at once.
	kill := func() {
		p.mu.Lock()
		_ = cmd.Process.Kill()
		p.signal(&box{spaces: map[*space]struct{}{sp: {}}}, syscall.SIGKILL)
		p.mu.Unlock()
		<-exited
		<-copied
	}
	// stop ends the command for res: a time limit or another limit. inside ends it and
	// sends what it kept, unless that takes longer than stopGrace.
	stop := func(res sandbox.ExecResult) (sandbox.ExecResult, error) {
		res.ExitCode = -1
		_ = controlW.Close()
		grace := time.NewTimer(stopGrace)
		defer grace.Stop()
		select {
		case <-exited:
			_ = outR.SetReadDeadline(time.Now().Add(outputGrace))
			<-copied
		case <-grace.C:
			kill()
		}
		return res, nil
	}
	// cancelled ends the command for ctx: its time limit passed, or it was cancelled.
	cancelled := func() (sandbox.ExecResult, error) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return stop(sandbox.ExecResult{TimedOut: true})
		}
		kill()
		return sandbox.ExecResult{ExitCode: -1}, ctx.Err()
	}

	select {
	case ns := <-reported:
		p.mu.Lock()
		sp.starting, sp.ns = false, ns
		if bx.state == killed {
			// Killed while it started: bwrap was, and its namespace may have begun.
			_ = cmd.Process.Kill()
			p.signal(&box{spaces: map[*space]struct{}{sp: {}}}, syscall.SIGKILL)
		}
		p.mu.Unlock()
		defer p.watch(h.id, bx, sp, diskAtStart, exceeded)()
	case <-ctx.Done():
		// Nothing of the command may be running yet to end it gently.
		kill()
		return sandbox.ExecResult{ExitCode: -1, TimedOut: errors.Is(ctx.Err(), context.DeadlineExceeded)}, nilUnlessCancelled(ctx)
	case why := <-overflow:
		kill()
		return sandbox.ExecResult{ExitCode: -1, Exceeded: why}, nil
	}

	res := sandbox.ExecResult{}
	select {
	case code := <-ended:
		res.ExitCode = code
	case <-exited:
		// bwrap ended without a word of the command's end: it failed to start it, or
		// was killed (Kill, Close).
		select {
		case code := <-ended:
			res.ExitCode = code
		default:
			res.ExitCode = cmd.ProcessState.ExitCode()
		}
	case <-ctx.Done():
		return cancelled()
	case why := <-overflow:
		kill()
		return sandbox.ExecResult{ExitCode: -1, Exceeded: why}, nil
	case why := <-exceeded:
		return stop(sandbox.ExecResult{Exceeded: why})
	}
	// Everything the command wrote is in the pipe; bwrap is ending, and its namespace
	// with it. Should anything hold the pipe open longer, reading ends after outputGrace.
	_ = outR.SetReadDeadline(time.Now().Add(outputGrace))
	<-copied
	_ = outR.Close()
	<-exited
	res.Exceeded = p.killedFor(res.ExitCode)
	select {
	case why := <-overflow: // as the command ended
		res.Exceeded = why
	default:
	}
	return res, nil
}

// killedFor says which limit a command's exit code tells the kernel killed its shell,
// or a process whose status the shell passed on, for: the signals of RLIMIT_CPU and
// RLIMIT_FSIZE, sent for nothing else.
func (p *Provider) killedFor(code int) string {
	switch {
	case code == 128+int(syscall.SIGXCPU) && p.limits.CPUSeconds > 0:
		return fmt.Sprintf("a process used its %s of CPU time (SIGXCPU, exit code %d)", time.Duration(p.limits.CPUSeconds)*time.Second, code)
	case code == 128+int(syscall.SIGXFSZ) && p.limits.FileSize > 0:
		return fmt.Sprintf("a process wrote past the largest file size, %s (SIGXFSZ, exit code %d)", sizeString(p.limits.FileSize), code)
	}
	return ""
}

// nilUnlessCancelled is ctx's error when it was cancelled, nil when its deadline passed:
// a time limit is a result, not an error.
func nilUnlessCancelled(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil
	}
	return ctx.Err()
}

// errOutputOver is capWriter's error.
var errOutputOver = errors.New("output over its limit")

// capWriter passes on left bytes and fails the write that would go past them.
type capWriter struct {
	w    io.Writer
	left int64
}

func (c *capWriter) Write(b []byte) (int, error) {
	if int64(len(b)) > c.left {
		n, err := c.w.Write(b[:c.left])
		c.left -= int64(n)
		if err == nil {
			err = errOutputOver
		}
		return n, err
	}
	n, err := c.w.Write(b)
	c.left -= int64(n)
	return n, err
}

// sizeString writes n bytes with the largest binary unit that divides it.
func sizeString(n uint64) string {
	for _, u := range []struct {
		name string
		size uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatUint(n/u.size, 10) + " " + u.name
		}
	}
	return strconv.FormatUint(n, 10) + " bytes"
}
