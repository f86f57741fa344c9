package conversation_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

// A property test of conversation control with branches (issue 25): random sequences of
// sends (every whileRunning policy), edits, regenerations, branch selections, cancels,
// unqueues, runs let finish, tabs reconnecting and actor restarts, over one session on
// a real database. After each step has settled it checks that every tab shows what a
// fresh snapshot shows, that the snapshot is the database's active path, that each run's
// model input was the path up to its user message, and that no message was lost or
// written twice.
//
// CHATD_BRANCHPROP_SEED=n replays one sequence (exactly, unless it has a burst step:
// see burst); CHATD_BRANCHPROP_RUNS=n sets how many sequences run
// (CHATD_BRANCHPROP_STEPS how many steps each).
func TestBranchesProperty(t *testing.T) {
	runs, steps := 60, 0
	if v := os.Getenv("CHATD_BRANCHPROP_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("CHATD_BRANCHPROP_RUNS: %v", err)
		}
		runs = n
	}
	if v := os.Getenv("CHATD_BRANCHPROP_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("CHATD_BRANCHPROP_STEPS: %v", err)
		}
		steps = n
	}
	base := time.Now().UnixNano() % 1_000_000_000
	var seeds []int64
	if v := os.Getenv("CHATD_BRANCHPROP_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("CHATD_BRANCHPROP_SEED: %v", err)
		}
		seeds = []int64{s}
	} else {
		for i := range runs {
			seeds = append(seeds, base+int64(i))
		}
	}
	t.Logf("seeds %d..%d (replay one with CHATD_BRANCHPROP_SEED=n)", seeds[0], seeds[len(seeds)-1])
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			runBranchSequence(t, seed, steps)
		})
	}
}

// bpAgent records every request and answers "re: " and the content. A run whose
// request id has a gate waits for it (or its end) before it answers, having streamed the
// "re: " when the gate says so (early); after the gate it takes the steering messages
// sent meanwhile.
type bpAgent struct {
	mu    sync.Mutex
	reqs  []conversation.Request
	gates map[string]*bpGate
}

type bpGate struct {
	ch     chan struct{}
	open   bool
	early  bool
	called bool          // its run's agent was called: a continued run streams nothing early
	wrote  chan struct{} // early: closed once the "re: " is posted
}

func (g *bpAgent) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	g.mu.Lock()
	g.reqs = append(g.reqs, req)
	gate := g.gates[req.RequestID]
	first := gate != nil && !gate.called
	if gate != nil {
		gate.called = true
	}
	g.mu.Unlock()
	answer := "re: " + req.Content
	for _, m := range req.Checkpoint { // a run continued after a restart
		if m.Role == chat.RoleAssistant {
			answer = strings.TrimPrefix(answer, m.Content)
		}
	}
	if gate != nil {
		if gate.early && first {
			err := out.Text("re: ")
			close(gate.wrote)
			if err != nil {
				return err
			}
			answer = req.Content
		}
		select {
		case <-gate.ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if s, ok := out.(conversation.Steerer); ok {
		if _, err := s.Steering(); err != nil {
			return err
		}
	}
	if answer == "" {
		return nil // a continued run that had written it all
	}
	return out.Text(answer)
}

func (g *bpAgent) hold(requestID string, early bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gates[requestID] = &bpGate{ch: make(chan struct{}), early: early, wrote: make(chan struct{})}
}

// wrote returns a channel closed once a held run of requestID has streamed what it
// streams before its gate (nil: it streams nothing).
func (g *bpAgent) wrote(requestID string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gate := g.gates[requestID]; gate != nil && gate.early {
		return gate.wrote
	}
	return nil
}

// held reports whether a run of requestID waits for its gate.
func (g *bpAgent) held(requestID string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate := g.gates[requestID]
	return gate != nil && !gate.open
}

func (g *bpAgent) release(requestID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gate := g.gates[requestID]; gate != nil && !gate.open {
		gate.open = true
		close(gate.ch)
	}
}

func (g *bpAgent) requests() []conversation.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.reqs)
}

type bpTab struct {
	rec       *convtest.Recorder
	epoch     string
	connected bool
}

// bpSent is a message a send or an edit was answered for.
type bpSent struct {
	requestID string
	content   string
	status    chat.RunStatus // running, queued, steering
	runID     uuid.UUID      // running: the run it started; steering: the run it steers
	parent    *uuid.UUID     // running: the parent its message must have
	anyParent bool           // sent in a burst: its parent is not known
}

type bpSeq struct {
	t       *testing.T
	ctx     context.Context
	rng     *rand.Rand
	seed    int64
	st      *store.Store
	session uuid.UUID
	agent   *bpAgent
	a       *conversation.Actor
	watch   *convtest.Recorder // never disconnected: what settle waits with
	tabs    []*bpTab
	steps   []string
	n       int

	sent     []bpSent
	refused  map[string]bool // contents whose send was refused
	unqueued map[string]bool // request ids taken back
	checked  int             // agent requests checked already
	started  *uuid.UUID      // the run the step started, which the path must now show
	kinds    map[string]int  // steps taken, by kind
	// suspend: restarts leave the active run for the next actor to continue
	// (Config.SuspendOnStop); suspended counts how often each run was continued from
	// a checkpoint (after a suspension, or resumed).
	suspend   bool
	suspended map[uuid.UUID]int
	reqRuns   map[uuid.UUID]int

	// the database's state at the last check
	path []chat.Message
	msgs map[uuid.UUID]bpRow
	runs map[uuid.UUID]bpRunRow
}

type bpRow struct {
	id, session uuid.UUID
	parent      *uuid.UUID
	runID       *uuid.UUID
	position    int64
	role        string
	content     string
	status      string
}

type bpRunRow struct {
	id        uuid.UUID
	requestID string
	status    string
	retryOf   *uuid.UUID
}

func runBranchSequence(t *testing.T, seed int64, steps int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewSource(seed))
	if steps == 0 {
		steps = 25 + rng.Intn(16)
	}
	s := &bpSeq{
		t: t, ctx: ctx, rng: rng, seed: seed, st: storetest.New(t), session: uuid.New(),
		agent:   &bpAgent{gates: map[string]*bpGate{}},
		refused: map[string]bool{}, unqueued: map[string]bool{}, reqRuns: map[uuid.UUID]int{}, kinds: map[string]int{},
		suspended: map[uuid.UUID]int{},
	}
	s.suspend = rng.Intn(2) == 0
	s.start()
	defer s.stop()
	for range 1 + rng.Intn(3) {
		tab := &bpTab{rec: convtest.New()}
		s.tabs = append(s.tabs, tab)
		s.hello(tab)
	}
	s.check()
	for i := range steps {
		s.step(i)
		s.settle()
		s.check()
		if t.Failed() {
			return
		}
	}
	s.stop()
	s.checkRequests() // the agents that were still on their way have ended
	t.Logf("seed %d: %d steps, %d runs, %d messages; steps by kind %v", seed, steps, len(s.runs), len(s.msgs), s.kinds)
}

func (s *bpSeq) fail(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d (replay with CHATD_BRANCHPROP_SEED=%d), steps:\n  %s\n%s", s.seed, s.seed, strings.Join(s.steps, "\n  "), fmt.Sprintf(format, args...))
}

func (s *bpSeq) noErr(err error, what string) {
	s.t.Helper()
	if err != nil {
		s.fail("%s: %v", what, err)
	}
}

func (s *bpSeq) log(format string, args ...any) {
	step := fmt.Sprintf(format, args...)
	s.steps = append(s.steps, fmt.Sprintf("%d: ", len(s.steps))+step)
	s.kinds[strings.Fields(step)[0]]++
}

func (s *bpSeq) start() {
	s.a = conversation.Start(conversation.Config{Store: s.st, Agent: s.agent, SuspendOnStop: s.suspend}, s.session, nil)
	s.watch = convtest.New()
	_, err := s.a.Hello(s.ctx, conversation.HelloRequest{Create: true, Subscriber: s.watch})
	s.noErr(err, "watcher hello")
	s.watch.AwaitCatchUp(s.t, 1)
}

func (s *bpSeq) stop() {
	if s.a == nil {
		return
	}
	a := s.a
	s.a = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Stop(ctx); err != nil {
		s.t.Errorf("stop: %v", err)
	}
	if err := a.Wait(ctx); err != nil {
		s.t.Errorf("wait: %v", err)
	}
}

// hello subscribes tab: where it left off when it has a state, else from a snapshot.
func (s *bpSeq) hello(tab *bpTab) {
	n := len(tab.rec.CatchUps())
	res, err := s.a.Hello(s.ctx, conversation.HelloRequest{Create: true, Subscriber: tab.rec, Epoch: tab.epoch, LastSeq: tab.rec.LastSeq()})
	s.noErr(err, "hello")
	tab.rec.AwaitCatchUp(s.t, n+1)
	tab.epoch, tab.connected = res.Epoch, true
}

func (s *bpSeq) next() (requestID, content string) {
	s.n++
	return fmt.Sprintf("r%d", s.n), fmt.Sprintf("m%d", s.n)
}

func codeOf(err error) string {
	var e *conversation.Error
	if errors.As(err, &e) {
		return e.Code
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func (s *bpSeq) expectCode(err error, code, what string) {
	s.t.Helper()
	if got := codeOf(err); got != code {
		s.fail("%s: got error %q (%v), want %q", what, got, err, code)
	}
}

var policies = []chat.DoubleText{"", chat.DoubleTextQueue, chat.DoubleTextInterrupt, chat.DoubleTextReject, chat.DoubleTextSteer}

func (s *bpSeq) step(i int) {
	active := s.watch.ActiveRun()
	queued, err := s.st.QueuedList(s.ctx, s.session)
	s.noErr(err, "read the queue")
	r := s.rng.Intn(100)
	switch {
	case r < 8:
		s.burst()
	case r < 30:
		s.send(active, len(queued), nil)
	case r < 42:
		var users []bpRow
		for _, m := range s.msgs {
			if m.role == string(chat.RoleUser) {
				users = append(users, m)
			}
		}
		if len(users) == 0 {
			s.send(active, len(queued), nil)
			return
		}
		slices.SortFunc(users, func(a, b bpRow) int { return int(a.position - b.position) })
		m := users[s.rng.Intn(len(users))]
		s.send(active, len(queued), &m)
	case r < 52:
		if s.rng.Intn(3) == 0 {
			s.resume(active)
			return
		}
		s.regenerate(active)
	case r < 64:
		s.selectBranch()
	case r < 70:
		res, err := s.a.Cancel(s.ctx, uuid.Nil)
		s.log("cancel (active %v)", runName(active))
		if active == nil {
			s.expectCode(err, conversation.CodeNoRun, "cancel with no run")
			return
		}
		s.noErr(err, "cancel")
		if res.RunID != active.ID {
			s.fail("cancel ended %s, the active run is %s", res.RunID, active.ID)
		}
	case r < 74:
		reqID := "nothing"
		if len(queued) > 0 && s.rng.Intn(4) > 0 {
			reqID = queued[s.rng.Intn(len(queued))].RequestID
		}
		err := s.a.Unqueue(s.ctx, reqID)
		s.log("unqueue %s", reqID)
		if reqID == "nothing" {
			s.expectCode(err, conversation.CodeNotFound, "unqueue of a message never queued")
			return
		}
		s.noErr(err, "unqueue")
		s.unqueued[reqID] = true
	case r < 86:
		if active == nil {
			s.log("finish (no run)")
			return
		}
		s.log("finish %s", runName(active))
		s.agent.release(active.RequestID)
	case r < 95:
		tab := s.tabs[s.rng.Intn(len(s.tabs))]
		if tab.connected {
			s.a.Unsubscribe(s.ctx, tab.rec)
			tab.connected = false
			s.log("disconnect tab %p", tab)
			return
		}
		if s.rng.Intn(3) == 0 {
			tab.rec, tab.epoch = convtest.New(), ""
			s.log("reconnect tab %p afresh", tab)
		} else {
			s.log("reconnect tab %p at %s/%d", tab, tab.epoch, tab.rec.LastSeq())
		}
		s.hello(tab)
	default:
		s.log("restart (active %v, suspend %v)", runName(active), s.suspend)
		s.restart()
	}
}

// restart stops the actor and starts another on the same store; the tabs that were
// connected say hello again.
func (s *bpSeq) restart() {
	s.stop()
	if s.suspend {
		// The runs it left for the next actor to continue.
		rows, err := s.st.Pool().Query(s.ctx, `SELECT id FROM runs WHERE session_id = $1 AND ended_at IS NULL`, s.session)
		s.noErr(err, "read the suspended runs")
		for rows.Next() {
			var id uuid.UUID
			s.noErr(rows.Scan(&id), "scan")
			s.suspended[id]++
		}
		s.noErr(rows.Err(), "read the suspended runs")
	}
	s.start()
	for _, tab := range s.tabs {
		if tab.connected {
			s.hello(tab)
		}
	}
}

func runName(r *chat.Run) string {
	if r == nil {
		return "none"
	}
	return r.RequestID
}

// send sends a new message, or an edit of edited.
func (s *bpSeq) send(active *chat.Run, queued int, edited *bpRow) {
	reqID, content := s.next()
	req := conversation.SendRequest{RequestID: reqID, Content: content, WhileRunning: policies[s.rng.Intn(len(policies))]}
	hold := s.rng.Intn(5) < 3
	if hold {
		s.agent.hold(reqID, s.rng.Intn(2) == 0)
	}
	what := "send"
	if edited != nil {
		req.EditOf = &edited.id
		what = fmt.Sprintf("edit of %q (%s)", edited.content, edited.id)
	}
	res, err := s.a.Send(s.ctx, req)
	s.log("%s %s %q whileRunning=%q hold=%v (active %s): %+v %v", what, reqID, content, req.WhileRunning, hold, runName(active), res, err)
	refuse := func(code string) {
		s.t.Helper()
		s.expectCode(err, code, what)
		s.refused[content] = true
	}
	switch {
	case active == nil && req.WhileRunning == chat.DoubleTextSteer && edited == nil:
		refuse(conversation.CodeNoRun)
		return
	case active != nil && edited != nil && req.WhileRunning != chat.DoubleTextInterrupt:
		refuse(conversation.CodeRunActive)
		return
	case active == nil || req.WhileRunning == chat.DoubleTextInterrupt:
		s.noErr(err, what)
		if res.Status != chat.RunRunning || res.Duplicate {
			s.fail("%s answered %+v, want a new running run", what, res)
		}
		// It answers the path shown, or what the edited message answered.
		var parent *uuid.UUID
		if edited != nil {
			parent = edited.parent
		} else if len(s.path) > 0 {
			parent = &s.path[len(s.path)-1].ID
		}
		s.sent = append(s.sent, bpSent{requestID: reqID, content: content, status: chat.RunRunning, runID: res.RunID, parent: parent})
		s.expectStarted(res.RunID, content)
		s.started = &res.RunID
	case req.WhileRunning == chat.DoubleTextQueue || req.WhileRunning == chat.DoubleTextSteer:
		if queued >= conversation.DefaultMaxQueued {
			refuse(conversation.CodeQueueFull)
			return
		}
		s.noErr(err, what)
		want := conversation.StatusQueued
		if req.WhileRunning == chat.DoubleTextSteer {
			want = conversation.StatusSteering
		}
		if res.Status != want {
			s.fail("%s answered %+v, want %s", what, res, want)
		}
		s.sent = append(s.sent, bpSent{requestID: reqID, content: content, status: want, runID: res.RunID})
	default:
		refuse(conversation.CodeRunActive)
	}
}

// burst sends a few commands at once, from as many goroutines, without waiting for
// runs: sends (which may not wait for a gate), edits, regenerations, selections and
// cancels race each other and the runs streaming meanwhile (reads of a path whose
// newest messages are still on their way to the database). Their outcome depends on
// their order, so each is checked for being one of its possible answers, and what they
// were answered is what the invariants then hold the actor to. A burst makes a
// sequence depend on timing: its seed replays it only roughly.
func (s *bpSeq) burst() {
	type op struct {
		log   string
		run   func() (string, error, func())
		codes []string // the errors it may be answered
	}
	var users, all []bpRow
	for _, m := range s.msgs {
		all = append(all, m)
		if m.role == string(chat.RoleUser) {
			users = append(users, m)
		}
	}
	slices.SortFunc(all, func(a, b bpRow) int { return int(a.position - b.position) })
	slices.SortFunc(users, func(a, b bpRow) int { return int(a.position - b.position) })
	var ended []bpRunRow
	for _, r := range s.runs {
		if !chat.RunStatus(r.status).Active() {
			ended = append(ended, r)
		}
	}
	slices.SortFunc(ended, func(a, b bpRunRow) int { return strings.Compare(a.id.String(), b.id.String()) })
	var ops []op
	for range 2 + s.rng.Intn(3) {
		switch k := s.rng.Intn(10); {
		case k < 5 || (k < 7 && len(users) == 0):
			reqID, content := s.next()
			req := conversation.SendRequest{RequestID: reqID, Content: content, WhileRunning: policies[s.rng.Intn(len(policies))]}
			what := "send"
			if k >= 5 && len(users) > 0 {
				m := users[s.rng.Intn(len(users))]
				req.EditOf, what = &m.id, fmt.Sprintf("edit of %q", m.content)
			}
			if s.rng.Intn(3) == 0 {
				s.agent.hold(reqID, s.rng.Intn(2) == 0)
			}
			ops = append(ops, op{
				log:   fmt.Sprintf("%s %s %q whileRunning=%q", what, reqID, content, req.WhileRunning),
				codes: []string{conversation.CodeRunActive, conversation.CodeNoRun, conversation.CodeQueueFull},
				run: func() (string, error, func()) {
					res, err := s.a.Send(s.ctx, req)
					return fmt.Sprintf("%+v %v", res, err), err, func() {
						switch {
						case err != nil:
							s.refused[content] = true
						case res.Duplicate:
							s.fail("%s %s answered as a duplicate", what, reqID)
						case res.Status == chat.RunRunning:
							s.sent = append(s.sent, bpSent{requestID: reqID, content: content, status: res.Status, runID: res.RunID, anyParent: true})
						default:
							s.sent = append(s.sent, bpSent{requestID: reqID, content: content, status: res.Status, runID: res.RunID})
						}
					}
				},
			})
		case k < 7 && len(ended) > 0:
			old := ended[s.rng.Intn(len(ended))]
			s.n++
			reqID := fmt.Sprintf("g%d", s.n)
			ops = append(ops, op{
				log:   fmt.Sprintf("regenerate %s as %s", old.requestID, reqID),
				codes: []string{conversation.CodeRunActive},
				run: func() (string, error, func()) {
					res, err := s.a.Continue(s.ctx, conversation.ContinueRequest{RunID: old.id, RequestID: reqID, Retry: true, Regenerate: true})
					return fmt.Sprintf("%+v %v", res, err), err, func() {}
				},
			})
		case k < 9 && len(all) > 0:
			m := all[s.rng.Intn(len(all))]
			ops = append(ops, op{
				log: fmt.Sprintf("select %s %q", m.role, m.content),
				run: func() (string, error, func()) {
					err := s.a.SelectBranch(s.ctx, m.id)
					return fmt.Sprint(err), err, func() {}
				},
			})
		default:
			ops = append(ops, op{
				log:   "cancel",
				codes: []string{conversation.CodeNoRun},
				run: func() (string, error, func()) {
					_, err := s.a.Cancel(s.ctx, uuid.Nil)
					return fmt.Sprint(err), err, func() {}
				},
			})
		}
	}
	results := make([]string, len(ops))
	errs := make([]error, len(ops))
	apply := make([]func(), len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i], apply[i] = o.run()
		}()
	}
	wg.Wait()
	var logs []string
	for i, o := range ops {
		logs = append(logs, o.log+": "+results[i])
	}
	restart := s.rng.Intn(4) == 0
	s.log("burst [%s], restart %v (suspend %v)", strings.Join(logs, "; "), restart, s.suspend)
	for i, o := range ops {
		if code := codeOf(errs[i]); code != "" && !slices.Contains(o.codes, code) {
			s.fail("%s was answered %s", o.log, results[i])
		}
		apply[i]()
	}
	if restart {
		// While what the burst started streams.
		s.restart()
	}
}

// expectStarted checks that run runID started now, with a user message of content on
// the active path.
func (s *bpSeq) expectStarted(runID uuid.UUID, content string) {
	s.t.Helper()
	ev := s.watch.Await(s.t, func(ev *conversation.Event) bool {
		return ev.Type == conversation.EventChatStarted && ev.RunID == runID
	})
	if ev.Message == nil || ev.Message.Content != content {
		s.fail("chat.started of run %s has message %+v, want content %q", runID, ev.Message, content)
	}
}

func (s *bpSeq) regenerate(active *chat.Run) {
	var ended []bpRunRow
	for _, r := range s.runs {
		if !chat.RunStatus(r.status).Active() {
			ended = append(ended, r)
		}
	}
	if len(ended) == 0 {
		s.log("regenerate (no ended run)")
		return
	}
	// Ids are time-ordered: half the time the newest run is answered again (a
	// regeneration of a regeneration, say), else any.
	slices.SortFunc(ended, func(a, b bpRunRow) int { return strings.Compare(a.id.String(), b.id.String()) })
	old := ended[len(ended)-1]
	if s.rng.Intn(2) == 0 {
		old = ended[s.rng.Intn(len(ended))]
	}
	s.n++
	reqID := fmt.Sprintf("g%d", s.n)
	hold := s.rng.Intn(5) < 3
	if hold {
		s.agent.hold(reqID, s.rng.Intn(2) == 0)
	}
	res, err := s.a.Continue(s.ctx, conversation.ContinueRequest{RunID: old.id, RequestID: reqID, Retry: true, Regenerate: true})
	s.log("regenerate %s as %s hold=%v (active %s): %+v %v", old.requestID, reqID, hold, runName(active), res, err)
	if active != nil {
		s.expectCode(err, conversation.CodeRunActive, "regenerate")
		return
	}
	s.noErr(err, "regenerate")
	if res.Status != chat.RunRunning || res.Duplicate {
		s.fail("regenerate answered %+v, want a new running run", res)
	}
	s.watch.Await(s.t, func(ev *conversation.Event) bool {
		return ev.Type == conversation.EventChatStarted && ev.RunID == res.RunID
	})
	s.started = &res.RunID
}

// resume continues the session's latest run from what it wrote (chat.resume), when it
// ended cancelled, interrupted or failed: on its own branch, whichever is shown.
func (s *bpSeq) resume(active *chat.Run) {
	latest, err := s.st.RunLatest(s.ctx, s.session)
	if errors.Is(err, store.ErrNotFound) {
		s.log("resume (no run)")
		return
	}
	s.noErr(err, "read the latest run")
	s.n++
	reqID := fmt.Sprintf("c%d", s.n)
	res, err := s.a.Continue(s.ctx, conversation.ContinueRequest{RunID: latest.ID, RequestID: reqID})
	s.log("resume %s (%s) as %s (active %s): %+v %v", latest.RequestID, latest.Status, reqID, runName(active), res, err)
	switch {
	case active != nil:
		s.expectCode(err, conversation.CodeRunActive, "resume")
	case latest.DismissedAt != nil || !slices.Contains([]chat.RunStatus{chat.RunCancelled, chat.RunInterrupted, chat.RunError}, latest.Status):
		s.expectCode(err, conversation.CodeConflict, "resume")
	default:
		s.noErr(err, "resume")
		if res.RunID != latest.ID || res.Status != chat.RunRunning {
			s.fail("resume answered %+v, want run %s running", res, latest.ID)
		}
		s.suspended[latest.ID]++ // continued from a checkpoint
		s.kinds["resumed"]++
	}
}

func (s *bpSeq) selectBranch() {
	if len(s.msgs) == 0 {
		s.log("select (no message)")
		return
	}
	var ids []bpRow
	for _, m := range s.msgs {
		ids = append(ids, m)
	}
	slices.SortFunc(ids, func(a, b bpRow) int { return int(a.position - b.position) })
	m := ids[s.rng.Intn(len(ids))]
	err := s.a.SelectBranch(s.ctx, m.id)
	s.log("select %s %q (%s)", m.role, m.content, m.id)
	s.noErr(err, "select")
	s.noErr(s.a.Flush(s.ctx), "flush")
	path, _, err := s.st.MessagesBefore(s.ctx, s.session, 0, 10000)
	s.noErr(err, "read the path")
	if !slices.ContainsFunc(path, func(p chat.Message) bool { return p.ID == m.id }) {
		s.fail("selected message %s is not on the active path:\n%s", m.id, describe(path))
	}
	// The path ends at the newest message under it (nothing was written since the
	// last check: held runs wait, the others have ended).
	newest := m
	for _, c := range s.msgs {
		if c.position > newest.position && slices.ContainsFunc(s.chain(&c.id), func(a bpRow) bool { return a.id == m.id }) {
			newest = c
		}
	}
	if leaf := path[len(path)-1]; leaf.ID != newest.id {
		s.fail("selecting %s shows the branch ending at %s %q, want the newest below it, %s %q:\n%s", m.id, leaf.ID, leaf.Content, newest.id, newest.content, describe(path))
	}
}

// settle waits until the actor has done what it will without the test: the runs that
// do not wait for a gate end, and the queued messages they leave start.
func (s *bpSeq) settle() {
	for range 100 {
		s.noErr(s.a.Flush(s.ctx), "flush")
		run := s.watch.ActiveRun()
		if run != nil && s.agent.held(run.RequestID) {
			if wrote := s.agent.wrote(run.RequestID); wrote != nil {
				// What it streams before its gate is posted: a flush follows it.
				select {
				case <-wrote:
				case <-time.After(convtest.Timeout):
					s.fail("held run %s streamed nothing", run.RequestID)
				}
				s.noErr(s.a.Flush(s.ctx), "flush")
			}
			return
		}
		if run == nil {
			return
		}
		s.watch.Await(s.t, func(ev *conversation.Event) bool { return ev.Terminal() && ev.RunID == run.ID })
	}
	s.fail("runs kept starting")
}

// check checks the invariants.
func (s *bpSeq) check() {
	s.t.Helper()
	var snap *conversation.Snapshot
	for range 5 {
		s.noErr(s.a.Flush(s.ctx), "flush")
		fresh := convtest.New()
		_, err := s.a.Hello(s.ctx, conversation.HelloRequest{Subscriber: fresh})
		s.noErr(err, "fresh hello")
		snap = fresh.AwaitCatchUp(s.t, 1).Snapshot
		s.a.Unsubscribe(s.ctx, fresh)
		if snap == nil {
			s.fail("a fresh hello got no snapshot")
		}
		// A tab past the snapshot saw what happened after it: a queued message's run
		// starts on its own once the run before it ends, after settle saw no run.
		// Settle again and take another.
		ahead := false
		for _, tab := range append([]*bpTab{{rec: s.watch, connected: true}}, s.tabs...) {
			ahead = ahead || (tab.connected && tab.rec.LastSeq() > snap.LastSeq)
		}
		if !ahead {
			break
		}
		s.settle()
	}

	// 1. Every tab shows what a fresh snapshot shows.
	for i, tab := range append([]*bpTab{{rec: s.watch, connected: true}}, s.tabs...) {
		if !tab.connected {
			continue
		}
		if err := tab.rec.Err(); err != nil {
			s.fail("tab %d: %v", i, err)
		}
		if tab.rec.LastSeq() != snap.LastSeq {
			var after []string
			for _, ev := range tab.rec.Events() {
				if ev.Seq > snap.LastSeq {
					after = append(after, fmt.Sprintf("%d %s run %s msg %s %q", ev.Seq, ev.Type, ev.RequestID, ev.MessageID, ev.Text))
				}
			}
			s.fail("tab %d is at seq %d, the snapshot at %d; after it:\n  %s", i, tab.rec.LastSeq(), snap.LastSeq, strings.Join(after, "\n  "))
		}
		if d := messagesDiff(snap.Messages, tab.rec.Messages()); d != "" {
			s.fail("tab %d (0: the watcher) differs from a fresh snapshot:\n%s", i, d)
		}
		if a, b := runName(snap.ActiveRun), runName(tab.rec.ActiveRun()); a != b {
			s.fail("tab %d has active run %s, a fresh snapshot %s", i, b, a)
		}
	}

	// 2. The snapshot is the database's active path, a chain.
	path, _, err := s.st.MessagesBefore(s.ctx, s.session, 0, 10000)
	s.noErr(err, "read the path")
	if d := storedDiff(path, snap.Messages); d != "" {
		s.fail("a fresh snapshot differs from the database's active path:\n%s", d)
	}
	for i, m := range path {
		var want *uuid.UUID
		if i > 0 {
			want = &path[i-1].ID
		}
		if !sameUUID(m.ParentID, want) {
			s.fail("the active path is no chain: message %d (%s) has parent %v, want %v:\n%s", i, m.ID, m.ParentID, want, describe(path))
		}
	}
	s.path = path
	s.readDB()

	// history.fetch reads the path a snapshot shows; a read of the branch through any
	// message (history.fetch through) reads what the database holds of it.
	hist, err := s.a.History(s.ctx, 0, conversation.MaxHistoryLimit)
	s.noErr(err, "history")
	if d := messagesDiff(snap.Messages, hist.Messages); d != "" {
		s.fail("history differs from a fresh snapshot:\n%s", d)
	}
	if len(s.msgs) > 0 {
		var all []bpRow
		for _, m := range s.msgs {
			all = append(all, m)
		}
		slices.SortFunc(all, func(a, b bpRow) int { return int(a.position - b.position) })
		m := all[s.rng.Intn(len(all))]
		leaf := m
		for _, c := range all {
			if c.position > leaf.position && slices.ContainsFunc(s.chain(&c.id), func(a bpRow) bool { return a.id == m.id }) {
				leaf = c
			}
		}
		page, err := s.a.Branch(s.ctx, m.id, 0, conversation.MaxHistoryLimit)
		s.noErr(err, "read a branch")
		db, _, err := s.st.MessagesPath(s.ctx, s.session, &leaf.id, 0, conversation.MaxHistoryLimit)
		s.noErr(err, "read a branch from the database")
		if d := storedDiff(db, page.Messages); d != "" {
			s.fail("the branch through %s %q differs from the database's:\n%s", m.id, m.content, d)
		}
	}

	// The queue as the tabs hold it is the database's.
	queued, err := s.st.QueuedList(s.ctx, s.session)
	s.noErr(err, "read the queue")
	var q1, q2 []string
	for _, q := range snap.Queued {
		q1 = append(q1, q.RequestID+":"+q.Content)
	}
	for _, q := range queued {
		q2 = append(q2, q.RequestID+":"+q.Content)
	}
	if !slices.Equal(q1, q2) {
		s.fail("the snapshot's queue %v is not the database's %v", q1, q2)
	}

	s.checkRequests()
	s.checkMessages(queued)

	// The run the step started is on the active path: its question, then its messages
	// (so far).
	if s.started != nil {
		run := s.runs[*s.started]
		user, _ := s.userOf(run)
		i := slices.IndexFunc(path, func(m chat.Message) bool { return m.ID == user.id })
		if i < 0 || (i+1 < len(path) && (path[i+1].RunID == nil || *path[i+1].RunID != run.id)) {
			s.fail("run %s (%s, question %q) started, yet the active path does not show it:%s", run.id, run.requestID, user.content, describe(path))
		}
		s.started = nil
	}
}

// readDB reads every message and run of the session.
func (s *bpSeq) readDB() {
	s.msgs = map[uuid.UUID]bpRow{}
	rows, err := s.st.Pool().Query(s.ctx, `SELECT id, session_id, parent_id, run_id, position, role, content, status FROM messages WHERE session_id = $1`, s.session)
	s.noErr(err, "read the messages")
	for rows.Next() {
		var m bpRow
		s.noErr(rows.Scan(&m.id, &m.session, &m.parent, &m.runID, &m.position, &m.role, &m.content, &m.status), "scan")
		if _, dup := s.msgs[m.id]; dup {
			s.fail("message %s twice", m.id)
		}
		s.msgs[m.id] = m
	}
	s.noErr(rows.Err(), "read the messages")
	s.runs = map[uuid.UUID]bpRunRow{}
	rows, err = s.st.Pool().Query(s.ctx, `SELECT id, request_id, status, retry_of FROM runs WHERE session_id = $1`, s.session)
	s.noErr(err, "read the runs")
	for rows.Next() {
		var r bpRunRow
		s.noErr(rows.Scan(&r.id, &r.requestID, &r.status, &r.retryOf), "scan")
		s.runs[r.id] = r
	}
	s.noErr(rows.Err(), "read the runs")
}

// runMessages returns run's messages, oldest first.
func (s *bpSeq) runMessages(run uuid.UUID) []bpRow {
	var out []bpRow
	for _, m := range s.msgs {
		if m.runID != nil && *m.runID == run {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b bpRow) int { return int(a.position - b.position) })
	return out
}

// userOf returns the user message run answers: its first, or for a regeneration that
// of the run it regenerates (a regeneration's own first message may be a user message
// too: one that steered it).
func (s *bpSeq) userOf(run bpRunRow) (bpRow, bool) {
	for hops := 0; hops < 1000; hops++ {
		if run.retryOf != nil {
			run = s.runs[*run.retryOf]
			continue
		}
		if msgs := s.runMessages(run.id); len(msgs) > 0 && msgs[0].role == string(chat.RoleUser) {
			return msgs[0], true
		}
		return bpRow{}, false
	}
	return bpRow{}, false
}

// chain is the path from the first message to id (nil: empty), by parents.
func (s *bpSeq) chain(id *uuid.UUID) []bpRow {
	var out []bpRow
	for id != nil {
		m, ok := s.msgs[*id]
		if !ok {
			s.fail("message %s is a parent but not in the database", *id)
		}
		out = append(out, m)
		id = m.parent
		if len(out) > len(s.msgs) {
			s.fail("the parents of message %s form a cycle", m.id)
		}
	}
	slices.Reverse(out)
	return out
}

// checkRequests checks that each run's model input was the path up to its user message.
func (s *bpSeq) checkRequests() {
	s.t.Helper()
	if s.a == nil {
		s.readDB()
	}
	reqs := s.agent.requests()
	for _, req := range reqs[s.checked:] {
		run, ok := s.runs[req.RunID]
		if !ok {
			s.fail("the agent was called for run %s (%s), which is not stored", req.RunID, req.RequestID)
		}
		if s.reqRuns[req.RunID]++; s.reqRuns[req.RunID] > 1+s.suspended[req.RunID] {
			s.fail("the agent was called %d times for run %s (%s), suspended %d times", s.reqRuns[req.RunID], req.RunID, req.RequestID, s.suspended[req.RunID])
		}
		user, ok := s.userOf(run)
		if !ok {
			s.fail("run %s (%s) has no user message", run.id, run.requestID)
		}
		if req.Content != user.content {
			s.fail("run %s (%s) was asked %q, its user message is %q", run.id, run.requestID, req.Content, user.content)
		}
		// A continued run's checkpoint is what it wrote: its first messages after its
		// question.
		own := s.runMessages(run.id)
		if run.retryOf == nil && len(own) > 0 {
			own = own[1:]
		}
		if len(req.Checkpoint) > len(own) {
			s.fail("run %s (%s) got a checkpoint of %d messages, it has %d", run.id, run.requestID, len(req.Checkpoint), len(own))
		}
		for i, m := range req.Checkpoint {
			if m.ID != own[i].id {
				s.fail("run %s (%s) got checkpoint message %d %s %q, its message is %s %q", run.id, run.requestID, i, m.ID, m.Content, own[i].id, own[i].content)
			}
		}
		if len(req.Checkpoint) > 0 && s.suspended[run.id] == 0 {
			s.fail("run %s (%s) got a checkpoint, yet was never suspended", run.id, run.requestID)
		}
		want := s.chain(user.parent)
		var w, g []string
		for _, m := range want {
			w = append(w, fmt.Sprintf("%s %s %q", m.id, m.role, m.content))
		}
		for _, m := range req.History {
			g = append(g, fmt.Sprintf("%s %s %q", m.ID, m.Role, m.Content))
		}
		if !slices.Equal(w, g) {
			s.fail("run %s (%s, user message %q) got history\n  %s\nwant the path up to its user message's parent\n  %s",
				run.id, run.requestID, user.content, strings.Join(g, "\n  "), strings.Join(w, "\n  "))
		}
	}
	s.checked = len(reqs)
	for id, run := range s.runs {
		if run.status == string(chat.RunDone) && s.reqRuns[id] == 0 {
			s.fail("run %s (%s) is done, yet its agent was never called", id, run.requestID)
		}
	}
}

// checkMessages checks that every message a send was answered for is stored once (or
// queued), that nothing else is, and that each run's messages follow one another.
func (s *bpSeq) checkMessages(queued []chat.Queued) {
	s.t.Helper()
	users := map[string][]bpRow{}
	for _, m := range s.msgs {
		if m.role == string(chat.RoleUser) {
			users[m.content] = append(users[m.content], m)
		}
	}
	inQueue := map[string]int{}
	for _, q := range queued {
		inQueue[q.Content]++
	}
	expected := map[string]bool{}
	for _, sent := range s.sent {
		stored := users[sent.content]
		switch {
		case sent.status == chat.RunRunning:
			if len(stored) != 1 || stored[0].runID == nil || *stored[0].runID != sent.runID {
				s.fail("%s (%q) started run %s; the database holds %+v", sent.requestID, sent.content, sent.runID, stored)
			}
			if !sent.anyParent && !sameUUID(stored[0].parent, sent.parent) {
				s.fail("%s (%q) has parent %v, want %v", sent.requestID, sent.content, stored[0].parent, sent.parent)
			}
			if run := s.runs[sent.runID]; run.requestID != sent.requestID {
				s.fail("run %s has request id %q, want %q", sent.runID, run.requestID, sent.requestID)
			}
			expected[sent.content] = true
		case inQueue[sent.content] > 0:
			if inQueue[sent.content] != 1 || len(stored) != 0 {
				s.fail("%s (%q) is queued %d times and stored %d times", sent.requestID, sent.content, inQueue[sent.content], len(stored))
			}
		case s.unqueued[sent.requestID]:
			if len(stored) != 0 {
				s.fail("%s (%q) was taken back, yet stored: %+v", sent.requestID, sent.content, stored)
			}
		default:
			if len(stored) != 1 {
				s.fail("%s (%q) was %s and is no longer queued; the database holds it %d times", sent.requestID, sent.content, sent.status, len(stored))
			}
			// Queued, it started a run of its own; steering, it is in the run it was
			// sent to, or (that run ended first) it was queued.
			run := s.runs[*stored[0].runID]
			if run.requestID != sent.requestID && (sent.status != conversation.StatusSteering || run.id != sent.runID) {
				s.fail("%s (%q), %s (run %s), is a message of run %s (%s)", sent.requestID, sent.content, sent.status, sent.runID, run.id, run.requestID)
			}
			expected[sent.content] = true
		}
	}
	for c := range s.refused {
		if len(users[c]) > 0 || inQueue[c] > 0 {
			s.fail("the send of %q was refused, yet it is stored %d times and queued %d times", c, len(users[c]), inQueue[c])
		}
	}
	for c := range users {
		if !expected[c] {
			s.fail("user message %q is stored, yet no send was answered for it (refused: %v)", c, s.refused[c])
		}
	}
	for c := range inQueue {
		if !slices.ContainsFunc(s.sent, func(x bpSent) bool { return x.content == c && x.status != chat.RunRunning }) {
			s.fail("%q is queued, yet no send queued it", c)
		}
	}

	// Each run's messages follow one another; its answer is "re: " its question, once.
	for _, run := range s.runs {
		msgs := s.runMessages(run.id)
		user, ok := s.userOf(run)
		if !ok {
			s.fail("run %s (%s) has no user message", run.id, run.requestID)
		}
		answers, answer := 0, ""
		for i, m := range msgs {
			if i > 0 && !sameUUID(m.parent, &msgs[i-1].id) {
				s.fail("message %d of run %s (%s) has parent %v, want %s", i, run.id, run.requestID, m.parent, msgs[i-1].id)
			}
			if i == 0 && run.retryOf != nil && !sameUUID(m.parent, &user.id) {
				s.fail("the first message of regeneration %s has parent %v, want its user message %s", run.requestID, m.parent, user.id)
			}
			if m.role == string(chat.RoleAssistant) {
				answers++
				answer += m.content
			}
		}
		// At most "re: " before its gate, then the rest after what steered it (each
		// continuation may start a segment of its own).
		if want := "re: " + user.content; answers > 2+s.suspended[run.id] || !strings.HasPrefix(want, answer) ||
			(run.status == string(chat.RunDone) && answer != want) {
			s.fail("run %s (%s, %s) answered %q in %d messages to %q", run.id, run.requestID, run.status, answer, answers, user.content)
		}
	}
}

func sameUUID(a, b *uuid.UUID) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// storedDiff is messagesDiff of what the database holds and what the actor shows: a
// streaming segment's text is stored when it ends (it is in its stream log meanwhile),
// so the database may hold less of it.
func storedDiff(db, shown []chat.Message) string {
	shown = slices.Clone(shown)
	for i := range shown {
		if i < len(db) && shown[i].ID == db[i].ID && shown[i].Status == chat.MessageStreaming && strings.HasPrefix(shown[i].Content, db[i].Content) {
			shown[i].Content = db[i].Content
		}
	}
	return messagesDiff(db, shown)
}

// messagesDiff is convtest.Diff, with the tree: parents and branches.
func messagesDiff(want, got []chat.Message) string {
	if d := convtest.Diff(want, got); d != "" {
		return d + "\n got " + describe(got) + "\nwant " + describe(want)
	}
	for i := range want {
		if !sameUUID(want[i].ParentID, got[i].ParentID) {
			return fmt.Sprintf("message %d (%s) has parent %v, want %v", i, want[i].ID, got[i].ParentID, want[i].ParentID)
		}
		if a, b := branchString(want[i].Branch), branchString(got[i].Branch); a != b {
			return fmt.Sprintf("message %d (%s %q) has branch %s, want %s\n got %s\nwant %s", i, want[i].ID, want[i].Content, b, a, describe(got), describe(want))
		}
	}
	return ""
}

func branchString(b *chat.Branch) string {
	if b == nil {
		return "none"
	}
	return fmt.Sprintf("%d of %v", b.Index, b.Siblings)
}

func describe(ms []chat.Message) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "\n    %d %s %s %s %q parent=%v branch=%s", m.Position, m.ID, m.Role, m.Status, m.Content, m.ParentID, branchString(m.Branch))
	}
	return b.String()
}
