// Package agui is a conversation.Agent that puts chatd in front of an agent served over
// AG-UI (https://docs.ag-ui.com), the event protocol that LangGraph, Pydantic AI, CrewAI,
// Mastra and others share: each model turn of a run POSTs AG-UI's RunAgentInput to the
// agent and consumes the server-sent events it answers with. It implements AG-UI
// protocol version 1.0 (ProtocolVersion), as @ag-ui/core 1.0.0 defines it, and also takes
// the THINKING_* events older producers send.
//
// What the agent is sent: threadId is the session's id, runId the run's; messages are
// the session's history (user, system and assistant text, tool calls with their results;
// no reasoning), the run's user message, and what the run already stored when it is
// continued after a restart (Request.Checkpoint: a partial last answer goes as the last
// assistant message, so the agent continues it); state is the latest state the agent
// reported (STATE_SNAPSHOT, STATE_DELTA) for the session, {} for none; tools is always
// empty, since chatd offers the agent no frontend tools of its own, and context and
// forwardedProps are empty too.
//
// What it streams back: text, reasoning, tool calls the agent ran itself (with
// TOOL_CALL_RESULT), steps as the run's progress, and token usage (RUN_FINISHED's
// usage). A tool call the agent leaves without a result when its run finishes is one it
// asks the client to handle (AG-UI's frontend tools, human in the loop): chatd makes it
// an approval, and the next turn sends the call's tool message, {"approved":true} or
// {"approved":false,"reason":"…"} (with resume entries for the interrupts of an AG-UI
// 1.0 RUN_FINISHED whose outcome is interrupt and that name the call). MESSAGES_SNAPSHOT,
// ACTIVITY_*, RAW, CUSTOM, SUBAGENT_* and REASONING_ENCRYPTED_VALUE are ignored, as are
// event types this package does not know.
//
// The state is stored on the run (Emitter.State) as it changes, write-behind, and given
// back from the session's newest run that has one (Request.AgentState): a session's
// next run sends the state its last one left, on any node and after any restart, and a
// run continued after a crash sends the state as it was last stored. A state larger
// than chat.MaxAgentState ends the run with CodeBadResponse.
package agui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// ProtocolVersion is the AG-UI protocol version this package speaks, sent as the
// protocolVersion of each RunAgentInput.
const ProtocolVersion = "1.0"

// Defaults of Config.
const (
	DefaultTimeout = 2 * time.Minute
	DefaultRetries = 3
)

// Backoff between retries: minBackoff, doubled each time, at most maxBackoff (or what a
// Retry-After header asks, up to maxBackoff).
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// Config configures an Agent.
type Config struct {
	// URL is the agent's endpoint, which RunAgentInput is POSTed to.
	URL string
	// Client does the requests; nil: a default one (no overall timeout: a run may stream
	// for long, Timeout bounds the silence between events).
	Client *http.Client
	// Header gives the headers of a request of req's run (chatd's identity and run
	// headers); turn counts the run's turns in this process (1, then 2 after an
	// approval...), attempt is 1 for a turn's first try and counts its retries. May be
	// nil. Content-Type and Accept are set after it.
	Header func(req conversation.Request, turn, attempt int) http.Header
	// Timeout ends the run with CodeTimeout when no event comes for this long (also
	// while waiting for the answer's headers). 0: DefaultTimeout.
	Timeout time.Duration
	// Retries is how often a transient failure (connection refused, DNS, TLS, 5xx, 429)
	// before anything streamed is retried, with backoff. 0: DefaultRetries; negative:
	// none.
	Retries int
	// Clock times the backoff, Timeout and ApprovalExpire; nil: the real one.
	Clock clockwork.Clock
	// ApprovalExpire, when positive, is how long a call waits for its decision before it
	// is denied as expired (CHATD_APPROVAL_EXPIRE), counted from when it was first asked.
	ApprovalExpire time.Duration
	Logger         zerolog.Logger
}

// Agent is a conversation.Agent that talks AG-UI to an agent over HTTP.
type Agent struct {
	cfg Config
	// backoff is the first retry's wait (minBackoff; tests shorten it).
	backoff time.Duration
}

var _ conversation.Agent = (*Agent)(nil)

// New returns an Agent for cfg, or an error for a URL that is not http(s).
func New(cfg Config) (*Agent, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("agui: the agent's URL must be an http or https URL, not %q", cfg.URL)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = DefaultRetries
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	return &Agent{cfg: cfg, backoff: minBackoff}, nil
}

// Run runs one chatd run: as many AG-UI runs (turns) of the agent as its approvals take.
func (a *Agent) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	r := &run{a: a, req: req, out: out, log: a.cfg.Logger.With().Str("run_id", req.RunID.String()).Logger()}
	if req.AgentState != nil {
		state, err := req.AgentState()
		if err != nil {
			return err
		}
		r.state, r.restored = unwrapState(state)
	}
	err := r.run(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

type run struct {
	a     *Agent
	req   conversation.Request
	out   conversation.Emitter
	log   zerolog.Logger
	state json.RawMessage
	msgs  []message
	// started and finished count the steps (STEP_STARTED, STEP_FINISHED) of the run.
	started, finished int
	turns             int // the turns asked so far
	// interrupts are the interrupt ids of the calls the last turn left to chatd (call id
	// → interrupt id): stored with the state while they wait, so that a run continued
	// after a restart resumes them; restored is what the stored state held.
	interrupts, restored map[string]string
	// carried are the calls of the last turn's interrupts that the next turn resumes: the
	// agent runs (or declines) them and streams their TOOL_CALL_RESULT, which ends them.
	carried map[string]*carried
}

// carried is a call the next turn resumes, with its decision.
type carried struct {
	decision conversation.Decision
	// ended: chatd ended the call (a denial ends it at once); resulted: the turn has its
	// tool message.
	ended, resulted bool
}

func (r *run) run(ctx context.Context) error {
	r.carried = map[string]*carried{}
	cp, resume, err := r.settleCheckpoint(ctx)
	if err != nil {
		return err
	}
	r.msgs = toMessages(r.req.History)
	r.msgs = append(r.msgs, message{ID: "user-" + r.req.RunID.String(), Role: "user", Content: ptr(r.req.Content)})
	r.msgs = append(r.msgs, toMessages(cp)...)
	for {
		t, err := r.turn(ctx, resume)
		if err != nil {
			return err
		}
		r.msgs = append(r.msgs, t.msgs...)
		r.carried = map[string]*carried{}
		if len(t.pending) == 0 {
			return nil
		}
		resume = nil
		// The calls' interrupts are stored before they are asked for: a run continued
		// after a restart resumes them as this process would.
		if len(t.interrupts) > 0 {
			r.interrupts = t.interrupts
			if err := r.storeState(); err != nil {
				return err
			}
		}
		// Every call is asked for at once, as a step's approvals are; the decisions are
		// taken in order.
		chans := make([]<-chan conversation.Decision, len(t.pending))
		asked := r.a.cfg.Clock.Now()
		for i, call := range t.pending {
			if chans[i], err = r.out.AwaitApproval(call); err != nil {
				return err
			}
		}
		for i, call := range t.pending {
			d, err := conversation.WaitDecision(ctx, r.out, r.a.cfg.Clock, call.ID, chans[i], r.a.expiry(asked))
			if err != nil {
				return err
			}
			content := approvalContent(d)
			if id, ok := t.interrupts[call.ID]; ok {
				// An interrupt is answered by resuming it, not by a tool message: the agent
				// then runs the call (or declines it) and streams its result.
				resume = append(resume, resumeEntry{InterruptID: id, Status: "resolved", Payload: json.RawMessage(content)})
				r.carried[call.ID] = &carried{decision: d, ended: !d.Approved}
				continue
			}
			if d.Approved {
				if err := r.out.ToolEnd(call.ID, conversation.ToolResult{Output: content}); err != nil {
					return err
				}
			}
			r.msgs = append(r.msgs, message{ID: "result-" + call.ID, Role: "tool", ToolCallID: call.ID, Content: ptr(content)})
		}
		r.interrupts = nil
	}
}

// expiry is when a call first asked at asked expires (zero: never).
func (a *Agent) expiry(asked time.Time) time.Time {
	if a.cfg.ApprovalExpire <= 0 {
		return time.Time{}
	}
	if asked.IsZero() {
		asked = a.cfg.Clock.Now()
	}
	return asked.Add(a.cfg.ApprovalExpire)
}

// settleCheckpoint settles the calls a continued run's checkpoint left open, and returns
// the checkpoint as the agent should see it, with the resume entries of the first turn:
// a call awaiting approval waits for its decision (AwaitDecision: it is not asked for
// again); a call stored running was either approved and not yet ended (it ends with
// {"approved":true}) or run by the agent when chatd's process died, and is ended
// interrupted: chatd cannot ask the agent for its result. A decided call whose interrupt
// the stored state names is resumed instead, as the process that asked would have.
func (r *run) settleCheckpoint(ctx context.Context) ([]chat.Message, []resumeEntry, error) {
	var resume []resumeEntry
	cp := append([]chat.Message(nil), r.req.Checkpoint...)
	// First every call that waits is taken up again (AwaitDecision), then the
	// decisions are taken in order.
	waits := map[int]<-chan conversation.Decision{}
	for i, m := range cp {
		if m.Tool != nil && m.Tool.Status == chat.ToolAwaitingApproval {
			ch, err := r.out.AwaitDecision(m.Tool.CallID)
			if err != nil {
				return nil, nil, err
			}
			waits[i] = ch
		}
	}
	for i, m := range cp {
		if m.Tool == nil || (m.Tool.Status != chat.ToolAwaitingApproval && m.Tool.Status != chat.ToolRunning) {
			continue
		}
		t := *m.Tool
		approved := t.Status == chat.ToolRunning && t.Decision != nil && t.Decision.Approved
		interrupt, resumable := r.restored[t.CallID]
		d := conversation.Decision{Approved: approved}
		switch {
		case t.Status == chat.ToolAwaitingApproval:
			var err error
			if d, err = conversation.WaitDecision(ctx, r.out, r.a.cfg.Clock, t.CallID, waits[i], r.a.expiry(m.CreatedAt)); err != nil {
				return nil, nil, err
			}
			if !d.Approved && !resumable {
				t.Status, t.Output = chat.ToolDenied, ptr(d.Output)
				break
			}
			approved = d.Approved
		case !approved:
			if err := r.out.ToolEnd(t.CallID, conversation.ToolResult{Interrupted: true, Output: interrupted}); err != nil {
				return nil, nil, err
			}
			t.Status, t.Output = chat.ToolInterrupted, ptr(interrupted)
		}
		switch {
		case resumable && (approved || t.Status == chat.ToolAwaitingApproval):
			// Resumed: the agent runs or declines it and gives its result; until then
			// the agent sees the call without one.
			resume = append(resume, resumeEntry{InterruptID: interrupt, Status: "resolved", Payload: json.RawMessage(approvalContent(d))})
			r.carried[t.CallID] = &carried{decision: d, ended: !d.Approved}
			t.Status = chat.ToolAwaitingApproval
		case approved:
			content := approvalContent(conversation.Decision{Approved: true})
			if err := r.out.ToolEnd(t.CallID, conversation.ToolResult{Output: content}); err != nil {
				return nil, nil, err
			}
			t.Status, t.Output = chat.ToolOK, ptr(content)
		}
		m.Tool = &t
		cp[i] = m
	}
	return cp, resume, nil
}

// turn is one AG-UI run of the agent: one request, retried while it fails before
// anything streamed.
func (r *run) turn(ctx context.Context, resume []resumeEntry) (*turnState, error) {
	state := r.state
	if len(state) == 0 {
		state = json.RawMessage("{}")
	}
	body, err := json.Marshal(runAgentInput{
		ThreadID: r.req.SessionID.String(), RunID: r.req.RunID.String(), ProtocolVersion: ProtocolVersion,
		State: state, Messages: r.msgs, Tools: []struct{}{}, Context: []struct{}{}, Resume: resume,
	})
	if err != nil {
		return nil, fmt.Errorf("agui: encode the request: %w", err)
	}
	cfg := &r.a.cfg
	backoff := r.a.backoff
	r.turns++
	for attempt := 1; ; attempt++ {
		t, retry, after, err := r.attempt(ctx, body, attempt)
		if err == nil || !retry || attempt > cfg.Retries || ctx.Err() != nil {
			return t, err
		}
		wait := max(backoff, after)
		r.log.Warn().Err(err).Int("attempt", attempt).Dur("backoff", wait).Msg("agui: retrying the agent")
		select {
		case <-cfg.Clock.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// attempt does one request and handles its events until RUN_FINISHED. retry says the
// failure is transient and nothing streamed.
func (r *run) attempt(ctx context.Context, body []byte, attempt int) (t *turnState, retry bool, after time.Duration, err error) {
	cfg := &r.a.cfg
	actx, cancel := context.WithCancel(ctx)
	hr, err := http.NewRequestWithContext(actx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, false, 0, fmt.Errorf("agui: %w", err)
	}
	if cfg.Header != nil {
		for k, vs := range cfg.Header(r.req, r.turns, attempt) {
			for _, v := range vs {
				hr.Header.Add(k, v)
			}
		}
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")

	items := make(chan item)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		stream(cfg.Client, hr, items, stop)
	}()
	defer func() {
		cancel() // the agent sees its request end
		close(stop)
		wg.Wait()
	}()

	timer := cfg.Clock.NewTimer(cfg.Timeout)
	defer timer.Stop()
	t = &turnState{r: r, byID: map[string]int{}, calls: map[string]*call{}, textIDs: map[string]bool{}}
	for {
		select {
		case <-ctx.Done():
			return nil, false, 0, ctx.Err()
		case <-timer.Chan():
			return nil, false, 0, &conversation.Error{Code: CodeTimeout, Message: fmt.Sprintf("the agent sent nothing for %s", cfg.Timeout)}
		case it := <-items:
			timer.Reset(cfg.Timeout)
			switch {
			case it.open:
			case it.end:
				if errors.Is(it.err, bufio.ErrTooLong) {
					return nil, false, 0, badResponse("the agent sent an event over %d MiB", maxEvent>>20)
				}
				if it.err != nil {
					if !t.streamed {
						return nil, true, 0, unreachable("the connection to the agent broke: %v", it.err)
					}
					return nil, false, 0, unreachable("the connection to the agent broke mid-stream: %v", it.err)
				}
				return nil, false, 0, badResponse("the agent's event stream ended without RUN_FINISHED or RUN_ERROR")
			case it.err != nil:
				return nil, it.retry, it.after, it.err
			default:
				done, err := t.handle(it.data)
				if err != nil {
					return nil, false, 0, err
				}
				if done {
					return t, false, 0, nil
				}
			}
		}
	}
}
