package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is a process under test: chatd or the baseline.
type server struct {
	name string
	cmd  *exec.Cmd
	addr string
	// adminAddr serves chatd's /metrics and /debug/pprof/ (the baseline's: only
	// /debug/pprof/).
	adminAddr string
	peer      bool          // the Centrifuge peer, whose clients speak its protocol
	compress  bool          // its clients offer permessage-deflate (CHATD_COMPRESSION)
	logs      *bytes.Buffer // its stderr, shown when it fails
	exited    chan struct{} // closed once the process has been waited for
	err       error         // Wait's result, once exited is closed
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startServer starts a server process and waits until GET ready answers 200.
func startServer(ctx context.Context, name, addr, readyPath string, env []string, bin string, args ...string) (*server, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logs := &bytes.Buffer{}
	cmd.Stderr = &limitedWriter{w: logs, left: 1 << 20}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, addr: addr, logs: logs, exited: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get("http://" + addr + readyPath)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("%s exited before it was ready (%v):\n%s", name, s.err, tail(logs.String(), 3000))
		case <-ctx.Done():
			s.kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("%s was not ready within 2 minutes:\n%s", name, tail(logs.String(), 3000))
		}
	}
}

func (s *server) pid() int { return s.cmd.Process.Pid }

// stop asks the server to shut down (SIGTERM) and kills it if it takes over 30 s.
func (s *server) stop() error {
	_ = syscall.Kill(s.pid(), syscall.SIGTERM)
	select {
	case <-s.exited:
		if s.err != nil {
			return fmt.Errorf("%s exited with %v:\n%s", s.name, s.err, tail(s.logs.String(), 2000))
		}
		return nil
	case <-time.After(30 * time.Second):
		s.kill()
		return fmt.Errorf("%s did not stop within 30s after SIGTERM", s.name)
	}
}

func (s *server) kill() {
	_ = syscall.Kill(s.pid(), syscall.SIGKILL)
	<-s.exited
}

// cpu returns the CPU time (user + system) the process has used so far.
func (s *server) cpu() (time.Duration, error) { return procCPU(s.pid()) }

// rss returns the process's resident set size in bytes.
func (s *server) rss() (int64, error) { return procRSS(s.pid()) }

var clockTick = 100 // USER_HZ; 100 on every Linux we run on

func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / time.Duration(clockTick), nil
}

func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// postgresCPU is the CPU time the PostgreSQL processes running now have used (the
// server and its backends: those a chatd opens live as long as its pool keeps them).
func postgresCPU() time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		if d, err := procCPU(pid); err == nil {
			total += d
		}
	}
	return total
}

// selfCPU is the CPU time this process (the load generator) has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// metrics is a scrape of chatd's /metrics (on its admin listener): series (name with labels, as written) to value.
type metrics map[string]float64

func scrape(addr string) (metrics, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// sum adds every series of a metric whose labels contain all of the given label pairs
// (e.g. `statement="MessageInsert"`).
func (m metrics) sum(name string, labels ...string) float64 {
	var total float64
	for k, v := range m {
		series, rest, _ := strings.Cut(k, "{")
		if series != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// statementsSince returns how many times each database statement ran between scrape m0
// and m.
func (m metrics) statementsSince(m0 metrics) map[string]float64 {
	const name = "chatd_db_statement_duration_seconds_count"
	d := m.byLabel(name, "statement")
	for k, v := range m0.byLabel(name, "statement") {
		d[k] -= v
	}
	return d
}

// poll calls check every 20 ms until it reports done or fails. It reports false, with no
// error, when limit passes first.
func poll(ctx context.Context, limit time.Duration, check func() (bool, error)) (bool, error) {
	deadline := time.Now().Add(limit)
	for {
		done, err := check()
		if done || err != nil {
			return done, err
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// byLabel returns the values of a metric keyed by one label's value.
func (m metrics) byLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		series, rest, _ := strings.Cut(k, "{")
		if series != name {
			continue
		}
		_, after, ok := strings.Cut(rest, label+`="`)
		if !ok {
			continue
		}
		val, _, _ := strings.Cut(after, `"`)
		out[val] += v
	}
	return out
}

type limitedWriter struct {
	w    io.Writer
	left int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.left <= 0 {
		return len(p), nil
	}
	n := min(len(p), l.left)
	l.left -= n
	_, err := l.w.Write(p[:n])
	return len(p), err
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// saveProfile fetches a pprof profile from the server into dir, named after the server
// and kind. Failures are reported and otherwise ignored: a profile is a diagnostic.
func saveProfile(s *server, dir, path, kind string) {
	name := filepath.Join(dir, strings.NewReplacer(" ", "", ",", "-", "(", "", ")", "").Replace(s.name)+"."+kind+".pprof")
	err := func() error {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		resp, err := http.Get("http://" + s.adminAddr + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		f, err := os.Create(name)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(f, resp.Body)
		return err
	}()
	if err != nil {
		logf("profile %s of %s: %v", kind, s.name, err)
		return
	}
	logf("saved %s", name)
}
