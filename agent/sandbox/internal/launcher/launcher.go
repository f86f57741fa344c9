// Package launcher starts commands that must die with chatd (a parent-death signal) from
// an OS thread kept for them, so that the signal is not sent while chatd lives. The
// sandbox providers share it.
package launcher

import (
	"os/exec"
	"runtime"
	"sync"
)

// Launcher starts commands from an OS thread kept for them alone.
//
// Commands are started with a parent-death signal (SIGKILL) so that they die with chatd.
// Linux sends it when the thread that forked the command ends, not the process, and a
// goroutine runs on whatever thread the Go runtime gives it; the runtime ends a thread
// when a goroutine locked to it returns, which code anywhere in the process may do. A
// command forked from an ordinary goroutine could therefore be killed while chatd lives.
// So every command is forked by one goroutine locked to its thread, which no other
// goroutine can run on, and that thread lives while any command it forked has not been
// waited for. Then the goroutine returns, ending the thread with no child left to signal,
// and the next command starts another.
type Launcher struct {
	mu sync.Mutex
	// live counts the commands started and not yet waited for.
	live int
	// reqs reaches the thread's goroutine; nil while there is none (live is 0).
	reqs chan launch
}

type launch struct {
	cmd *exec.Cmd
	err chan<- error
}

// Start starts cmd from the launcher's thread. When it succeeds, the caller calls done
// once cmd has been waited for (Wait returned), and not before: the thread ending would
// kill the command.
func (l *Launcher) Start(cmd *exec.Cmd) (done func(), err error) {
	l.mu.Lock()
	if l.reqs == nil {
		l.reqs = make(chan launch)
		go run(l.reqs)
	}
	l.live++
	reqs := l.reqs
	l.mu.Unlock()

	errc := make(chan error, 1)
	reqs <- launch{cmd: cmd, err: errc}
	if err := <-errc; err != nil {
		l.done()
		return nil, err
	}
	return l.done, nil
}

// done ends the hold of one command on the thread: the last lets it end.
func (l *Launcher) done() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live--; l.live == 0 {
		close(l.reqs)
		l.reqs = nil
	}
}

// run starts the commands it receives until reqs is closed. It never unlocks its thread,
// so returning ends the thread rather than handing it to other goroutines.
func run(reqs <-chan launch) {
	runtime.LockOSThread()
	for r := range reqs {
		r.err <- r.cmd.Start()
	}
}
