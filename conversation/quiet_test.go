package conversation_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

// countingReads counts the reads of a session's messages.
type countingReads struct {
	*store.Store
	paths atomic.Int64
}

func (c *countingReads) MessagesPath(ctx context.Context, id uuid.UUID, leaf *uuid.UUID, before int64, limit int) ([]chat.Message, bool, error) {
	c.paths.Add(1)
	return c.Store.MessagesPath(ctx, id, leaf, before, limit)
}

// A quiet conversation drops the messages it keeps in memory a while after its run ended
// (an idle tab on a long conversation then costs its connection only) and reads them
// again, in one statement, for the next snapshot.
func TestQuietConversationReleasesItsMessages(t *testing.T) {
	t.Parallel()
	st := &countingReads{Store: storetest.New(t)}
	var memory *conversation.MemoryReturner
	m := startMetered(t, st, script.PerRun(func(req conversation.Request) []script.Step {
		return []script.Step{script.Text("answer to " + req.Content)}
	}), func(c *conversation.Config) {
		c.QuietRelease = time.Minute
		// Not started: it only counts what the actor drops.
		c.Memory = conversation.NewMemoryReturner(clockwork.NewFakeClock(), 0, 0, nil, nil)
		memory = c.Memory
	})
	tab := convtest.New()
	_, err := m.Hello(testCtx(t), conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)
	tab.AwaitCatchUp(t, 1)
	_, err = m.Send(testCtx(t), conversation.SendRequest{RequestID: "r1", Content: "hello"})
	require.NoError(t, err)
	tab.Await(t, convtest.Terminal)
	require.NoError(t, m.Flush(testCtx(t)))

	snapshot := func() []chat.Message {
		t.Helper()
		s := convtest.New()
		_, err := m.Hello(testCtx(t), conversation.HelloRequest{Subscriber: s})
		require.NoError(t, err)
		return s.AwaitCatchUp(t, 1).Snapshot.Messages
	}
	reads := st.paths.Load()
	want := snapshot()
	require.Len(t, want, 2)
	require.Equal(t, reads, st.paths.Load(), "served from memory")

	// A tab that missed the run's last two events, and one that saw them all.
	head := tab.LastSeq()
	comeBack := func(lastSeq int64) conversation.CatchUp {
		t.Helper()
		s := convtest.New()
		_, err := m.Hello(testCtx(t), conversation.HelloRequest{Subscriber: s, Epoch: m.Epoch(), LastSeq: lastSeq})
		require.NoError(t, err)
		return s.AwaitCatchUp(t, 1)
	}
	behind := comeBack(head - 2)
	require.NotNil(t, behind.Resumed, "replayed from the ring")
	require.Len(t, behind.Events, 2)
	reads = st.paths.Load()

	// Nothing goes before a minute from the run's end.
	require.NoError(t, m.clock.BlockUntilContext(testCtx(t), 1))
	m.clock.Advance(time.Minute - time.Second)
	require.Zero(t, m.value(t, "chatd_conversation_memory_released_total"))
	m.clock.Advance(time.Second)
	require.Eventually(t, func() bool { return m.value(t, "chatd_conversation_memory_released_total") == 1 }, 10*time.Second, 5*time.Millisecond)
	// The two messages' content and their overhead, and the ring's events (the run's
	// and the user message's, each at least its overhead), told to the memory returner.
	require.GreaterOrEqual(t, memory.Dropped(), int64(len("hello")+len("answer to hello")+int(head)*conversation.EventOverhead))

	// The ring went with them: a tab behind gets a snapshot (from the database: that is
	// the one read below), one at the last event still resumes with nothing missed.
	atHead := comeBack(head)
	require.NotNil(t, atHead.Resumed)
	require.Empty(t, atHead.Events)
	require.Equal(t, reads, st.paths.Load())
	behind = comeBack(head - 2)
	require.Nil(t, behind.Resumed, "the events are no longer held")
	require.NotNil(t, behind.Snapshot)
	require.Equal(t, want, behind.Snapshot.Messages)
	reads++

	require.Equal(t, reads, st.paths.Load(), "read again, in one statement")
	got := snapshot()
	require.Equal(t, want, got, "the same snapshot")
	require.Equal(t, reads, st.paths.Load(), "and kept again")
}
