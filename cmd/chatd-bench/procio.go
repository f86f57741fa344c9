package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procSyscw returns how many write system calls (write, writev, pwrite: /proc/<pid>/io's
// syscw) a process has made so far, all its threads together.
func procSyscw(pid int) (int64, error) { return procIO(pid, "syscw:") }

// procWchar returns how many bytes a process has written so far (/proc/<pid>/io's wchar:
// to sockets, files and pipes alike; a server's are mostly its connections').
func procWchar(pid int) (int64, error) { return procIO(pid, "wchar:") }

func procIO(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseIO(bufio.NewScanner(f), field)
}

func parseSyscw(sc *bufio.Scanner) (int64, error) { return parseIO(sc, "syscw:") }

func parseIO(sc *bufio.Scanner, field string) (int64, error) {
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in /proc/<pid>/io", strings.TrimSuffix(field, ":"))
}

// writtenBytes is the bytes the servers wrote so far, together; -1 when any of them
// cannot be read.
func writtenBytes(srvs []*server) int64 {
	var total int64
	for _, s := range srvs {
		n, err := procWchar(s.pid())
		if err != nil {
			return -1
		}
		total += n
	}
	return total
}

// writeSyscalls is the write system calls the servers made so far, together; -1 when
// any of them cannot be read (a kernel without task I/O accounting).
func writeSyscalls(srvs []*server) int64 {
	var total int64
	for _, s := range srvs {
		n, err := procSyscw(s.pid())
		if err != nil {
			return -1
		}
		total += n
	}
	return total
}
