package bwrap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/chatd/chatd/agent/sandbox"
)

// The sandbox runs chatd's own executable as the command's first process, between bwrap
// and the command's shell (inside): by its descriptor exeFD, which bwrap passes on, and
// told what to do by insideArg. Descriptor controlFD is the read end of a pipe whose
// write end chatd holds, reportFD the write end of one that chatd reads.
const (
	insidePath = "/proc/self/fd/5" // exeFD
	insideArg  = "chatd-sandbox-inside"
	controlFD  = 4
	exeFD      = 5
	reportFD   = 6
)

// Any executable with this package in it (chatd, its tests) turns into inside when the
// sandbox runs it so, before anything else of it runs: there is no other way to get a
// program of chatd's into every sandbox, whatever /usr holds.
func init() {
	if len(os.Args) > 2 && os.Args[0] == insidePath && os.Args[1] == insideArg {
		// Not os.Exit, which in a build with the race detector (the tests') waits a
		// second for reports: on every command. inside has nothing to flush.
		syscall.Exit(inside(os.Args[2:]))
	}
}

// inside runs in the sandbox the command line it is given (prlimit … /bin/sh -c command)
// after the limit of output to keep (0 keeps all) and how often to report the SysV
// shared memory, in milliseconds (0: never). It stands between the command and chatd for
// three things that bwrap cannot do:
//
//   - The output. Over the limit, the head is passed on as it comes, the tail kept, the
//     middle counted and dropped here, on the sandbox's CPU time: chatd reads at most the
//     limit (and the marker), however much the command writes.
//   - The end. When the command's shell exits, everything else the command started is
//     killed (kill -1: every process of the namespace but bwrap's init and this one), as
//     the namespace's death did before: a process left in the background holding the
//     output open cannot keep the tail from being sent. chatd closing the control pipe
//     (a time limit, a sandbox limit) ends the shell first, and the rest the same way, so
//     that a stopped command's output keeps its end too.
//   - The SysV shared memory of the command's IPC namespace, which chatd cannot see from
//     outside it: a segment detached from every process is in none's pages. inside reads
//     /proc/sysvipc/shm, which shows the reader's namespace, and reports its total on
//     reportFD when it changes (reportShm).
//
// It exits with the shell's status (128+signal when a signal killed it), which bwrap
// reports. It makes itself undumpable, so that the command, running as the same user,
// can neither open its descriptors through /proc (the pipe to chatd, the control pipe)
// nor trace it; the command can kill it, and then only loses its own output. It does not
// stop at SIGTSTP, SIGTTIN or SIGTTOU; the command can stop it with SIGSTOP, which the
// watch of its processes sees, and stops the command for.
func inside(args []string) int {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// bwrap passes on what it inherited: the control pipe and the executable's
	// descriptor must not reach the command.
	closeOnExec()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "chatd sandbox: %v\n", err)
		return 127
	}
	limit, err := strconv.Atoi(args[0])
	var every int
	if err == nil && len(args) > 1 {
		every, err = strconv.Atoi(args[1])
	}
	if err != nil || len(args) < 3 {
		return fail(errors.New("usage: " + insideArg + " LIMIT REPORT-MS COMMAND..."))
	}
	// Caught, not ignored: the command gets them with their default action.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	if every > 0 {
		go reportShm(os.NewFile(reportFD, "report"), time.Duration(every)*time.Millisecond)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	cmd := exec.Command(args[2], args[3:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, w, w
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	w.Close()

	var out io.Writer = os.Stdout
	var kept *sandbox.HeadTail
	if limit > 0 {
		kept = &sandbox.HeadTail{Head: limit / 2, Tail: limit - limit/2, Out: os.Stdout}
		out = kept
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		// Reads of a pipe return at most its 64 KiB.
		_, _ = io.CopyBuffer(out, struct{ io.Reader }{r}, make([]byte, 64<<10))
	}()
	stop := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.NewFile(controlFD, "control"))
		close(stop)
	}()
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-stop:
		_ = cmd.Process.Kill()
		<-waited
	}
	// Everything else, until nothing is left to kill: a process forking meanwhile may
	// have a child the first pass did not see.
	for i := 0; i < 1000 && syscall.Kill(-1, syscall.SIGKILL) == nil; i++ {
		time.Sleep(time.Millisecond)
	}
	<-copied
	if kept != nil {
		_ = kept.Close()
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// reportShm writes to w, every every while it changes, the SysV shared memory of
// inside's IPC namespace (sysvBytes), a line of decimal bytes each time.
func reportShm(w io.Writer, every time.Duration) {
	last := int64(-1)
	for {
		if n := sysvBytes(); n != last {
			if _, err := fmt.Fprintf(w, "%d\n", n); err != nil {
				return
			}
			last = n
		}
		time.Sleep(every)
	}
}

// sysvBytes is the memory of the SysV shared memory segments of the reader's IPC
// namespace (/proc/sysvipc/shm): their resident and swapped pages (rss, swap), or their
// size on kernels that do not show those.
func sysvBytes() int64 {
	b, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		return 0
	}
	lines := strings.Split(string(b), "\n")
	cols := map[string]int{}
	for i, name := range strings.Fields(lines[0]) {
		cols[name] = i
	}
	use := []string{"rss", "swap"}
	if _, ok := cols["rss"]; !ok {
		use = []string{"size"}
	}
	var total int64
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		for _, name := range use {
			if i, ok := cols[name]; ok && i < len(f) {
				n, _ := strconv.ParseInt(f[i], 10, 64)
				total += n
			}
		}
	}
	return total
}
