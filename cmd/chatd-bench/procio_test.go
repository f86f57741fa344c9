package main

import (
	"bufio"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSyscw(t *testing.T) {
	n, err := parseSyscw(bufio.NewScanner(strings.NewReader("rchar: 6976\nwchar: 12\nsyscr: 10\nsyscw: 4711\nread_bytes: 0\n")))
	require.NoError(t, err)
	assert.Equal(t, int64(4711), n)
	_, err = parseSyscw(bufio.NewScanner(strings.NewReader("rchar: 1\n")))
	assert.Error(t, err)
}

// This process's own count grows when it writes.
func TestProcSyscwCountsWrites(t *testing.T) {
	n0, err := procSyscw(os.Getpid())
	require.NoError(t, err, "/proc/<pid>/io (task I/O accounting, in every distribution's kernel)")
	f, err := os.Create(t.TempDir() + "/x")
	require.NoError(t, err)
	defer f.Close()
	for range 10 {
		_, err := f.Write([]byte("x"))
		require.NoError(t, err)
	}
	n1, err := procSyscw(os.Getpid())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n1-n0, int64(10))
}
