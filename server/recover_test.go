package server

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/demo"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// replyText is the assistant's text of a run, its segments concatenated in order.
func replyText(msgs []chat.Message, runID string) string {
	var b strings.Builder
	for _, m := range msgs {
		if m.Role == chat.RoleAssistant && m.Kind == chat.KindText && m.RunID != nil && m.RunID.String() == runID {
			b.WriteString(m.Content)
		}
	}
	return b.String()
}

// kill -9 mid-reply, then a new chatd on the same database continues the run by itself
// (CHATD_RECOVER=continue): the same run ends done, its text is exactly what an
// uninterrupted run of the same message says, the tool call ran once, and a client
// that reconnects across the restart ends equal to the database.
func TestCrashedRunContinuesAfterRestart(t *testing.T) {
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := map[string]string{
		"DATABASE_URL":     dbURL,
		"CHATD_DEMO_DELAY": "20ms",
		"CHATD_DEMO_WORDS": "200",
		"CHATD_RECOVER":    "continue",
	}
	first := startChild(t, "chatd (to be killed)", env)
	c := wstest.Dial(t, first.wsURL(), nil)
	sessionID := c.Hello("").SessionID
	const content = "please call the tool for me"
	ack := c.Chat("req-crash", content)
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)

	// Kill it while the second segment (after the tool) streams.
	toolEnded := false
	c.Await(func(f wstest.Frame) bool {
		require.False(t, f.Terminal(), "the run ended before the crash")
		if f.Type == "tool.end" {
			toolEnded = true
		}
		return toolEnded && f.Type == "chat.delta"
	})
	first.signal(syscall.SIGKILL)
	first.wait(15 * time.Second)
	require.Equal(t, chat.RunRunning, getRun(t, st, ack.RunID).Status)

	second := restartChild(t, first, "chatd (restarted)", env)
	again := wstest.Dial(t, second.wsURL(), nil)
	again.State = c.State // the old tab reconnects with what it had
	catchUp := again.Hello(sessionID)
	require.Equal(t, "snapshot", catchUp.Type, "a new process is a new epoch")
	end := again.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	require.Equal(t, ack.RunID, end.RunID, "the same run")
	require.Equal(t, 1, end.Run.Recoveries)

	run := getRun(t, st, ack.RunID)
	require.Equal(t, chat.RunDone, run.Status)
	require.Equal(t, 1, run.Recoveries)
	stored := sessionMessages(t, st, sessionID)
	require.Empty(t, wstest.Diff(toWire(t, stored), again.State.Sorted()), "the reconnected tab equals the database")
	tools := 0
	for _, m := range stored {
		if m.Tool != nil {
			tools++
			require.Equal(t, chat.ToolOK, m.Tool.Status)
		}
	}
	require.Equal(t, 1, tools, "the tool call ran once")

	// The same message, uninterrupted, in another session of the restarted chatd.
	u := wstest.Dial(t, second.wsURL(), nil)
	otherSession := u.Hello("").SessionID
	plain := u.Chat("req-plain", content)
	require.Equal(t, "chat.done", u.ReadTerminal().Type)
	want := replyText(sessionMessages(t, st, otherSession), plain.RunID)
	require.NotEmpty(t, want)
	// The demo quotes the tool's result, the time, which differs between the two runs.
	clock := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	require.Equal(t, clock.ReplaceAllString(want, "TIME"), clock.ReplaceAllString(replyText(stored, ack.RunID), "TIME"), "nothing regenerated, nothing lost")
}

// The crash-anywhere property: a chain of chatd processes on one database, each killed
// with SIGKILL at a random moment of a demo run with two tool calls (the seed picks
// when), the next one continuing it. Every run ends done as the same run; its text is
// exactly an uninterrupted run's; each tool call ran once (current_time is idempotent, so
// one cut off while running is run again, never left interrupted); the tab that followed
// it, reconnecting across every restart, ends equal to the database. 100 seeds (about
// 80 s); CHATD_CRASH_SEEDS runs more.
func TestCrashAnywhereProperty(t *testing.T) {
	seeds := 100
	if v := os.Getenv("CHATD_CRASH_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		seeds = max(n, seeds)
	}
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := map[string]string{
		"DATABASE_URL":     dbURL,
		"CHATD_DEMO_DELAY": "10ms",
		"CHATD_DEMO_WORDS": "40",
		"CHATD_RECOVER":    "continue",
	}
	clock := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	const content = "use the tools, please"

	proc := startChild(t, "chatd 0", env)
	// The text of an uninterrupted run, to compare every continued one with.
	u := wstest.Dial(t, proc.wsURL(), nil)
	plainSession := u.Hello("").SessionID
	plain := u.Chat("plain", content)
	require.Equal(t, "chat.done", u.ReadTerminal().Type)
	want := clock.ReplaceAllString(replyText(sessionMessages(t, st, plainSession), plain.RunID), "TIME")
	u.WS.CloseNow()

	for seed := 1; seed <= seeds; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 0))
		c := wstest.Dial(t, proc.wsURL(), nil)
		session := c.Hello("").SessionID
		ack := c.Chat(fmt.Sprintf("crash-%d", seed), content)
		require.Equal(t, "ack", ack.Type)
		// 40 words at 10 ms and two tool calls take about 0.5 s: kill anywhere in it, or
		// just after it ended.
		kill := time.Duration(rng.IntN(700)) * time.Millisecond
		time.AfterFunc(kill, func() { proc.signal(syscall.SIGKILL) })
		for {
			if _, err := c.TryRead(); err != nil {
				var pe *wstest.ProtocolError
				require.False(t, errors.As(err, &pe), "seed %d: %v", seed, err)
				break // the process died
			}
		}
		proc.wait(15 * time.Second)

		proc = restartChild(t, proc, fmt.Sprintf("chatd %d", seed), env)
		back := wstest.Dial(t, proc.wsURL(), nil)
		back.State = c.State
		back.Hello(session)
		run := getRun(t, st, ack.RunID)
		if run.Status.Active() || back.State.ActiveRun != nil {
			end := back.ReadTerminal()
			require.Equal(t, "chat.done", end.Type, "seed %d (killed at %s): %s", seed, kill, end.Raw)
			require.Equal(t, ack.RunID, end.RunID)
		}
		run = getRun(t, st, ack.RunID)
		require.Equal(t, chat.RunDone, run.Status, "seed %d (killed at %s)", seed, kill)
		stored := sessionMessages(t, st, session)
		require.Equal(t, want, clock.ReplaceAllString(replyText(stored, ack.RunID), "TIME"), "seed %d (killed at %s): the text", seed, kill)
		calls := 0
		for _, m := range stored {
			if m.Tool != nil {
				calls++
				require.Equal(t, chat.ToolOK, m.Tool.Status, "seed %d: current_time is idempotent: a call cut off is run again", seed)
			}
		}
		require.Equal(t, 2, calls, "seed %d (killed at %s): each tool call ran once", seed, kill)
		require.Empty(t, wstest.Diff(toWire(t, stored), back.State.Sorted()), "seed %d (killed at %s): the tab equals the database", seed, kill)
		t.Logf("seed %d: killed at %s, recoveries %d", seed, kill, run.Recoveries)
		back.WS.CloseNow()
		c.WS.CloseNow()
	}
}

// The stream log's crash property: a chain of chatd processes on one database, each
// killed with SIGKILL while a segment streams (the seed picks after how many of its
// words), the next one continuing the run. After each restart the segment that was open
// is stored interrupted with what its log held (or removed, when it held nothing): a
// prefix of what the client saw, with everything the client had an interval (plus
// logSlack) before the crash. The continued run's text is an uninterrupted run's, word
// for word, and the tab that followed it ends equal to the database. 100 seeds (about
// 75 s); CHATD_CRASH_SEEDS runs more. (The log is judged by what the next process stored, not
// read at the crash: the dead process's last statement may still commit after it died.)
func TestKillMidSegmentKeepsTheStreamedText(t *testing.T) {
	seeds := 100
	if v := os.Getenv("CHATD_CRASH_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		seeds = max(n, seeds)
	}
	const interval = 50 * time.Millisecond
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := map[string]string{
		"DATABASE_URL":      dbURL,
		"CHATD_DEMO_DELAY":  "10ms",
		"CHATD_DEMO_WORDS":  "60",
		"CHATD_RECOVER":     "continue",
		"CHATD_STREAM_SYNC": interval.String(),
	}
	const content = "tell me what you do"
	proc := startChild(t, "chatd 0", env)
	u := wstest.Dial(t, proc.wsURL(), nil)
	plainSession := u.Hello("").SessionID
	plain := u.Chat("plain", content)
	require.Equal(t, "chat.done", u.ReadTerminal().Type)
	want := replyText(sessionMessages(t, st, plainSession), plain.RunID)
	require.Len(t, strings.Fields(want), 60)
	u.WS.CloseNow()

	for seed := 1; seed <= seeds; seed++ {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		words := 1 + rng.IntN(50) // 10 ms each: from before the first interval to several
		c := wstest.Dial(t, proc.wsURL(), nil)
		session := c.Hello("").SessionID
		ack := c.Chat(fmt.Sprintf("kill-%d", seed), content)
		require.Equal(t, "ack", ack.Type)
		var seg string
		var pieces []received
		// From the frames seen so far, those read with the ack included: the first words
		// may come before the ack (the model is called while the run's start is stored).
		for seen := 0; seen < words; {
			f := c.Await(func(wstest.Frame) bool { return true })
			require.False(t, f.Terminal(), "seed %d: the run ended before the crash", seed)
			if f.Type == "chat.delta" && (seg == "" || f.MessageID == seg) {
				seg = f.MessageID
				pieces = append(pieces, received{time.Now(), *f.Text})
				seen += len(strings.Fields(*f.Text)) // deltas may carry several (CHATD_COALESCE_DELTAS)
			}
		}
		killed := time.Now()
		proc.signal(syscall.SIGKILL)
		proc.wait(15 * time.Second)

		segID := uuid.MustParse(seg)
		proc = restartChild(t, proc, fmt.Sprintf("chatd %d", seed), env)
		back := wstest.Dial(t, proc.wsURL(), nil)
		back.State = c.State
		back.Hello(session)
		if run := getRun(t, st, ack.RunID); run.Status.Active() || back.State.ActiveRun != nil {
			end := back.ReadTerminal()
			require.Equal(t, "chat.done", end.Type, "seed %d: %s", seed, end.Raw)
		}
		stored := sessionMessages(t, st, session)
		var kept *chat.Message
		for i := range stored {
			if stored[i].ID == segID {
				kept = &stored[i]
			}
		}
		logged := "" // a segment whose log held nothing goes
		if kept != nil {
			require.Equal(t, chat.MessageInterrupted, kept.Status, "seed %d", seed)
			require.NotEmpty(t, kept.Content, "seed %d: an empty segment goes", seed)
			logged = kept.Content
		}
		requireLogged(t, pieces, logged, killed, interval)
		left, err := st.StreamLogRead(dbCtx(t), []uuid.UUID{segID})
		require.NoError(t, err)
		require.LessOrEqual(t, len(left[segID]), len(logged), "seed %d: the log holds no more than was stored", seed)
		require.Equal(t, want, replyText(stored, ack.RunID), "seed %d (killed after %d words): the text", seed, words)
		require.Empty(t, wstest.Diff(toWire(t, stored), back.State.Sorted()), "seed %d: the tab equals the database", seed)
		t.Logf("seed %d: killed after %d words (%d bytes), %d bytes logged", seed, words, len(strings.Join(textsOf(pieces), "")), len(logged))
		back.WS.CloseNow()
		c.WS.CloseNow()
	}
}

func textsOf(pieces []received) []string {
	out := make([]string, len(pieces))
	for i, p := range pieces {
		out[i] = p.text
	}
	return out
}

// An approval outlives the process: a run waits for a decision, chatd is stopped
// (SIGTERM: a clean shutdown suspends the run; SIGKILL: nothing runs at all), another
// chatd starts on the database, a new tab finds the pending approval in its snapshot,
// approves, and the run completes with the tool's result.
func TestApprovalSurvivesARestart(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			dbURL := storetest.NewURL(t)
			st := openStore(t, dbURL)
			env := map[string]string{
				"DATABASE_URL":        dbURL,
				"CHATD_DEMO_DELAY":    "5ms",
				"CHATD_DEMO_WORDS":    "20",
				"CHATD_SANDBOX_DIR":   t.TempDir(),
				"CHATD_LOG_LEVEL":     "debug",
				"CHATD_RECOVER":       "continue",
				"CHATD_IDLE_EVICT":    "1h",
				"CHATD_ABANDON_AFTER": "1h",
			}
			const content = "may I approve a sandbox call"
			require.True(t, demo.MentionsApprove(content))
			first := startChild(t, "chatd (stopped)", env)
			c := wstest.Dial(t, first.wsURL(), nil)
			session := c.Hello("").SessionID
			ack := c.Chat("r1", content)
			require.Equal(t, "ack", ack.Type)
			waiting := c.Await(func(f wstest.Frame) bool {
				return f.Type == "run.status" && f.Run.Status == "awaiting_approval"
			})
			callID := waiting.Run.PendingApproval.ToolCallID

			first.signal(sig)
			first.wait(15 * time.Second)
			run := getRun(t, st, ack.RunID)
			require.Equal(t, chat.RunAwaitingApproval, run.Status, "the run still waits, not interrupted")

			second := restartChild(t, first, "chatd (restarted)", env)
			tab := wstest.Dial(t, second.wsURL(), nil)
			snap := tab.Hello(session)
			require.Equal(t, "snapshot", snap.Type)
			require.NotNil(t, snap.ActiveRun, "%s", snap.Raw)
			require.Equal(t, "awaiting_approval", snap.ActiveRun.Status)
			require.Equal(t, callID, snap.ActiveRun.PendingApproval.ToolCallID)

			tab.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "runId": ack.RunID, "toolCallId": callID, "decision": "approve"})
			reply := tab.ReadReply("d1")
			require.Equal(t, "ack", reply.Type, "%s", reply.Raw)
			end := tab.ReadTerminal()
			require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
			require.Equal(t, ack.RunID, end.RunID)

			stored := sessionMessages(t, st, session)
			var calls []chat.Message
			for _, m := range stored {
				if m.Tool != nil {
					calls = append(calls, m)
				}
			}
			require.Len(t, calls, 1, "one call, decided once")
			require.Equal(t, chat.ToolOK, calls[0].Tool.Status)
			require.Contains(t, *calls[0].Tool.Output, "hello from your sandbox")
			require.Empty(t, wstest.Diff(toWire(t, stored), tab.State.Sorted()))
			require.Zero(t, getRun(t, st, ack.RunID).Recoveries, "waiting is not a crash loop")
		})
	}
}

// A run whose process dies every time it runs (a model that crashes chatd, say) is
// continued 3 times, then ended interrupted: it cannot burn tokens forever. Here each
// chatd is killed as soon as the run streams again.
func TestCrashLoopEndsInterruptedAfterThreeRecoveries(t *testing.T) {
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := map[string]string{
		"DATABASE_URL":     dbURL,
		"CHATD_DEMO_DELAY": "20ms",
		"CHATD_DEMO_WORDS": "500",
		"CHATD_RECOVER":    "continue",
	}
	proc := startChild(t, "chatd 0", env)
	c := wstest.Dial(t, proc.wsURL(), nil)
	session := c.Hello("").SessionID
	ack := c.Chat("r1", "tell me a long story")
	require.Equal(t, "ack", ack.Type)
	streams := func(c *wstest.Client) {
		c.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && f.RunID == ack.RunID })
	}
	streams(c)
	for i := 1; i <= 3; i++ {
		proc.signal(syscall.SIGKILL)
		proc.wait(15 * time.Second)
		proc = restartChild(t, proc, fmt.Sprintf("chatd %d", i), env)
		require.Equal(t, i, getRun(t, st, ack.RunID).Recoveries)
		c = wstest.Dial(t, proc.wsURL(), nil)
		c.Hello(session)
		streams(c) // continued again
	}
	proc.signal(syscall.SIGKILL)
	proc.wait(15 * time.Second)

	proc = restartChild(t, proc, "chatd 4", env)
	run := getRun(t, st, ack.RunID)
	require.Equal(t, chat.RunInterrupted, run.Status)
	require.Equal(t, 4, run.Recoveries)
	require.Contains(t, run.Error.Message, "4 times")
	c = wstest.Dial(t, proc.wsURL(), nil)
	snap := c.Hello(session)
	require.Nil(t, snap.ActiveRun)
	require.NotNil(t, snap.LastRun)
	require.Equal(t, "interrupted", snap.LastRun.Status)
	require.True(t, snap.LastRun.Resumable, "a person may still continue it")
	for _, m := range sessionMessages(t, st, session) {
		require.NotEqual(t, chat.MessageStreaming, m.Status, "nothing is left streaming")
	}
}

// kill -9 mid-reply with a message queued behind the run: the restarted chatd continues
// the run, and when it has ended the queued message starts its own run.
func TestQueuedMessageRunsAfterACrash(t *testing.T) {
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := map[string]string{
		"DATABASE_URL":     dbURL,
		"CHATD_DEMO_DELAY": "20ms",
		"CHATD_DEMO_WORDS": "100",
		"CHATD_RECOVER":    "continue",
	}
	first := startChild(t, "chatd (to be killed)", env)
	c := wstest.Dial(t, first.wsURL(), nil)
	sessionID := c.Hello("").SessionID
	ack := c.Chat("req-crash", "a long answer")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	c.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })
	queued := c.Chat("req-queued", "and then this") // CHATD_DOUBLE_TEXT defaults to queue
	require.Equal(t, "queued", queued.Status, "%s", queued.Raw)
	first.signal(syscall.SIGKILL)
	first.wait(15 * time.Second)

	second := restartChild(t, first, "chatd (restarted)", env)
	again := wstest.Dial(t, second.wsURL(), nil)
	again.Hello(sessionID)
	var queuedRun string
	if last := again.State.LastRun; last != nil && last.RequestID == "req-queued" {
		queuedRun = last.RunID // both runs ended before the tab came back
	} else {
		end := again.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == "req-queued" })
		require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
		queuedRun = end.RunID
	}
	require.Equal(t, chat.RunDone, getRun(t, st, ack.RunID).Status, "the recovered run ended first")
	require.Equal(t, chat.RunDone, getRun(t, st, queuedRun).Status)
	require.Empty(t, again.State.Queued)
	var users []string
	for _, m := range sessionMessages(t, st, sessionID) {
		if m.Role == chat.RoleUser {
			users = append(users, m.Content)
		}
	}
	require.Equal(t, []string{"a long answer", "and then this"}, users)
}
