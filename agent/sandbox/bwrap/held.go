package bwrap

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/chatd/chatd/agent/sandbox"
)

// What no directory entry and no process's own pages show can still hold disk or memory
// while a process of the sandbox has it open or mapped:
//
//   - A file deleted from the workspace: its blocks are freed when the last descriptor and
//     mapping of it go, and a walk of the workspace does not see them meanwhile. Those on
//     the workspace's file system count towards its size, but for those whose path (as
//     the process sees it) is not in /workspace: the system's, read-only there (a library
//     the host replaced while a process maps it), which the sandbox cannot have written
//     nor moved there. A deleted file of the sandbox's /tmp or /dev/shm is still in that
//     tmpfs's size, which TmpSize bounds.
//   - A memory file: a memfd (memfd_create), or the object behind a shared anonymous
//     mapping, pages of the kernel's internal tmpfs (shmDev) that are in a process's
//     proportional share (Pss_Shmem) only while it maps them, and then only those its page
//     tables hold. Each counts towards the memory of the sandbox's processes for the more of
//     its allocated blocks and what they map of it (see memoryUse): its pages once.
//   - SysV shared memory, which the sandbox's own process measures in the command's IPC
//     namespace and reports (inside.go: reportShm); a segment attached by a process is
//     in its Pss_Shmem too, and counts once (overProcesses).
//
// The watch finds the first two in /proc, every time it measures the workspace (they cost
// a look at every descriptor): each process's descriptors (/proc/PID/fd, stated through
// the link), and, where chatd may follow the links of /proc/PID/map_files (CAP_SYS_ADMIN,
// as root), what its mappings hold that no descriptor does. Each file counts once, however
// many processes hold it.

// fileKey is a file: its device and inode.
type fileKey struct{ dev, ino uint64 }

// heldFiles is what the sandbox's processes hold of files that no directory entry shows.
type heldFiles struct {
	// deleted is the size of the deleted files on the workspace's file system, each its
	// blocks and at least sandbox.MinEntryUsage, as sandbox.DiskUsage counts a file.
	deleted int64
	// memory is each memory file, by the processes that held it.
	memory map[fileKey]*memoryFile
}

// memoryFile is a memory file held by a sandbox's processes.
type memoryFile struct {
	size    uint64 // allocated (st_blocks), bytes
	holders []int  // pids
}

// sizes is the size of each memory file that a process of members still holds: one
// whose processes have all exited since the look counts no more.
func (h heldFiles) sizes(members map[int]uint64) map[fileKey]uint64 {
	out := map[fileKey]uint64{}
	for f, m := range h.memory {
		for _, pid := range m.holders {
			if _, ok := members[pid]; ok {
				out[f] = m.size
				break
			}
		}
	}
	return out
}

// heldFiles finds what processes (by pid, with their pid namespaces) hold of files that
// no directory entry shows: those deleted from the file system wsDev, and memory files.
func (p *Provider) heldFiles(members map[int]uint64, wsDev uint64) heldFiles {
	h := heldFiles{memory: map[fileKey]*memoryFile{}}
	seen := map[fileKey]bool{}
	for pid := range members {
		dir := "/proc/" + strconv.Itoa(pid) + "/"
		// hold notes pid as a holder of k, if it is a memory file.
		hold := func(k fileKey) {
			if m := h.memory[k]; m != nil && m.holders[len(m.holders)-1] != pid {
				m.holders = append(m.holders, pid)
			}
		}
		// count counts the file of st, its path as the process sees it ("" if unknown).
		count := func(st *unix.Stat_t, path string) {
			k := fileKey{st.Dev, st.Ino}
			if seen[k] || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 0 {
				return
			}
			seen[k] = true
			switch {
			case st.Dev == wsDev:
				if path == "" || strings.HasPrefix(path, workspacePath+"/") {
					h.deleted += max(st.Blocks*512, sandbox.MinEntryUsage)
				}
			// A memfd of hugetlbfs is not on shmDev: known by its name.
			case (p.shm && st.Dev == p.shmDev) || strings.HasPrefix(path, "/memfd:"):
				h.memory[k] = &memoryFile{size: uint64(st.Blocks) * 512, holders: []int{pid}}
			}
		}
		for _, fd := range readNames(dir + "fd") {
			var st unix.Stat_t
			if unix.Stat(dir+"fd/"+fd, &st) != nil || st.Nlink != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
				continue
			}
			if seen[fileKey{st.Dev, st.Ino}] {
				hold(fileKey{st.Dev, st.Ino})
				continue
			}
			link, _ := os.Readlink(dir + "fd/" + fd) // "" if it cannot be read: counted
			count(&st, link)
		}
		if p.mapFiles {
			p.heldMappings(dir, wsDev, seen, count, hold)
		}
	}
	return h
}

// heldMappings counts, with count, the deleted files and memory files that process dir
// (/proc/PID/) maps, each not seen yet (stated through /proc/PID/map_files), and notes
// it with hold as a holder of those seen already.
func (p *Provider) heldMappings(dir string, wsDev uint64, seen map[fileKey]bool, count func(*unix.Stat_t, string), hold func(fileKey)) {
	f, err := os.Open(dir + "maps")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// A path too long to show is none: that mapping is stated too.
		m, ok := parseMapping(sc.Text())
		if !ok || m.file.ino == 0 || (m.path != "" && !strings.HasSuffix(m.path, " (deleted)")) ||
			!(m.file.dev == wsDev || (p.shm && m.file.dev == p.shmDev && !m.sysv())) {
			continue
		}
		if seen[m.file] {
			hold(m.file)
			continue
		}
		var st unix.Stat_t
		if unix.Stat(dir+"map_files/"+m.addrs, &st) == nil {
			count(&st, m.path)
		}
	}
}

// mapping is a line of /proc/PID/maps, or a mapping's first line in /proc/PID/smaps.
type mapping struct {
	addrs string // start-end, its name in /proc/PID/map_files
	file  fileKey
	path  string // with a " (deleted)" suffix if so
}

// sysv says whether the mapping is a SysV shared memory segment's (its inode is the
// segment's id, not a file's).
func (m mapping) sysv() bool { return strings.HasPrefix(m.path, "/SYSV") }

// parseMapping reads a mapping's line: start-end perms offset major:minor inode path.
func parseMapping(line string) (mapping, bool) {
	f := strings.Fields(line)
	if len(f) < 5 || !strings.Contains(f[0], "-") || strings.HasSuffix(f[0], ":") {
		return mapping{}, false
	}
	maj, min, ok := strings.Cut(f[3], ":")
	if !ok {
		return mapping{}, false
	}
	ma, err1 := strconv.ParseUint(maj, 16, 32)
	mi, err2 := strconv.ParseUint(min, 16, 32)
	ino, err3 := strconv.ParseUint(f[4], 10, 64)
	start, end, _ := strings.Cut(f[0], "-")
	if err1 != nil || err2 != nil || err3 != nil {
		return mapping{}, false
	}
	return mapping{
		// map_files names them without maps' leading zeros.
		addrs: trimZeros(start) + "-" + trimZeros(end),
		file:  fileKey{unix.Mkdev(uint32(ma), uint32(mi)), ino},
		path:  strings.Join(f[5:], " "),
	}, true
}

// trimZeros writes hexadecimal number s without leading zeros.
func trimZeros(s string) string {
	if t := strings.TrimLeft(s, "0"); t != "" {
		return t
	}
	return "0"
}

// readNames lists directory dir, unsorted; nothing if it cannot be read.
func readNames(dir string) []string {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	return names
}

// procMemory is what memoryUse finds of one process's memory.
type procMemory struct {
	// own is its proportional share of its anonymous pages and of its shared-memory
	// pages but those of memory files and SysV segments.
	own uint64
	// files is its share of the pages of each memory file it maps, sysv of the SysV
	// segments it has attached.
	files map[fileKey]uint64
	sysv  uint64
}

// memoryUse is the memory process pid holds that only it or the sandbox can free: its
// proportional share of anonymous and shared-memory pages (smaps_rollup: Pss_Anon,
// Pss_Shmem), so that pages shared after a fork count once; not the pages of files it
// maps, which the kernel can drop and read again. When it has shared-memory pages, those
// of memory files and SysV segments are told apart by mapping (smaps), to be counted by
// file and by segment, once. Without those lines (older kernels), its resident anonymous
// and shared pages (status: RssAnon, RssShmem).
func (p *Provider) memoryUse(pid int) procMemory {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	v, ok := readKB(dir+"smaps_rollup", "Pss_Anon:", "Pss_Shmem:")
	if !ok {
		v, _ = readKB(dir+"status", "RssAnon:", "RssShmem:")
		return procMemory{own: v[0] + v[1]}
	}
	if v[1] == 0 || !p.shm {
		return procMemory{own: v[0] + v[1]}
	}
	// smaps first, then the totals again: a process that exits between the two reads
	// (its smaps cut short, or empty) has no totals left either, and its pages of memory
	// files do not count twice, in its own and by file.
	m := p.splitShmem(dir + "smaps")
	v, _ = readKB(dir+"smaps_rollup", "Pss_Anon:", "Pss_Shmem:")
	m.own = v[0] + v[1] - min(m.own, v[1])
	return m
}

// splitShmem reads smaps file: in files and sysv, the pages of the memory files and
// SysV segments it shows mapped, and in own their sum. smaps tells a mapping's Pss, not
// its Pss_Shmem: a mapping of shmDev holds shared-memory pages, and the anonymous ones
// that a private mapping copied on write (Anonymous, not proportional: most are the
// process's own), which are left out.
func (p *Provider) splitShmem(file string) procMemory {
	m := procMemory{files: map[fileKey]uint64{}}
	f, err := os.Open(file)
	if err != nil {
		return m
	}
	defer f.Close()
	var cur mapping
	var shared bool // cur is of shmDev
	var pss, anon uint64
	flush := func() {
		if !shared || pss <= anon {
			return
		}
		n := pss - anon
		m.own += n
		if cur.sysv() {
			m.sysv += n
		} else {
			m.files[cur.file] += n
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			pss = parseKB(v)
		} else if v, ok := strings.CutPrefix(line, "Anonymous:"); ok {
			anon = parseKB(v)
		} else if mm, ok := parseMapping(line); ok {
			flush()
			cur, shared, pss, anon = mm, mm.file.dev == p.shmDev, 0, 0
		}
	}
	flush()
	return m
}

// readKB reads the values (in kB, returned in bytes) of the lines of file that begin with
// keys; ok when there were all of them.
func readKB(file string, keys ...string) ([]uint64, bool) {
	out := make([]uint64, len(keys))
	f, err := os.Open(file)
	if err != nil {
		return out, false
	}
	defer f.Close()
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for i, k := range keys {
			if v, ok := strings.CutPrefix(line, k); ok {
				out[i] = parseKB(v)
				found++
			}
		}
	}
	return out, found == len(keys)
}

// parseKB reads a value of smaps or status, "  123 kB", in bytes.
func parseKB(v string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
	return n << 10
}

// shmDevice is the device of the kernel's internal tmpfs, where memfds, shared anonymous
// memory and SysV segments live, as a memfd of chatd's shows; ok false without memfds.
func shmDevice() (uint64, bool) {
	fd, err := unix.MemfdCreate("chatd-probe", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return 0, false
	}
	return st.Dev, true
}

// canStatMappings says whether chatd may follow the links of /proc/PID/map_files (it
// needs CAP_SYS_ADMIN), trying on one of its own mappings.
func canStatMappings() bool {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := parseMapping(sc.Text()); ok && m.file.ino != 0 {
			var st unix.Stat_t
			return unix.Stat("/proc/self/map_files/"+m.addrs, &st) == nil
		}
	}
	return false
}
