package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Swept is what a start-up sweep killed.
type Swept struct {
	Sandboxes int // sandboxes that had processes left running
	Groups    int // process groups those processes were in
	Processes int
}

// Sweep kills what the sandbox commands of earlier chatd processes, now dead, left
// running under the provider's directory, and returns once it has all ended. The parent-
// death signal ended the commands themselves; this is for what they left in the
// background. cmd/chatd calls it at start-up, before serving.
//
// What a live chatd runs (this one's, or another's sharing the directory) is left alone,
// and so is every process not shown to be a sandbox's:
//
//   - A process group that a dead chatd's record names is killed whole while a member it
//     recorded (same pid, same start time) is still in it: while that member is there,
//     the group's id cannot have passed to another group.
//   - A process whose environment names a sandbox of this directory and a dead chatd is
//     killed, with the rest of its group: a group holding a sandbox's process is the
//     sandbox's, whatever else in it cleared its environment.
//
// Records of dead chatd processes are removed once their processes have ended; records
// from an earlier boot are removed without killing anything. Sweep returns ctx's error
// when ctx ends first; the records are then kept for a later sweep.
func (p *Provider) Sweep(ctx context.Context) (Swept, error) {
	recorded, files, err := p.deadRecords()
	if err != nil {
		return Swept{}, fmt.Errorf("read sandbox records: %w", err)
	}
	s := &sweep{
		dir:       p.dir,
		self:      os.Getpid(),
		selfGroup: syscall.Getpgrp(),
		recorded:  recorded,
		ours:      make(map[int]string),
		tried:     make(map[procKey]bool),
	}
	defer s.closeFDs()
	// A pass kills what it finds; a process that forked just before it was killed left a
	// child the pass did not see, which the next pass finds (a killed process forks no
	// more, so this ends).
	for {
		if err := ctx.Err(); err != nil {
			return s.result(), err
		}
		if s.pass() == 0 {
			break
		}
	}
	if err := s.wait(ctx); err != nil {
		return s.result(), err
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return s.result(), fmt.Errorf("remove swept record: %w", err)
		}
	}
	return s.result(), nil
}

// recordedGroup is a process group that a dead chatd recorded.
type recordedGroup struct {
	box     string // the sandbox's id
	pgid    int
	members members
}

// deadRecords reads the records of the provider's sandboxes that chatd processes now dead
// left, and returns their groups and the files to remove once those are swept.
func (p *Provider) deadRecords() (groups []recordedGroup, files []string, err error) {
	boxes, err := os.ReadDir(p.dir)
	if err != nil {
		return nil, nil, err
	}
	boot := bootID()
	for _, b := range boxes {
		if !b.IsDir() {
			continue
		}
		root := filepath.Join(p.dir, b.Name())
		entries, err := os.ReadDir(root)
		if err != nil {
			continue // gone, or not a sandbox of ours
		}
		for _, e := range entries {
			name := e.Name()
			if !strings.HasPrefix(name, recordPrefix) || !strings.HasSuffix(name, recordSuffix) {
				continue
			}
			path := filepath.Join(root, name)
			data, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			var r record
			if json.Unmarshal(data, &r) != nil {
				continue // not ours to judge (records are renamed into place whole)
			}
			if r.Boot != boot {
				files = append(files, path) // nothing of an earlier boot runs
				continue
			}
			if st, ok := procStat(r.Owner.PID); ok && st.start == r.Owner.Start && !st.ended() {
				continue // a live chatd's
			}
			for pgid, m := range r.Groups {
				groups = append(groups, recordedGroup{box: b.Name(), pgid: pgid, members: m})
			}
			files = append(files, path)
		}
	}
	return groups, files, nil
}

// procKey is a process: its pid and start time.
type procKey struct {
	pid   int
	start uint64
}

// proc is a process as a pass sees it.
type proc struct {
	stat
	// box is the sandbox of this directory its environment names ("" if none), and
	// owner the chatd that started it.
	box   string
	owner owner
}

type sweep struct {
	dir             string
	self, selfGroup int
	recorded        []recordedGroup
	// ours are the groups shown to be sandboxes', with the sandbox's id. A group stays
	// ours for the sweep's duration: what a killed member forked is still found in it.
	ours map[int]string
	// tried are the processes a pass tried to kill; killed those it did, with the
	// sandbox they were found for, and fds their pidfds, to wait on.
	tried  map[procKey]bool
	killed []killedProc
	fds    []int
}

type killedProc struct {
	box  string
	pgid int
}

// pass kills the sandboxes' processes it finds that it has not tried before, and returns
// how many those were.
func (s *sweep) pass() int {
	procs := s.scan()
	alive := func(o owner) bool {
		pr, ok := procs[o.PID]
		return ok && pr.start == o.Start && !pr.ended()
	}
	left := func(pr proc) bool { return pr.box != "" && !alive(pr.owner) }

	for _, g := range s.recorded {
		for pid, start := range g.members {
			// A member that ended but was not reaped still holds the group: it counts.
			if pr, ok := procs[pid]; ok && pr.start == start && pr.pgid == g.pgid {
				s.own(g.pgid, g.box)
			}
		}
	}
	for _, pr := range procs {
		if left(pr) {
			s.own(pr.pgid, pr.box)
		}
	}
	found := 0
	for pid, pr := range procs {
		key := procKey{pid, pr.start}
		if pid == s.self || pr.ended() || s.tried[key] {
			continue
		}
		box, inGroup := s.ours[pr.pgid]
		if left(pr) {
			box = pr.box
		} else if !inGroup {
			continue
		}
		s.tried[key] = true
		found++
		if s.kill(key) {
			s.killed = append(s.killed, killedProc{box: box, pgid: pr.pgid})
		}
	}
	return found
}

// own takes group pgid as sandbox box's, unless it is chatd's own group (chatd started
// from a sandbox): then only the processes that carry the marker are killed.
func (s *sweep) own(pgid int, box string) {
	if pgid != s.selfGroup && pgid > 0 {
		s.ours[pgid] = box
	}
}

// kill sends SIGKILL to the process k if it is still the one that started at k.start,
// and reports whether it did.
func (s *sweep) kill(k procKey) bool {
	fd, err := unix.PidfdOpen(k.pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		// No pidfds (Linux before 5.3): by pid, just checked; only a pid reused in
		// between would make this reach another process.
		st, ok := procStat(k.pid)
		return ok && st.start == k.start && syscall.Kill(k.pid, syscall.SIGKILL) == nil
	}
	if err != nil {
		return false // gone
	}
	// The descriptor holds the process that had the pid when it was opened. If the
	// process with that pid now still has the start time, it is that one: the signal
	// reaches it and no other.
	if st, ok := procStat(k.pid); !ok || st.start != k.start ||
		unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) != nil {
		_ = unix.Close(fd)
		return false
	}
	s.fds = append(s.fds, fd)
	return true
}

// wait returns once every process the sweep killed has ended. A pidfd becomes readable
// when its process ends; the poll wakes now and then to see ctx.
func (s *sweep) wait(ctx context.Context) error {
	pfds := make([]unix.PollFd, 0, len(s.fds))
	for _, fd := range s.fds {
		pfds = append(pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
	}
	for len(pfds) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := unix.Poll(pfds, 100); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for swept processes: %w", err)
		}
		waiting := pfds[:0]
		for _, f := range pfds {
			if f.Revents == 0 {
				waiting = append(waiting, f)
			}
		}
		pfds = waiting
	}
	return nil
}

func (s *sweep) closeFDs() {
	for _, fd := range s.fds {
		_ = unix.Close(fd)
	}
}

func (s *sweep) result() Swept {
	boxes, groups := map[string]bool{}, map[int]bool{}
	for _, k := range s.killed {
		boxes[k.box], groups[k.pgid] = true, true
	}
	return Swept{Sandboxes: len(boxes), Groups: len(groups), Processes: len(s.killed)}
}

// scan reads every process: its stat, and for a live one the marker in its environment.
func (s *sweep) scan() map[int]proc {
	procs := make(map[int]proc)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return procs
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := procStat(pid)
		if !ok {
			continue
		}
		pr := proc{stat: st}
		if !st.ended() && pid != s.self {
			pr.box, pr.owner = s.marker(pid)
		}
		procs[pid] = pr
	}
	return procs
}

// marker reads which sandbox of this directory, and which chatd, the environment of pid
// names ("" when it names none).
func (s *sweep) marker(pid int) (box string, o owner) {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return "", owner{}
	}
	var ownerOK bool
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		k, v, _ := strings.Cut(string(kv), "=")
		switch k {
		case envSandbox:
			if id, ok := strings.CutPrefix(v, s.dir+"/"); ok && id != "" && !strings.Contains(id, "/") {
				box = id
			}
		case envOwner:
			o, ownerOK = parseOwner(v)
		}
	}
	if box == "" || !ownerOK {
		return "", owner{}
	}
	return box, o
}
