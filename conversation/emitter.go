package conversation

import "encoding/json"

// startAgent runs the agent in its own goroutine, on the request prepare returns; what
// it emits comes back as intents.
func (a *Actor) startAgent(run *runState, prepare func() (Request, error)) {
	a.runs.Add(1)
	go func() {
		defer a.runs.Done()
		req, err := prepare()
		if err == nil && run.stored != nil {
			select {
			case <-run.stored:
			case <-run.ctx.Done():
				err = ErrRunEnded // refused: the model is not called
			}
		}
		if err == nil {
			err = a.callAgent(run, req)
		}
		a.pending.Add(1)
		select {
		case a.inbox <- &runEndIntent{run, err}:
			a.poke()
		case <-a.done:
			a.pending.Add(-1)
		}
	}()
}

func (a *Actor) callAgent(run *runState, req Request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			a.logger().Error().Str("run_id", run.info.ID.String()).Interface("panic", p).Msg("agent panicked")
			err = errorf(CodeInternal, "the agent crashed")
		}
	}()
	return a.cfg.Agent.Run(run.ctx, req, &emitter{a: a, run: run})
}

type (
	textIntent struct {
		run  *runState
		text string
	}
	toolStartIntent struct {
		run   *runState
		call  ToolCall
		reply chan error
	}
	toolOutputIntent struct {
		run          *runState
		callID, text string
	}
	toolEndIntent struct {
		run    *runState
		callID string
		result ToolResult
		reply  chan error
	}
	runEndIntent struct {
		run *runState
		err error
	}
	steerIntent struct {
		run   *runState
		reply chan result[[]string]
	}
	noticeIntent struct {
		run   *runState
		text  string
		reply chan error
	}
	reasoningIntent struct {
		run          *runState
		text         string
		providerData json.RawMessage
		end          bool
	}
)

// emitter is the Emitter of one run: it turns calls into intents for the actor.
type emitter struct {
	a   *Actor
	run *runState
	// text is the intent of the last Text, for the next, when it was handled inline:
	// nothing refers to it then, and a token costs no allocation of its own.
	text *textIntent
}

func (e *emitter) Text(delta string) error {
	if delta == "" {
		return nil
	}
	it := e.text
	e.text = nil
	if it == nil {
		it = new(textIntent)
	}
	*it = textIntent{e.run, delta}
	if e.run.ctx.Err() != nil {
		return ErrRunEnded
	}
	if e.a.inline(it) {
		*it = textIntent{}
		e.text = it
		return nil
	}
	return e.send(it)
}

func (e *emitter) Reasoning(delta string) error {
	if delta == "" {
		return nil
	}
	return e.post(&reasoningIntent{e.run, delta, nil, false})
}

func (e *emitter) EndReasoning(providerData json.RawMessage) error {
	return e.post(&reasoningIntent{e.run, "", providerData, true})
}

func (e *emitter) ToolStart(call ToolCall) error {
	reply := make(chan error, 1)
	return e.call(&toolStartIntent{e.run, call, reply}, reply)
}

func (e *emitter) ToolOutput(callID, text string) error {
	if text == "" {
		return nil
	}
	return e.post(&toolOutputIntent{e.run, callID, text})
}

func (e *emitter) ToolEnd(callID string, result ToolResult) error {
	reply := make(chan error, 1)
	return e.call(&toolEndIntent{e.run, callID, result, reply}, reply)
}

func (e *emitter) AwaitApproval(call ToolCall) (<-chan Decision, error) {
	reply := make(chan result[<-chan Decision], 1)
	return e.decision(&approvalIntent{e.run, call, reply}, reply)
}

func (e *emitter) AwaitDecision(callID string) (<-chan Decision, error) {
	reply := make(chan result[<-chan Decision], 1)
	return e.decision(&awaitDecisionIntent{e.run, callID, reply}, reply)
}

// decision posts an intent that answers with the channel a decision will come on.
func (e *emitter) decision(it intent, reply chan result[<-chan Decision]) (<-chan Decision, error) {
	if err := e.post(it); err != nil {
		return nil, err
	}
	select {
	case r := <-reply:
		return r.val, r.err
	case <-e.run.ctx.Done():
		return nil, ErrRunEnded
	case <-e.a.done:
		return nil, ErrStopped
	}
}

func (e *emitter) Expire(callID string) error {
	reply := make(chan error, 1)
	return e.call(&expireIntent{e.run, callID, reply}, reply)
}

func (e *emitter) Paused() error {
	reply := make(chan error, 1)
	return e.call(&pausedIntent{e.run, false, reply}, reply)
}

func (e *emitter) Resumed() error {
	reply := make(chan error, 1)
	return e.call(&pausedIntent{e.run, true, reply}, reply)
}

// Steering implements Steerer.
func (e *emitter) Steering() ([]string, error) {
	reply := make(chan result[[]string], 1)
	if err := e.post(&steerIntent{e.run, reply}); err != nil {
		return nil, err
	}
	select {
	case r := <-reply:
		return r.val, r.err
	case <-e.run.ctx.Done():
		return nil, ErrRunEnded
	}
}

func (e *emitter) Notice(text string) error {
	reply := make(chan error, 1)
	return e.call(&noticeIntent{e.run, text, reply}, reply)
}

func (e *emitter) Usage(u Usage) error {
	return e.post(&usageIntent{e.run, u})
}

func (e *emitter) Progress(step, of int, label string) error {
	p, err := checkProgress(step, of, label)
	if err != nil {
		return err
	}
	return e.post(&progressIntent{e.run, p})
}

func (e *emitter) State(state json.RawMessage) error {
	s, err := checkAgentState(state)
	if err != nil {
		return err
	}
	return e.post(&agentStateIntent{e.run, s})
}

func (e *emitter) post(it intent) error {
	if e.run.ctx.Err() != nil {
		return ErrRunEnded
	}
	if e.a.inline(it) {
		return nil
	}
	return e.send(it)
}

// send queues it in the actor's inbox.
func (e *emitter) send(it intent) error {
	// The inbox has room almost always: a plain send then costs one channel operation,
	// not the three-way select.
	e.a.pending.Add(1)
	select {
	case e.a.inbox <- it:
		e.a.poke()
		return nil
	default:
	}
	select {
	case e.a.inbox <- it:
		e.a.poke()
		return nil
	case <-e.run.ctx.Done():
		e.a.pending.Add(-1)
		return ErrRunEnded
	case <-e.a.done:
		e.a.pending.Add(-1)
		return ErrStopped
	}
}

func (e *emitter) call(it intent, reply chan error) error {
	if err := e.post(it); err != nil {
		return err
	}
	select {
	case err := <-reply:
		return err
	case <-e.run.ctx.Done():
		return ErrRunEnded
	case <-e.a.done:
		return ErrStopped
	}
}
