package server

import (
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/demo"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// A long run's progress survives its process: after kill -9 the database holds a recent
// report (the first at once, then one per window), the next process shows the continued
// run with it, and the run ends with its last step. A clean stop (SIGTERM) stores the
// very last report the tabs saw, and the conversation list shows it.
func TestProgressSurvivesRestarts(t *testing.T) {
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := map[string]string{
		"DATABASE_URL":     dbURL,
		"CHATD_DEMO_DELAY": "15ms",
		"CHATD_DEMO_WORDS": "300",
		"CHATD_RECOVER":    "continue",
	}
	first := startChild(t, "chatd (to be killed)", env)
	c := wstest.Dial(t, first.wsURL(), nil)
	sessionID := c.Hello("").SessionID
	ack := c.Chat("req-steps", "show your steps")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)

	// Every tab sees the reports live.
	c.Await(func(f wstest.Frame) bool {
		require.False(t, f.Terminal(), "the run ended before the crash")
		return f.Type == "run.status" && f.Run.Progress != nil && f.Run.Progress.Step >= 2
	})
	first.signal(syscall.SIGKILL)
	first.wait(15 * time.Second)
	crashed := getRun(t, st, ack.RunID)
	require.Equal(t, chat.RunRunning, crashed.Status)
	require.NotNil(t, crashed.Progress, "a report was stored before the crash")
	require.Equal(t, demo.ProgressSteps, crashed.Progress.Of)
	require.Equal(t, demo.ProgressLabel, crashed.Progress.Label)

	second := restartChild(t, first, "chatd (restarted)", env)
	again := wstest.Dial(t, second.wsURL(), nil)
	snap := again.Hello(sessionID)
	require.Equal(t, "snapshot", snap.Type)
	require.NotNil(t, snap.ActiveRun, "%s", snap.Raw)
	require.Equal(t, ack.RunID, snap.ActiveRun.RunID)
	require.NotNil(t, snap.ActiveRun.Progress, "the continued run keeps its progress: %s", snap.Raw)
	require.GreaterOrEqual(t, snap.ActiveRun.Progress.Step, crashed.Progress.Step)

	// A clean stop mid-run stores the last report the tab saw, whatever the window.
	var seen *wstest.Progress
	again.Await(func(f wstest.Frame) bool {
		require.False(t, f.Terminal(), "the run ended before the stop")
		if f.Type == "run.status" && f.Run.Progress != nil {
			seen = f.Run.Progress
		}
		return seen != nil && seen.Step > snap.ActiveRun.Progress.Step && seen.Step < demo.ProgressSteps-1
	})
	second.signal(syscall.SIGTERM)
	second.wait(15 * time.Second)
	suspended := getRun(t, st, ack.RunID)
	require.Equal(t, chat.RunRunning, suspended.Status)
	require.NotNil(t, suspended.Progress)
	// The demo may report once more between the frame and the signal.
	require.Contains(t, []int{seen.Step, seen.Step + 1}, suspended.Progress.Step)

	third := restartChild(t, second, "chatd (restarted again)", env)
	tab := wstest.Dial(t, third.wsURL(), nil)
	tab.Hello(sessionID)
	end := tab.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	require.Equal(t, &wstest.Progress{Step: demo.ProgressSteps, Of: demo.ProgressSteps, Label: demo.ProgressLabel}, end.Run.Progress)

	// The conversation list shows the latest run's progress.
	resp, err := http.Get("http://" + third.addr + "/v1/sessions")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list struct {
		Sessions []struct {
			ID       string           `json:"id"`
			Progress *wstest.Progress `json:"progress"`
		} `json:"sessions"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	require.Len(t, list.Sessions, 1)
	require.Equal(t, sessionID, list.Sessions[0].ID)
	require.Equal(t, end.Run.Progress, list.Sessions[0].Progress)
}
