package ws_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

// observer is a client that never disconnects: it reads everything in the background.
type observer struct {
	c *wstest.Client

	mu        sync.Mutex
	seq       int64
	err       error
	terminals chan wstest.Frame
	progress  chan struct{} // signalled after each frame
	done      chan struct{}
}

func newObserver(c *wstest.Client) *observer {
	o := &observer{c: c, terminals: make(chan wstest.Frame, 64), progress: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for {
			f, err := c.TryRead()
			o.mu.Lock()
			if err != nil {
				o.err = err
				o.mu.Unlock()
				return
			}
			o.seq = c.State.LastSeq
			o.mu.Unlock()
			select {
			case o.progress <- struct{}{}:
			default:
			}
			if f.Terminal() {
				o.terminals <- f
			}
		}
	}()
	return o
}

// waitProgress waits until the observer has read another frame.
func (o *observer) waitProgress(t *testing.T) {
	t.Helper()
	select {
	case <-o.progress:
	case <-o.done:
		t.Fatalf("observer stopped: %v", o.err)
	case <-time.After(wstest.ReadTimeout):
		t.Fatal("observer made no progress")
	}
}

func (o *observer) lastSeq() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seq
}

// stop closes the observer's connection and returns the error that ended its reads,
// unless it was the close itself.
func (o *observer) stop() error {
	o.c.WS.Close(websocket.StatusNormalClosure, "")
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	var pe *wstest.ProtocolError
	if errorsAs(o.err, &pe) {
		return o.err
	}
	return nil
}

func (o *observer) terminal(t *testing.T) wstest.Frame {
	t.Helper()
	select {
	case f := <-o.terminals:
		return f
	case <-o.done:
		t.Fatalf("observer stopped: %v", o.err)
	case <-time.After(wstest.ReadTimeout):
		t.Fatal("no terminal event")
	}
	return wstest.Frame{}
}

// A run's script: phases separated by gates, so the test decides when the agent moves.
type runScript struct {
	steps  []script.Step
	phases int    // gates to pass, the last one before the ending
	ending string // done, error or cancel
}

var textPieces = []string{"hello", " wörld", ` "quoted"`, "\n", " 🎉", ` back\slash`, " <b>&amp;</b>", " ok", " line\r\n", " tab\t"}

func genRun(rng *rand.Rand, gate *script.Gate) runScript {
	var rs runScript
	tool := 0
	for range 2 + rng.IntN(5) {
		rs.steps = append(rs.steps, gate.Wait())
		rs.phases++
		if rng.IntN(3) == 0 {
			tool++
			id := "t" + strconv.Itoa(tool)
			steps := []script.Step{script.ToolStart(id, "probe", fmt.Sprintf(`{"n": %d, "s": "x y"}`, tool))}
			for range rng.IntN(4) {
				steps = append(steps, script.ToolOutput(id, textPieces[rng.IntN(len(textPieces))]))
			}
			if rng.IntN(4) == 0 {
				steps = append(steps, script.ToolFail(id, "probe failed"))
			} else {
				steps = append(steps, script.ToolEnd(id, ""))
			}
			rs.steps = append(rs.steps, script.Seq(steps...))
			continue
		}
		var deltas []string
		for range 1 + rng.IntN(6) {
			deltas = append(deltas, textPieces[rng.IntN(len(textPieces))])
		}
		rs.steps = append(rs.steps, script.Text(deltas...))
	}
	rs.steps = append(rs.steps, gate.Wait())
	rs.phases++
	switch r := rng.IntN(10); {
	case r < 6:
		rs.ending = "done"
	case r < 8:
		rs.ending = "error"
		rs.steps = append(rs.steps, script.Fail("model_error", "the model gave up"))
	default:
		rs.ending = "cancel"
		rs.steps = append(rs.steps, script.Hang())
	}
	return rs
}

// disconnectOdds is the chance of dropping the connection right after reading a frame
// of each type; the named moments are the ones the protocol must get right.
var disconnectOdds = map[string]float64{
	"assistant.segment.started": 0.5, // between the segment's start and its first delta
	"tool.start":                0.4, // mid-tool
	"tool.output":               0.3,
	"chat.done":                 0.5, // after the terminal event
	"chat.error":                0.5,
	"chat.cancelled":            0.5,
}

type coverage struct {
	mu                sync.Mutex
	moments           map[string]int
	resumed, snapshot int
}

func (c *coverage) add(f func(*coverage)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func TestReconnectProperty(t *testing.T) {
	t.Parallel()
	seeds := 100
	if s := os.Getenv("CHATD_PROPERTY_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		seeds = max(n, seeds)
	}
	cov := &coverage{moments: map[string]int{}}
	t.Run("seeds", func(t *testing.T) {
		for seed := range seeds {
			t.Run(strconv.Itoa(seed), func(t *testing.T) {
				t.Parallel()
				reconnectSeed(t, uint64(seed), cov)
			})
		}
	})
	t.Logf("disconnects after: %v; catch-ups: %d resumed, %d snapshot", cov.moments, cov.resumed, cov.snapshot)
	for _, m := range []string{"assistant.segment.started", "tool.start", "tool.output", "terminal"} {
		require.Positive(t, cov.moments[m], "no seed disconnected right after %s", m)
	}
	require.Positive(t, cov.resumed, "no reconnect was answered with a replay")
	require.Positive(t, cov.snapshot, "no reconnect was answered with a snapshot")
}

func reconnectSeed(t *testing.T, seed uint64, cov *coverage) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	gate := script.NewGate()
	runs := make([]runScript, 2+rng.IntN(2))
	for i := range runs {
		runs[i] = genRun(rng, gate)
	}
	ring := []int{6, 24, 4096}[rng.IntN(3)]
	e := newEnv(t, envOptions{
		agent: script.PerRun(func(req conversation.Request) []script.Step {
			i, _ := strconv.Atoi(req.Content[len("run "):])
			return runs[i].steps
		}),
		conv: func(c *conversation.Config) { c.RingEvents = ring },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	obsClient := e.session()
	sessionID := obsClient.State.SessionID
	obs := newObserver(obsClient)
	flaky := e.join(sessionID)

	// readSome reads up to n frames the observer has already seen, dropping the
	// connection after some of them.
	readSome := func(n int) {
		for range n {
			if flaky.State.LastSeq >= obs.lastSeq() {
				return
			}
			f := flaky.Read()
			odds := disconnectOdds[f.Type]
			if rng.Float64() >= odds && rng.IntN(30) != 0 {
				continue
			}
			moment := f.Type
			if f.Terminal() {
				moment = "terminal"
			}
			reconnect(t, e, &flaky, rng, cov, moment)
		}
	}

	for i, rs := range runs {
		reqID := "req-" + strconv.Itoa(i)
		ack := flaky.Chat(reqID, "run "+strconv.Itoa(i))
		require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
		for range rs.phases {
			// Let time pass on the actors' clock, so timestamps differ from event to
			// event and a client that kept a stale one would differ from the database.
			e.ConvClock.Advance(time.Duration(1+rng.IntN(5000)) * time.Microsecond)
			require.NoError(t, gate.Pass(ctx))
			readSome(rng.IntN(8))
			if rng.IntN(4) == 0 {
				reconnect(t, e, &flaky, rng, cov, "random")
			}
		}
		if rs.ending == "cancel" {
			flaky.Send(map[string]any{"type": "chat.cancel", "requestId": "cancel-" + reqID})
			reply := flaky.ReadReply("cancel-" + reqID)
			require.Equal(t, "ack", reply.Type, "%s", reply.Raw)
		}
		end := obs.terminal(t)
		require.Equal(t, map[string]string{"done": "chat.done", "error": "chat.error", "cancel": "chat.cancelled"}[rs.ending], end.Type)
		readSome(1000)
	}

	// Catch up to the end, then compare: the flaky client, the observer and the database.
	final := obs.lastSeq()
	flaky.ReadToSeq(final)
	require.NoError(t, obs.stop())
	require.Equal(t, final, flaky.State.LastSeq)
	require.Nil(t, flaky.State.ActiveRun)
	require.Nil(t, obs.c.State.ActiveRun)
	if d := wstest.Diff(obs.c.State.Sorted(), flaky.State.Sorted()); d != "" {
		t.Fatalf("flaky client differs from the observer: %s", d)
	}
	e.requireConverged(sessionID, flaky, obs.c)

	// The run statuses the observer saw are the stored ones.
	for i, rs := range runs {
		sid := uuid.MustParse(sessionID)
		run, err := e.store.RunByRequest(context.Background(), sid, "req-"+strconv.Itoa(i))
		require.NoError(t, err)
		want := map[string]string{"done": "done", "error": "error", "cancel": "cancelled"}[rs.ending]
		require.Equal(t, want, string(run.Status))
		require.Equal(t, want, obs.c.State.Ended[run.ID.String()].Status)
	}
}

// reconnect drops the flaky client's connection (politely or not) and says hello again
// with the epoch and lastSeq it holds.
func reconnect(t *testing.T, e *env, flaky **wstest.Client, rng *rand.Rand, cov *coverage, moment string) {
	t.Helper()
	old := *flaky
	if rng.IntN(2) == 0 {
		old.WS.CloseNow()
	} else {
		old.WS.Close(websocket.StatusNormalClosure, "bye")
	}
	n, f := old.Resume(e.URL, nil)
	*flaky = n
	cov.add(func(c *coverage) {
		c.moments[moment]++
		if f.Type == "resumed" {
			c.resumed++
		} else {
			c.snapshot++
		}
	})
}
