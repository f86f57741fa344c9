package ws_test

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
)

// writers counts the goroutines in a connection's writer.
func writers() int { return goroutinesIn("ws.(*conn).writeLoop") }

// workers counts the goroutines in a connection's command worker.
func workers() int { return goroutinesIn("ws.(*conn).work") }

// goroutinesIn counts the goroutines that have fn on their stack.
func goroutinesIn(fn string) int {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	// The first line is the profile's header, "goroutine profile: total N": the first
	// block (the most goroutines) starts after it.
	_, profile, _ := strings.Cut(b.String(), "\n")
	n := 0
	for _, block := range strings.Split(profile, "\n\n") {
		if strings.Contains(block, fn+"\n") || strings.Contains(block, fn+"+") {
			// A block starts with "<count> @ <pcs>".
			var count int
			if _, err := fmt.Sscan(block, &count); err == nil {
				n += count
			}
		}
	}
	return n
}

// An idle connection costs one goroutine, its reader: the writer exits once the queue is
// empty and a new frame starts another. Not parallel, so no other test's writers count.
func TestIdleConnectionsHaveNoWriter(t *testing.T) {
	e := newEnv(t, envOptions{agent: script.New(script.Text("a", "b"))})
	first := e.session()
	for range 9 {
		e.join(first.State.SessionID)
	}
	require.Eventually(t, func() bool { return writers() == 0 }, 10*time.Second, 5*time.Millisecond,
		"writers still running for idle connections: %d", writers())

	// A run wakes a writer per connection, and they go again once it is sent.
	require.Equal(t, "ack", first.Chat("r1", "hi").Type)
	require.Equal(t, "chat.done", first.ReadTerminal().Type)
	require.Equal(t, "ab", first.State.Sorted()[1].Content)
	require.Eventually(t, func() bool { return writers() == 0 }, 10*time.Second, 5*time.Millisecond)
}

// Commands start a worker, which goes once they are answered: an idle connection keeps
// no command goroutine. Not parallel, so no other test's workers count.
func TestIdleConnectionsHaveNoWorker(t *testing.T) {
	e := newEnv(t, envOptions{agent: script.New(script.Text("a", "b"))})
	c := e.session()
	for i := range 5 {
		requireHistory(t, c, fmt.Sprint("h-", i))
	}
	require.Equal(t, "ack", c.Chat("r1", "hi").Type)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	require.Eventually(t, func() bool { return workers() == 0 }, 10*time.Second, 5*time.Millisecond,
		"workers still running for an idle connection: %d", workers())
}
