package chat_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/chat"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The list guarded writes expect and the predicate the rest of chatd asks must not drift.
func TestActiveRunStatusesAgreesWithActive(t *testing.T) {
	t.Parallel()
	all := []chat.RunStatus{
		chat.RunRunning, chat.RunAwaitingApproval, chat.RunPaused,
		chat.RunDone, chat.RunError, chat.RunCancelled, chat.RunInterrupted,
	}
	active := chat.ActiveRunStatuses()
	for _, s := range all {
		require.Equal(t, s.Active(), slices.Contains(active, s), s)
	}
	require.Len(t, active, 3)

	active[0] = chat.RunDone
	require.Equal(t, chat.RunRunning, chat.ActiveRunStatuses()[0], "callers get their own copy")
}
