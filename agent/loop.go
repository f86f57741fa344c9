package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// Defaults for Config's zero fields.
const (
	DefaultMaxSteps         = 20
	DefaultMaxParallelTools = 4
	DefaultMaxToolOutput    = 64 << 10
	DefaultApprovalTimeout  = 5 * time.Minute
	DefaultMaxRetries       = 2
	DefaultRetryBackoff     = time.Second
	DefaultContextTokens    = 64000
	DefaultModelIdleTimeout = 5 * time.Minute
	// DefaultToolStale is Config.ToolStale's default.
	DefaultToolStale = time.Minute

	// maxRetryWait is the longest wait for a retry: a provider that asks for more (a
	// 429 with retry-after: 3600) gets its error shown instead of a silent stall.
	maxRetryWait = time.Minute
)

// Run error codes the loop ends runs with.
const (
	CodeStepLimit  = "step_limit"
	CodeModelError = "model_error"
)

// Config configures a Loop.
type Config struct {
	// Model answers. Required.
	Model Model
	// Tools the model may call; nil for none.
	Tools *Registry
	// Sandboxes gives tools their session's sandbox; nil when no tool needs one.
	Sandboxes *Sandboxes
	// System is the system prompt.
	System string
	// ContextTokens is the budget for what the model's context holds: the system prompt,
	// the tool specs, the conversation and the answer (see MessageBudget). The oldest
	// turns are left out to stay under it (an estimate; see EstimateTokens). It is also
	// reported as the context window usage counts against.
	ContextTokens int
	// MaxOutputTokens is the model's cap on an answer, kept free in ContextTokens; 0 when
	// the provider decides, which keeps DefaultOutputReserve (at most a quarter).
	MaxOutputTokens int
	// MaxSteps bounds model calls per run.
	MaxSteps int
	// MaxParallelTools bounds how many calls of one step run at once.
	MaxParallelTools int
	// MaxToolOutput caps each tool result (and its streamed output), in bytes.
	MaxToolOutput int
	// ApprovalTimeout is how long a run waits for a decision before it pauses the
	// session's sandbox. The run itself waits for the decision indefinitely; the
	// SandboxJanitor kills a sandbox paused for longer than its KillAfter.
	ApprovalTimeout time.Duration
	// ApprovalExpire, when positive, is how long a call waits for its decision before it
	// is denied (conversation.ExpiredOutput, which the model is told). It counts from when
	// the call was first asked, across restarts (the stored call's created_at). Zero (the
	// default) waits for ever. Unlike ApprovalTimeout, which only pauses the sandbox while
	// the run goes on waiting, an expiry decides the call.
	ApprovalExpire time.Duration
	// MaxRetries is how often a transient model error is retried, backing off from
	// RetryBackoff (doubling), or the provider's retry-after when longer (up to a
	// minute). Negative means never.
	MaxRetries   int
	RetryBackoff time.Duration
	// ModelIdleTimeout bounds the wait for a model call's next event (the first one
	// included, keep-alives too: any data received): a provider that goes quiet for this
	// long is hung up on and the call fails as a transient error, so no run waits on a
	// dead connection for ever. Negative turns it off.
	ModelIdleTimeout time.Duration
	// ToolStale stops a running tool call that sent no output and reported no progress
	// for this long (CHATD_TOOL_STALE): it ends as an error whose message says it was
	// stale, which the model is told. A tool's own ToolSpec.StaleAfter overrides it.
	// Negative turns it off; 0 is DefaultToolStale.
	ToolStale time.Duration
	// Clock drives approval timeouts, retry backoff and the model idle timeout. Defaults
	// to the real clock.
	Clock  clockwork.Clock
	Logger zerolog.Logger
	// Metrics measures model calls (on Clock). nil measures into metrics nobody exposes.
	Metrics *Metrics
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Metrics == nil {
		c.Metrics = discardMetrics()
	}
	if c.Tools == nil {
		c.Tools = &Registry{groups: map[string][]entry{}}
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.MaxSteps, DefaultMaxSteps)
	def(&c.MaxParallelTools, DefaultMaxParallelTools)
	def(&c.MaxToolOutput, DefaultMaxToolOutput)
	def(&c.MaxRetries, DefaultMaxRetries)
	def(&c.ContextTokens, DefaultContextTokens)
	defDur(&c.ApprovalTimeout, DefaultApprovalTimeout)
	defDur(&c.RetryBackoff, DefaultRetryBackoff)
	defDur(&c.ModelIdleTimeout, DefaultModelIdleTimeout)
	defDur(&c.ToolStale, DefaultToolStale)
	return c
}

// Loop is the agent: it calls the model, runs the tools the model asks for (waiting for
// approvals where a tool needs one), gives the results back, and repeats until the model
// answers without tools or the step limit is reached.
type Loop struct {
	cfg Config
	log zerolog.Logger
}

var _ conversation.Agent = (*Loop)(nil)

// New returns a Loop.
func New(cfg Config) (*Loop, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Model == nil:
		return nil, errors.New("agent config: Model is required")
	case cfg.MaxSteps < 1 || cfg.MaxParallelTools < 1 || cfg.MaxToolOutput < 1:
		return nil, errors.New("agent config: limits must be positive")
	}
	return &Loop{cfg: cfg, log: cfg.Logger.With().Str("component", "agent").Logger()}, nil
}

// Run answers one user message, or goes on answering it from req.Checkpoint (see
// resume).
func (l *Loop) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	r := &run{l: l, req: req, out: &lockedEmitter{out: out}, ids: map[string]bool{}}
	msgs := append(Transcript(req.History), Message{Role: RoleUser, Text: req.Content})
	done, cont, err := r.resume(ctx, &msgs)
	if err != nil {
		return err
	}
	for step := done + 1; ; step++ {
		reply, err := r.callModel(ctx, msgs, cont)
		if err != nil {
			return err
		}
		if last := &msgs[len(msgs)-1]; cont != "" && len(reply.Reasoning) == 0 {
			// The rest of the cut-off text: one step, as Transcript will see it.
			last.Text += reply.Text
			last.ToolCalls = reply.ToolCalls
		} else {
			msgs = append(msgs, reply)
		}
		cont = ""
		if len(reply.ToolCalls) == 0 {
			// A step boundary: messages sent to the run meanwhile (the steer policy) are
			// answered in this run, after what it said so far.
			more, err := r.steer(out, &msgs)
			if err != nil || !more {
				return err
			}
			if step >= l.cfg.MaxSteps {
				return &conversation.Error{
					Code:    CodeStepLimit,
					Message: fmt.Sprintf("the agent stopped after %d steps without a final answer", l.cfg.MaxSteps),
				}
			}
			continue
		}
		if step >= l.cfg.MaxSteps {
			// Results the model would never see: do not run (or ask approval for) them.
			return &conversation.Error{
				Code:    CodeStepLimit,
				Message: fmt.Sprintf("the agent stopped after %d steps without a final answer", l.cfg.MaxSteps),
			}
		}
		results, err := r.runTools(ctx, reply.ToolCalls)
		if err != nil {
			return err
		}
		msgs = append(msgs, results...)
		// The step boundary after the tools' results: the model sees what was sent to
		// the run meanwhile after them, and nothing done so far is done again.
		if _, err := r.steer(out, &msgs); err != nil {
			return err
		}
	}
}

// steer adds the messages sent to the run since its last step boundary (the steer
// policy; only when out is a conversation.Steerer) to msgs as user turns, and reports
// whether there were any.
func (r *run) steer(out conversation.Emitter, msgs *[]Message) (bool, error) {
	s, ok := out.(conversation.Steerer)
	if !ok {
		return false, nil
	}
	r.out.mu.Lock()
	texts, err := s.Steering()
	r.out.mu.Unlock()
	if err != nil {
		return false, err
	}
	for _, t := range texts {
		*msgs = append(*msgs, Message{Role: RoleUser, Text: t})
	}
	return len(texts) > 0, nil
}

// run is one Run's state.
type run struct {
	l   *Loop
	req conversation.Request
	out *lockedEmitter
	ids map[string]bool // tool call ids used so far
}

// uniqueID returns id, or a variant of it when the run already used it: models (local ones
// especially) reuse ids across steps, and a run's call ids must be unique.
func (r *run) uniqueID(id string) string {
	if id == "" {
		id = "call"
	}
	unique := id
	for n := 2; r.ids[unique]; n++ {
		unique = fmt.Sprintf("%s-%d", id, n)
	}
	r.ids[unique] = true
	return unique
}

// reserveIDs keeps the call ids of msgs (earlier runs, the checkpoint) from new calls,
// so that ids stay unique in what the model sees.
func (r *run) reserveIDs(msgs []Message) {
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			r.ids[c.ID] = true
		}
	}
}

// callModel makes one model call, retrying transient errors while nothing has streamed.
// cont is the cut-off text the answer continues, "" for none (ModelRequest.Continue).
func (r *run) callModel(ctx context.Context, msgs []Message, cont string) (Message, error) {
	cfg := r.l.cfg
	req := ModelRequest{System: cfg.System, Tools: cfg.Tools.Specs(), Continue: cont}
	req.Messages = Trim(msgs, MessageBudget(cfg.ContextTokens, req.System, req.Tools, cfg.MaxOutputTokens))
	backoff := cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		reply := Message{Role: RoleAssistant}
		var text strings.Builder
		streamed := false
		blockOpen := false // the last reasoning block still grows
		err := r.stream(ctx, req, func(ev ModelEvent) error {
			switch ev.Kind {
			case EventText:
				streamed = true
				blockOpen = false
				// Grow doubles the buffer when it is full; WriteString alone grows a long
				// answer by a quarter at a time, which allocates four times its size.
				text.Grow(len(ev.Text))
				text.WriteString(ev.Text)
				return r.out.Text(ev.Text)
			case EventReasoning:
				streamed = true
				if !blockOpen {
					reply.Reasoning = append(reply.Reasoning, Reasoning{})
					blockOpen = true
				}
				reply.Reasoning[len(reply.Reasoning)-1].Text += ev.Reasoning.Text
				return r.out.Reasoning(ev.Reasoning.Text)
			case EventReasoningEnd:
				streamed = true
				if !blockOpen {
					reply.Reasoning = append(reply.Reasoning, Reasoning{})
				}
				blockOpen = false
				b := &reply.Reasoning[len(reply.Reasoning)-1]
				b.Signature, b.Redacted = ev.Reasoning.Signature, ev.Reasoning.Redacted
				return r.out.EndReasoning(reasoningData(*b))
			case EventToolCall:
				streamed = true
				blockOpen = false
				reply.ToolCalls = append(reply.ToolCalls, ev.ToolCall)
			case EventProgress:
				p := ev.Progress
				err := r.out.Progress(p.Step, p.Of, p.Label)
				if e := (*conversation.Error)(nil); errors.As(err, &e) && e.Code == conversation.CodeBadRequest {
					r.l.log.Warn().Err(err).Msg("the model reported a progress the run refused")
					return nil // a bad report is no reason to end the answer
				}
				return err
			case EventUsage:
				return r.out.Usage(conversation.Usage{
					InputTokens:  ev.Usage.InputTokens,
					OutputTokens: ev.Usage.OutputTokens,
					// The reply joins the conversation: the next call's prompt holds both.
					ContextTokens: ev.Usage.InputTokens + ev.Usage.OutputTokens,
					ContextWindow: int64(cfg.ContextTokens),
				})
			}
			return nil
		})
		if err == nil {
			reply.Text = text.String()
			return reply, nil
		}
		if ctx.Err() != nil || isRunEnded(err) {
			return Message{}, err
		}
		var me *ModelError
		transient := errors.As(err, &me) && me.Transient && me.RetryAfter <= maxRetryWait
		if !transient || streamed || attempt >= cfg.MaxRetries {
			// The run's error hides the provider's raw text from the user; the log keeps it.
			r.l.log.Warn().Err(err).Int("attempts", attempt+1).Msg("model call failed")
			if transient && !streamed && attempt > 0 {
				return Message{}, modelFailure(err, fmt.Sprintf(" (gave up after %d attempts)", attempt+1))
			}
			return Message{}, modelFailure(err, "")
		}
		wait := max(backoff, me.RetryAfter)
		r.l.log.Info().Err(err).Int("attempt", attempt+1).Dur("retry_in", wait).Msg("transient model error")
		select {
		case <-cfg.Clock.After(wait):
		case <-ctx.Done():
			return Message{}, ctx.Err()
		}
		backoff *= 2
	}
}

// errModelIdle cancels a model call that went quiet.
var errModelIdle = errors.New("model idle")

// stream makes one model call, hanging up when it sends nothing for ModelIdleTimeout.
func (r *run) stream(ctx context.Context, req ModelRequest, emit func(ModelEvent) error) error {
	output := r.timeFirstToken(emit)
	emit = func(ev ModelEvent) error {
		if ev.Kind == EventKeepAlive {
			return nil // it restarts the idle timer, and is neither output nor "streamed"
		}
		return output(ev)
	}
	idle := r.l.cfg.ModelIdleTimeout
	if idle < 0 {
		return r.l.cfg.Model.Stream(ctx, req, emit)
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := r.l.cfg.Clock.AfterFunc(idle, func() { cancel(errModelIdle) })
	defer timer.Stop()
	err := r.l.cfg.Model.Stream(callCtx, req, func(ev ModelEvent) error {
		timer.Stop() // emit's own time (a slow actor) is not the model's
		err := emit(ev)
		timer.Reset(idle)
		return err
	})
	if ctx.Err() == nil && errors.Is(context.Cause(callCtx), errModelIdle) {
		return &ModelError{
			Code:      CodeModelUnreachable,
			Message:   fmt.Sprintf("the model provider sent nothing for %s", idle),
			Transient: true,
			Err:       err,
		}
	}
	return err
}

// timeFirstToken returns emit, observing the time from now to the call's first piece of
// output: text, reasoning or a tool call. Usage is not output (some providers report the
// prompt's tokens before the model has produced anything), nor is progress.
func (r *run) timeFirstToken(emit func(ModelEvent) error) func(ModelEvent) error {
	clock := r.l.cfg.Clock
	start := clock.Now()
	seen := false
	return func(ev ModelEvent) error {
		if !seen && ev.Kind != EventUsage && ev.Kind != EventProgress && ev.Kind != EventKeepAlive {
			seen = true
			r.l.cfg.Metrics.firstToken.Observe(clock.Since(start).Seconds())
		}
		return emit(ev)
	}
}

func isRunEnded(err error) bool {
	return errors.Is(err, conversation.ErrRunEnded) || errors.Is(err, conversation.ErrStopped)
}

// modelFailure turns a model error into the run's error, with no raw provider text.
func modelFailure(err error, suffix string) error {
	var me *ModelError
	if errors.As(err, &me) {
		code := me.Code
		if code == "" {
			code = CodeModelError
		}
		msg := me.Message
		if msg == "" {
			msg = "the model call failed"
		}
		return &conversation.Error{Code: code, Message: msg + suffix}
	}
	return &conversation.Error{Code: CodeModelError, Message: "the model call failed" + suffix}
}

// call is one tool call of a step on its way to a result.
type call struct {
	ToolCall
	tool     Tool
	spec     ToolSpec
	known    bool
	badInput bool
	decision <-chan conversation.Decision // set for calls waiting for approval
	// asked is when the call began to wait for its decision: now for a new call, when it
	// was stored for one of a checkpoint, so the approval timeout counts from the first
	// wait across restarts and evictions (the deadline is the stored call's created_at
	// plus ApprovalTimeout).
	asked    time.Time
	approved bool
	declined string // what the model is told of a denied call
	settled  bool   // result is final: the call does not run (an interrupted one)
	result   Message
}

// runTools runs a step's tool calls and returns their results in call order. Calls are
// announced in order (tool.start, or the approval request); decisions are awaited; then
// the calls run, several at once.
func (r *run) runTools(ctx context.Context, calls []ToolCall) ([]Message, error) {
	cs := make([]*call, len(calls))
	for i, tc := range calls {
		c := &call{ToolCall: tc}
		c.tool, c.spec, c.known = r.l.cfg.Tools.Lookup(tc.Name)
		if len(c.Input) == 0 {
			c.Input = json.RawMessage("{}")
		}
		if chat.CheckToolInput(c.Input) != nil {
			// Keep what the model sent, as a (storable) JSON string, and fail the call.
			c.Input, _ = json.Marshal(chat.CleanText(string(tc.Input)))
			c.badInput = true
		}
		if !chat.ValidToolName(c.Name) {
			c.Name, c.known = "unnamed", false
		}
		if !chat.ValidToolCallID(c.ID) {
			c.ID = "call" // the model's id cannot be stored; give it one that can
		}
		c.ID = r.uniqueID(c.ID)
		calls[i].ID = c.ID // the model sees the id the run uses
		cs[i] = c
		var err error
		if c.known && c.spec.NeedsApproval && !c.badInput {
			c.decision, err = r.out.AwaitApproval(conversation.ToolCall{ID: c.ID, Name: c.Name, Input: c.Input})
		} else {
			err = r.out.ToolStart(conversation.ToolCall{ID: c.ID, Name: c.Name, Input: c.Input})
		}
		if err != nil {
			return nil, err
		}
	}
	return r.settle(ctx, cs)
}

// settle waits for the decisions the calls wait for, then runs the calls that may run,
// several at once, and returns every call's result in call order.
func (r *run) settle(ctx context.Context, cs []*call) ([]Message, error) {
	if err := r.awaitDecisions(ctx, cs); err != nil {
		return nil, err
	}

	sem := make(chan struct{}, r.l.cfg.MaxParallelTools)
	var wg sync.WaitGroup
	for _, c := range cs {
		if c.settled {
			continue
		}
		if c.decision != nil && !c.approved {
			out := c.declined
			if out == "" {
				out = conversation.DeclinedOutput
			}
			c.result = Message{Role: RoleTool, ToolCallID: c.ID, ToolName: c.Name, Result: out, IsError: true}
			continue // the actor ended the call as denied
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c.result = r.execute(ctx, c)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	results := make([]Message, len(cs))
	for i, c := range cs {
		results[i] = c.result
	}
	return results, nil
}

// awaitDecisions waits for every approval of the step. It waits indefinitely, but after
// ApprovalTimeout it pauses the session's sandbox (and tells the run); Sandboxes records
// when, and the SandboxJanitor kills a sandbox paused for SandboxKillAfter, from the
// stored time, whether or not this wait (or any process) is still there. A decision
// resumes a paused sandbox; a killed one is replaced when a tool next needs it. A wait
// that ends without a decision (cancelled, shut down, parked) resumes the sandbox, so
// its background work goes on; the janitor pauses it again once it has sat idle for its
// IdlePause, and kills it KillAfter after that.
func (r *run) awaitDecisions(ctx context.Context, cs []*call) error {
	type decided struct {
		c *call
		d conversation.Decision
	}
	pending := 0
	ch := make(chan decided, len(cs))
	// Deferred calls run last first: stop the forwarders, then wait for them.
	var forwarders sync.WaitGroup
	defer forwarders.Wait()
	waitCtx, stop := context.WithCancel(ctx)
	defer stop()
	for _, c := range cs {
		if c.decision == nil {
			continue
		}
		pending++
		forwarders.Go(func() {
			select {
			case d := <-c.decision:
				ch <- decided{c, d}
			case <-waitCtx.Done():
			}
		})
	}
	if pending == 0 {
		return nil
	}

	clock := r.l.cfg.Clock
	// The oldest wait decides: a call of the checkpoint may have waited in an earlier
	// process already.
	asked := clock.Now()
	for _, c := range cs {
		if c.decision != nil && !c.asked.IsZero() && c.asked.Before(asked) {
			asked = c.asked
		}
	}
	waited := clock.Now().Sub(asked)
	pauseAt := clock.NewTimer(max(r.l.cfg.ApprovalTimeout-waited, 0))
	defer pauseAt.Stop()

	// Each call expires ApprovalExpire after it was first asked; one timer waits for the
	// earliest deadline of the calls still undecided.
	undecided := map[*call]time.Time{}
	var expireC <-chan time.Time
	var expireAt clockwork.Timer
	if expire := r.l.cfg.ApprovalExpire; expire > 0 {
		now := clock.Now()
		for _, c := range cs {
			if c.decision == nil {
				continue
			}
			from := c.asked
			if from.IsZero() {
				from = now
			}
			undecided[c] = from.Add(expire)
		}
		expireAt = clock.NewTimer(time.Hour)
		defer expireAt.Stop()
		expireC = expireAt.Chan()
	}
	nextExpiry := func() {
		if expireAt == nil {
			return
		}
		var first time.Time
		for _, at := range undecided {
			if first.IsZero() || at.Before(first) {
				first = at
			}
		}
		expireAt.Stop()
		if first.IsZero() {
			expireC = nil
			return
		}
		expireAt.Reset(max(first.Sub(clock.Now()), 0))
		expireC = expireAt.Chan()
	}
	nextExpiry()
	// expireDue denies the calls whose deadline has come; the denials come back on their
	// decision channels (a call decided meanwhile keeps its decision).
	expireDue := func() (bool, error) {
		now, expired := clock.Now(), false
		for c, at := range undecided {
			if !at.After(now) {
				delete(undecided, c)
				expired = true
				if err := r.out.Expire(c.ID); err != nil {
					return expired, err
				}
			}
		}
		nextExpiry()
		return expired, nil
	}
	paused := false
	defer func() {
		// The wait ended without a decision (cancelled, failed): the sandbox must not
		// stay frozen for a run that is gone. A suspended run still waits: its sandbox
		// stays paused, and the janitor kills it from the stored pause.
		if paused && !errors.Is(context.Cause(ctx), conversation.ErrSuspended) {
			if err := r.sandboxes(func(s *Sandboxes, ctx context.Context, id uuid.UUID) error { return s.Resume(ctx, id) }); err != nil {
				r.l.log.Warn().Err(err).Msg("resume the session's sandbox")
			}
		}
	}()
	for pending > 0 {
		select {
		case d := <-ch:
			pending--
			d.c.approved = d.d.Approved
			d.c.declined = d.d.Output
			if _, ok := undecided[d.c]; ok {
				delete(undecided, d.c)
				nextExpiry()
			}
			if paused {
				paused = false
				if err := r.sandboxes(func(s *Sandboxes, ctx context.Context, id uuid.UUID) error { return s.Resume(ctx, id) }); err != nil {
					r.l.log.Warn().Err(err).Msg("resume the session's sandbox")
				}
				if err := r.out.Resumed(); err != nil {
					return err
				}
			}
			if pending > 0 {
				pauseAt.Reset(r.l.cfg.ApprovalTimeout)
			}
		case <-expireC:
			if _, err := expireDue(); err != nil {
				return err
			}
		case <-pauseAt.Chan():
			// A call whose approval expires now is denied rather than paused for (its
			// decision re-arms the pause for the calls left, as any decision does).
			expired, err := expireDue()
			if err != nil {
				return err
			}
			if expired || (expireAt != nil && len(undecided) == 0) {
				continue // every call left is expired, its denial on its way
			}
			if err := r.sandboxes(func(s *Sandboxes, ctx context.Context, id uuid.UUID) error { return s.Pause(ctx, id) }); err != nil {
				r.l.log.Warn().Err(err).Msg("pause the session's sandbox")
			}
			paused = true
			if err := r.out.Paused(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// sandboxes runs do on the session's sandboxes, when the agent has any.
func (r *run) sandboxes(do func(*Sandboxes, context.Context, uuid.UUID) error) error {
	if r.l.cfg.Sandboxes == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return do(r.l.cfg.Sandboxes, ctx, r.req.SessionID)
}

// execute runs one call and ends it. Tool errors and panics are results the model sees.
func (r *run) execute(ctx context.Context, c *call) Message {
	msg := Message{Role: RoleTool, ToolCallID: c.ID, ToolName: c.Name}
	if sbs := r.l.cfg.Sandboxes; sbs != nil {
		// The janitor leaves the session's sandbox alone while the call runs, and its
		// idle time counts from the call's end.
		end := sbs.Begin(r.req.SessionID)
		defer func() {
			if err := r.sandboxes(func(_ *Sandboxes, ctx context.Context, _ uuid.UUID) error { return end(ctx) }); err != nil {
				r.l.log.Warn().Err(err).Msg("mark the session's sandbox used")
			}
		}()
	}
	stale := newStaleWatch(r.l.cfg.Clock, r.staleAfter(c))
	defer stale.stop()
	streamed := &outputWriter{
		emit: func(s string) error {
			stale.alive()
			return r.out.ToolOutput(c.ID, s)
		},
		limit: r.l.cfg.MaxToolOutput,
	}
	env := &toolEnv{r: r, ctx: ctx, out: streamed, alive: stale.alive}
	var (
		output string
		err    error
	)
	switch {
	case !c.known:
		err = fmt.Errorf("there is no tool named %q", c.Name)
	case c.badInput:
		err = errors.New("the tool input is not valid JSON")
	default:
		toolCtx := stale.watch(ctx)
		output, err = r.safeRun(toolCtx, c, env)
		if stale.fired() && ctx.Err() == nil {
			err = fmt.Errorf("stale: the tool sent no output and reported no progress for %s, so it was stopped", stale.after)
		}
	}
	if ctx.Err() != nil {
		return msg // the run is over; the actor closed the call
	}
	if output == "" {
		// What the user saw (already capped) is what the model gets.
		output = strings.ToValidUTF8(streamed.sent.String(), "\uFFFD")
	} else {
		output = capText(output, r.l.cfg.MaxToolOutput)
	}
	res := conversation.ToolResult{Output: output}
	msg.Result = output
	if err != nil {
		res.Err = err
		msg.IsError = true
		// The model is told why, whatever output came before.
		why := capText(err.Error(), 1024)
		if output == "" {
			msg.Result = why
		} else {
			msg.Result = output + "\n[error: " + why + "]"
		}
	}
	if endErr := r.out.ToolEnd(c.ID, res); endErr != nil && !isRunEnded(endErr) {
		r.l.log.Warn().Err(endErr).Str("call_id", c.ID).Msg("end a tool call")
	}
	return msg
}

func (r *run) safeRun(ctx context.Context, c *call, env Env) (out string, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.l.log.Error().Interface("panic", p).Str("tool", c.Name).Msg("tool panicked")
			out, err = "", errToolPanicked
		}
	}()
	ctx = WithCallInfo(ctx, CallInfo{CallID: c.ID, Tool: c.Name, SessionID: r.req.SessionID, RunID: r.req.RunID, Owner: r.req.Owner, Token: r.req.Token})
	return c.tool.Run(ctx, c.Input, env)
}

type toolEnv struct {
	r     *run
	ctx   context.Context
	out   io.Writer
	alive func() // the call shows it is working: its stale watch starts again
}

func (e *toolEnv) Output() io.Writer { return e.out }

// Progress reports the run's progress for the tool (conversation.Emitter's Progress).
func (e *toolEnv) Progress(step, of int, label string) error {
	e.alive()
	return e.r.out.Progress(step, of, label)
}

// Sandbox returns the session's sandbox. When it is a new one replacing one the session
// had, the transcript says so first, naming the files the old one had: the model and the
// user must not expect them.
func (e *toolEnv) Sandbox(ctx context.Context) (sandbox.Sandbox, error) {
	if e.r.l.cfg.Sandboxes == nil {
		return nil, errors.New("no sandbox is configured")
	}
	sb, notice, err := e.r.l.cfg.Sandboxes.Acquire(ctx, e.r.req.SessionID)
	if err != nil {
		return nil, err
	}
	if notice != "" {
		if err := e.r.out.Notice(notice); err != nil {
			return nil, err
		}
	}
	return sb, nil
}

// lockedEmitter lets the step's tool goroutines share the run's emitter, whose methods
// must not be called concurrently.
type lockedEmitter struct {
	mu  sync.Mutex
	out conversation.Emitter
}

func (e *lockedEmitter) Text(d string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.Text(d)
}

func (e *lockedEmitter) Reasoning(d string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.Reasoning(d)
}

func (e *lockedEmitter) EndReasoning(data json.RawMessage) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.EndReasoning(data)
}

func (e *lockedEmitter) ToolStart(c conversation.ToolCall) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.ToolStart(c)
}

func (e *lockedEmitter) ToolOutput(id, text string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.ToolOutput(id, text)
}

func (e *lockedEmitter) ToolEnd(id string, res conversation.ToolResult) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.ToolEnd(id, res)
}

func (e *lockedEmitter) AwaitApproval(c conversation.ToolCall) (<-chan conversation.Decision, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.AwaitApproval(c)
}

func (e *lockedEmitter) AwaitDecision(id string) (<-chan conversation.Decision, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.AwaitDecision(id)
}

func (e *lockedEmitter) Expire(id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.Expire(id)
}

func (e *lockedEmitter) Paused() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.Paused()
}

func (e *lockedEmitter) Resumed() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.Resumed()
}

func (e *lockedEmitter) Notice(text string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.Notice(text)
}

func (e *lockedEmitter) Usage(u conversation.Usage) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.Usage(u)
}

func (e *lockedEmitter) Progress(step, of int, label string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.out.Progress(step, of, label)
}
