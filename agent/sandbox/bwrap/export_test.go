package bwrap

import "time"

// Processes returns the states (R, S, T, …) of the processes running in sandbox id, by pid.
func (p *Provider) Processes(id string) map[int]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	bx, ok := p.boxes[id]
	if !ok {
		return map[int]byte{}
	}
	return p.members(namespaces(bx))
}

// Stopped reports, by pid, whether each process of sandbox id runs no more code of its
// own (stopped, dead, or in the kernel with a SIGSTOP pending), as Pause judges it.
func (p *Provider) Stopped(id string) map[int]bool {
	out := map[int]bool{}
	for pid, st := range p.Processes(id) {
		out[pid] = stopped(pid, st)
	}
	return out
}

// SetFreeze changes how long Pause waits for processes to stop, and how it reads a
// process's state (nil: from /proc), to stand for a process that will not stop.
func (p *Provider) SetFreeze(wait time.Duration, state func(pid int) (byte, bool)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.freezeWait = wait
	if state == nil {
		state = procState
	}
	p.procState = state
}

// ProcState reads a process's state from /proc.
var ProcState = procState

// DiskWait is how long the watch waits for its next measure of a workspace after one
// that took took.
var DiskWait = diskWait

// ParseMapping reads a line of /proc/PID/maps: the mapping's name in /proc/PID/map_files,
// its file's device and inode, and its path.
func ParseMapping(line string) (addrs string, dev, ino uint64, path string, ok bool) {
	m, ok := parseMapping(line)
	return m.addrs, m.file.dev, m.file.ino, m.path, ok
}
