package bwrap

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/chatd/chatd/agent/sandbox"
)

// What a setrlimit cannot bound, because it counts one process at a time or none, is
// watched while a command runs: the CPU time of the command's processes together, the
// memory of the sandbox's processes together, and the size of its workspace. Every
// watchEvery the sandbox's processes are measured, and every diskEvery, or twenty times
// as long as the last measure took (so that a workspace of many files costs chatd at
// most a twentieth of a CPU) but never more than diskAtMost, its workspace; the command
// is stopped once one is over its limit. Between two looks a command can go over by what
// it uses in that time. A walk of the workspace is bounded (sandbox.DiskUsage stops once
// over the limit, and every entry counts at least 4 KiB), so the twentieth is what a
// workspace within its limit can cost; diskAtMost bounds how far apart the looks can be
// stretched by one that makes its walk slow.
const (
	defaultWatchEvery = 250 * time.Millisecond
	defaultDiskEvery  = time.Second
	defaultDiskAtMost = 10 * time.Second
	// diskShare is how many times as long as a measure of the workspace took the next
	// waits at least.
	diskShare = 20
	// clockTicks is the unit of /proc/PID/stat's times (USER_HZ, 100 on every Linux).
	clockTicks = 100
)

// watch watches the limits of the command in namespace sp of box bx until the returned
// func is called, and says on exceeded (without blocking) the first it finds crossed.
// diskAtStart is the workspace's size when the command started (see overDisk). What the
// sandbox's processes hold of files no directory entry shows (heldFiles) is looked at
// with the workspace, and counted until the next look.
func (p *Provider) watch(id string, bx *box, sp *space, diskAtStart int64, exceeded chan<- string) (stop func()) {
	l := p.limits
	if l.CPUSeconds == 0 && l.TotalMemory == 0 && l.Disk == 0 {
		return func() {}
	}
	var wsDev uint64
	if fi, err := os.Stat(p.Workspace(id)); err == nil {
		wsDev = fi.Sys().(*syscall.Stat_t).Dev
	}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(p.watchEvery)
		defer tick.Stop()
		nextDisk := time.Now().Add(p.diskEvery)
		var held heldFiles
		inside := 0 // the pid of sp's inside, once found
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			var why string
			disk := (l.Disk > 0 || l.TotalMemory > 0) && !time.Now().Before(nextDisk)
			if !disk && l.CPUSeconds == 0 && l.TotalMemory == 0 {
				continue
			}
			began := time.Now()
			p.mu.Lock()
			nss := namespaces(bx)
			sysv := map[uint64]uint64{} // inside's reports, by namespace
			for s := range bx.spaces {
				if s.ns != 0 {
					sysv[s.ns] = s.sysv.Load()
				}
			}
			p.mu.Unlock()
			members := p.memberNamespaces(nss)
			if l.TotalMemory > 0 {
				if inside == 0 {
					inside = findInside(members, sp.ns)
				}
				if inside != 0 && p.insideStopped(bx, sp, inside) {
					why = "its processes stopped the sandbox's own process, which measures the command's SysV shared memory"
				}
			}
			if why == "" && disk {
				held = p.heldFiles(members, wsDev)
				if l.Disk > 0 {
					why = p.overDisk(id, diskAtStart, held.deleted)
				}
				nextDisk = time.Now().Add(diskWait(time.Since(began), p.diskEvery, p.diskAtMost))
			}
			if why == "" {
				why = p.overProcesses(members, sp, held, sysv)
			}
			if why != "" {
				select {
				case exceeded <- why:
				default:
				}
				return
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// reportEvery is how often inside reports the SysV shared memory (0: never), when its
// total is watched: as often as the processes are measured.
func (p *Provider) reportEvery() time.Duration {
	if p.limits.TotalMemory == 0 {
		return 0
	}
	return max(p.watchEvery, time.Millisecond)
}

// findInside finds, among members (pids with their pid namespace), the inside of the
// command of namespace ns: its second process, after bwrap's init. 0 when it is not
// there (yet).
func findInside(members map[int]uint64, ns uint64) int {
	for pid, pidNS := range members {
		if pidNS != ns {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				if f := strings.Fields(v); len(f) > 0 && f[len(f)-1] == "2" {
					return pid
				}
			}
		}
	}
	return 0
}

// insideStopped says whether the command of sp stopped its inside (SIGSTOP, which inside
// cannot catch), which then no longer reports; if so, it is resumed, to end the command
// and send its output when the watch stops it. A box paused (every process stopped, see
// Pause) is not: p.mu, held, keeps Pause from stopping inside meanwhile, and Connect
// resumes it before the box runs.
func (p *Provider) insideStopped(bx *box, sp *space, pid int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if bx.state != running {
		return false
	}
	if ns, ok := pidNamespace(pid); !ok || ns != sp.ns {
		return false // gone: the command is ending
	}
	st, ok := procState(pid)
	if !ok || (st != 'T' && st != 't') {
		return false
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	return true
}

// diskWait is how long the watch waits for the next measure of the workspace after one
// that took took: diskShare times as long, at least every and at most atMost (or every,
// if more).
func diskWait(took, every, atMost time.Duration) time.Duration {
	return max(every, min(diskShare*took, atMost))
}

// overProcesses says which limit the processes of a box (members, with their pid
// namespaces), or those of sp, are over, if any: the CPU time of sp's together, the
// memory of all the box's together, with the memory files they hold (held, from the
// last look at them) and the SysV shared memory of each command (reported, by pid
// namespace: what its inside last reported).
func (p *Provider) overProcesses(members map[int]uint64, sp *space, held heldFiles, reported map[uint64]uint64) string {
	l := p.limits
	if l.CPUSeconds == 0 && l.TotalMemory == 0 {
		return ""
	}
	var ticks, mem uint64
	mapped := map[fileKey]uint64{}
	sysv := map[uint64]uint64{} // attached, by namespace
	for pid, ns := range members {
		if l.CPUSeconds > 0 && ns == sp.ns {
			ticks += cpuTicks(pid)
		}
		if l.TotalMemory > 0 {
			m := p.memoryUse(pid)
			mem += m.own
			for f, n := range m.files {
				mapped[f] += n
			}
			sysv[ns] += m.sysv
		}
	}
	if l.TotalMemory > 0 {
		// A memory file counts for what it holds or what is mapped of it, the more: its
		// pages once, those no process maps too.
		for f, n := range held.sizes(members) {
			mem += max(n, mapped[f])
			delete(mapped, f)
		}
		for _, n := range mapped {
			mem += n
		}
		// A command's SysV segments, for the more of what inside reported (all of them,
		// attached or not) and what is attached: a report is at most a look old.
		for ns, n := range reported {
			mem += max(n, sysv[ns])
			delete(sysv, ns)
		}
		for _, n := range sysv {
			mem += n
		}
	}
	switch {
	case l.CPUSeconds > 0 && ticks > l.CPUSeconds*clockTicks:
		return fmt.Sprintf("its processes used %s of CPU time together, over the limit of %s",
			(time.Duration(ticks) * time.Second / clockTicks).Round(10*time.Millisecond), time.Duration(l.CPUSeconds)*time.Second)
	case l.TotalMemory > 0 && mem > l.TotalMemory:
		return fmt.Sprintf("the sandbox's processes used %s of memory together, over the limit of %s", humanSize(mem), sizeString(l.TotalMemory))
	}
	return ""
}

// diskBound is twice the workspace's limit: as far as the measure of a workspace as a
// command starts walks (diskAtStart).
func (p *Provider) diskBound() int64 {
	return 2 * int64(min(p.limits.Disk, math.MaxInt64/2))
}

// diskAtStart is the size of sandbox id's workspace as a command starts, for overDisk:
// measured up to diskBound, which a workspace over it counts as, so that a workspace far
// over its limit costs no more to measure before every command than one at twice it.
// One that cannot be measured counts as empty: the command is stopped if it still
// cannot be.
func (p *Provider) diskAtStart(id string) int64 {
	bound := p.diskBound()
	ws := p.Workspace(id)
	size, err := sandbox.DiskUsage(ws, bound)
	if err != nil {
		return 0
	}
	// With the deleted files that the sandbox's other commands hold, as overDisk counts.
	p.mu.Lock()
	var nss map[uint64]bool
	if bx, ok := p.boxes[id]; ok {
		nss = namespaces(bx)
	}
	p.mu.Unlock()
	if fi, err := os.Stat(ws); err == nil && len(nss) > 0 {
		size += p.heldFiles(p.memberNamespaces(nss), fi.Sys().(*syscall.Stat_t).Dev).deleted
	}
	return min(size, bound)
}

// overDisk says whether the workspace of sandbox id is over its limit, or over the size
// it had when the command started (diskAtStart) if that was more: a workspace over its
// limit (from an earlier command's last moments, or a lower limit since) does not stop
// commands that do not grow it, such as the one that deletes files. One over twice its
// limit when the command started (diskBound) stops it unless it is brought under that
// by the next look. Files deleted from it that its processes still hold (deleted bytes,
// see heldFiles) count. A workspace that cannot be measured (see sandbox.DiskUsage) is
// over it.
func (p *Provider) overDisk(id string, atStart, deleted int64) string {
	limit := max(int64(p.limits.Disk), atStart)
	size, err := deleted, error(nil)
	if deleted <= limit {
		// Bounded (most > 0) by what the deleted files leave of the limit.
		var walked int64
		walked, err = sandbox.DiskUsage(p.Workspace(id), max(limit-deleted, 1))
		size += walked
	}
	var why string
	switch {
	case err != nil:
		return fmt.Sprintf("the workspace could not be measured against its limit of %s: %v", sizeString(p.limits.Disk), err)
	case size <= limit:
		return ""
	case atStart >= p.diskBound():
		why = fmt.Sprintf("the workspace was over twice its limit of %s when the command started, and still is: delete files to bring it under", sizeString(p.limits.Disk))
	case atStart > int64(p.limits.Disk):
		why = fmt.Sprintf("the workspace, over its limit of %s when the command started (%s), grew", sizeString(p.limits.Disk), humanSize(uint64(atStart)))
	default:
		why = fmt.Sprintf("the workspace grew past its limit of %s", sizeString(p.limits.Disk))
	}
	if deleted > 0 {
		why += fmt.Sprintf(", counting %s of deleted files its processes hold open", humanSize(uint64(deleted)))
	}
	return why
}

// memberNamespaces lists the processes in the pid namespaces nss, with their namespace.
func (p *Provider) memberNamespaces(nss map[uint64]bool) map[int]uint64 {
	out := map[int]uint64{}
	if len(nss) == 0 {
		return out
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, ok := pidNamespace(pid); ok && nss[ns] {
			out[pid] = ns
		}
	}
	return out
}

// cpuTicks is the CPU time of process pid and of the children it waited for, in clock
// ticks (/proc/PID/stat: utime, stime, cutime, cstime). A process reaped by no one (its
// parent ignores SIGCHLD) leaves its time uncounted once it is gone.
func cpuTicks(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	// Fields from the state on: field N of proc(5) is f[N-3].
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0
	}
	var t uint64
	for _, s := range f[11:15] {
		n, _ := strconv.ParseUint(s, 10, 64)
		t += n
	}
	return t
}

// humanSize writes n bytes in the largest binary unit under it, to a tenth.
func humanSize(n uint64) string {
	for _, u := range []struct {
		name string
		size uint64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.size {
			return strconv.FormatFloat(float64(n)/float64(u.size), 'f', 1, 64) + " " + u.name
		}
	}
	return strconv.FormatUint(n, 10) + " bytes"
}
