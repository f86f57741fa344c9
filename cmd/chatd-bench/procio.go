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
func procSyscw(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseSyscw(bufio.NewScanner(f))
}

func parseSyscw(sc *bufio.Scanner) (int64, error) {
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "syscw:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no syscw in /proc/<pid>/io")
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
