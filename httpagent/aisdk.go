package httpagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/aisdk"
)

// AISDK is an agent served as a Vercel AI SDK route: a request is the body
// DefaultChatTransport sends ({id, messages: UIMessage[], trigger: "submit-message"}), the
// answer the UI message stream of toUIMessageStreamResponse() (ai 7.0).
type AISDK struct {
	cfg Config
}

var _ conversation.Agent = (*AISDK)(nil)

// NewAISDK returns the agent at cfg.URL.
func NewAISDK(cfg Config) (*AISDK, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &AISDK{cfg: cfg}, nil
}

// Run plays the run's turns: a request, its stream stored as it comes, and when the
// stream asked for approvals, their decisions, then the next request with them, until
// a stream ends without asking.
func (a *AISDK) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	r := &aisdkRun{a: a, req: req, out: out, decided: map[string]bool{}}
	user := chat.Message{ID: uuid.Nil, RunID: &req.RunID, RequestID: req.RequestID, Role: chat.RoleUser, Kind: chat.KindText, Content: req.Content, Status: chat.MessageComplete}
	r.past = append(append([]chat.Message(nil), req.History...), user)
	if err := r.resume(ctx); err != nil {
		return err
	}
	for turn := 1; ; turn++ {
		pending, err := r.turn(ctx, turn)
		if err != nil {
			return err
		}
		if len(pending) == 0 {
			return r.endOpenCalls()
		}
		for _, p := range pending {
			d, err := conversation.WaitDecision(ctx, out, a.cfg.Clock, p.id, p.ch, a.expiry(p.asked))
			if err != nil {
				return err
			}
			r.decide(p.id, d.Approved)
		}
	}
}

// aisdkRun is one run's state: what the agent said so far, mirrored as stored
// messages, for the requests that follow.
type aisdkRun struct {
	a   *AISDK
	req conversation.Request
	out conversation.Emitter
	// past is the conversation before the run's answer: the history and the user's
	// message; mine the run's messages (the Checkpoint's, then what this process stored).
	past, mine []chat.Message
	// decided holds the calls whose decision the next request carries, by call id.
	decided map[string]bool
}

type pendingApproval struct {
	id    string
	ch    <-chan conversation.Decision
	asked time.Time
}

// expiry is when a call first asked at asked expires (zero: never).
func (a *AISDK) expiry(asked time.Time) time.Time {
	if a.cfg.ApprovalExpire <= 0 {
		return time.Time{}
	}
	if asked.IsZero() {
		asked = a.cfg.Clock.Now()
	}
	return asked.Add(a.cfg.ApprovalExpire)
}

// resume takes up a Checkpoint: its messages are the run's, a call that waits for a
// person waits again, and a call the agent was running when chatd died ends
// interrupted (chatd cannot know whether the agent finished it); a call approved but not
// yet answered by the agent is asked for again with its decision.
func (r *aisdkRun) resume(ctx context.Context) error {
	for _, m := range r.req.Checkpoint {
		r.mine = append(r.mine, m)
	}
	for i := range r.mine {
		t := r.mine[i].Tool
		if t == nil {
			continue
		}
		switch {
		case t.Status == chat.ToolAwaitingApproval:
			ch, err := r.out.AwaitDecision(t.CallID)
			if err != nil {
				return err
			}
			d, err := conversation.WaitDecision(ctx, r.out, r.a.cfg.Clock, t.CallID, ch, r.a.expiry(r.mine[i].CreatedAt))
			if err != nil {
				return err
			}
			r.decide(t.CallID, d.Approved)
		case t.Status == chat.ToolRunning && t.Decision != nil && t.Decision.Approved:
			r.decided[t.CallID] = true
		case t.Status == chat.ToolRunning:
			const why = "chatd stopped while the agent ran this call; whether it finished is unknown"
			if err := r.out.ToolEnd(t.CallID, conversation.ToolResult{Output: why, Interrupted: true}); err != nil {
				return err
			}
			t.Status, t.Output = chat.ToolInterrupted, strPtr(why)
		}
	}
	return nil
}

// decide records a decision for the next request.
func (r *aisdkRun) decide(callID string, approved bool) {
	r.decided[callID] = approved
	if t := r.tool(callID); t != nil {
		if approved {
			t.Status = chat.ToolRunning
		} else {
			t.Status = chat.ToolDenied
		}
	}
}

func (r *aisdkRun) tool(callID string) *chat.ToolCall {
	for i := len(r.mine) - 1; i >= 0; i-- {
		if t := r.mine[i].Tool; t != nil && t.CallID == callID {
			return t
		}
	}
	return nil
}

// endOpenCalls ends calls the agent started and never answered.
func (r *aisdkRun) endOpenCalls() error {
	for i := range r.mine {
		t := r.mine[i].Tool
		if t != nil && t.Status == chat.ToolRunning {
			if err := r.out.ToolEnd(t.CallID, conversation.ToolResult{Err: errors.New("the agent ended its answer without this call's result")}); err != nil {
				return err
			}
			t.Status = chat.ToolError
		}
	}
	return nil
}

// turn asks for one turn, again after a transient failure or a cut stream (with what
// was stored by then), and returns the approvals it asked for.
func (r *aisdkRun) turn(ctx context.Context, turn int) ([]pendingApproval, error) {
	for attempt := 1; ; attempt++ {
		pending, err := r.request(ctx, turn, attempt)
		if err == nil {
			return pending, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var again *retryable
		if !errors.As(err, &again) {
			return nil, err
		}
		if attempt > r.a.cfg.Retries {
			return nil, again.err
		}
		r.a.cfg.Logger.Warn().Err(again.err).Int("turn", turn).Int("attempt", attempt).Str("run_id", r.req.RunID.String()).Msg("agent turn asked again")
		if err := sleep(ctx, r.a.cfg.Clock, backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// retryable wraps a failure worth asking the turn again for.
type retryable struct{ err *conversation.Error }

func (e *retryable) Error() string { return e.err.Error() }

// request makes one request of a turn and stores its stream.
func (r *aisdkRun) request(ctx context.Context, turn, attempt int) ([]pendingApproval, error) {
	body, err := json.Marshal(map[string]any{"id": r.req.SessionID.String(), "messages": r.messages(), "trigger": "submit-message"})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var silent atomic.Bool
	idle := r.a.cfg.Clock.AfterFunc(r.a.cfg.Timeout, func() {
		silent.Store(true)
		cancel()
	})
	defer idle.Stop()
	hreq, err := http.NewRequestWithContext(rctx, http.MethodPost, r.a.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return nil, agentErr(CodeUnreachable, "CHATD_AGENT_URL: %v", err)
	}
	for k, v := range r.a.cfg.Headers {
		hreq.Header.Set(k, v)
	}
	for k, v := range r.a.cfg.RequestHeaders(r.req, turn, attempt) {
		hreq.Header[k] = v
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	timedOut := func() error {
		return agentErr(CodeTimeout, "the agent sent nothing for %s (CHATD_MODEL_TIMEOUT)", r.a.cfg.Timeout)
	}
	resp, err := r.a.cfg.Client.Do(hreq)
	if err != nil {
		if silent.Load() {
			return nil, timedOut()
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &retryable{unreachable(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		text := strings.TrimSpace(string(msg))
		if transient(resp.StatusCode) {
			return nil, &retryable{agentErr(CodeUnreachable, "the agent answered HTTP %d: %s", resp.StatusCode, text)}
		}
		return nil, agentErr(CodeBadResponse, "the agent answered HTTP %d: %s", resp.StatusCode, text)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return nil, agentErr(CodeBadResponse, "the agent answered %q, not a UI message stream (text/event-stream, toUIMessageStreamResponse())", ct)
	}
	s := &aisdkStream{r: r}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if len(line) > 0 {
			idle.Reset(r.a.cfg.Timeout)
		}
		if data, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data:"); ok {
			data = strings.TrimSpace(data)
			if data == "[DONE]" {
				break
			}
			if perr := s.chunk(data); perr != nil {
				return nil, perr
			}
			if s.finished {
				drain(br, resp.Body)
				break
			}
		}
		if err != nil {
			if silent.Load() {
				return nil, timedOut()
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if err := s.flush(); err != nil {
				return nil, err
			}
			if err == io.EOF {
				return nil, &retryable{agentErr(CodeBadResponse, "the agent's stream ended before its finish")}
			}
			return nil, &retryable{agentErr(CodeBadResponse, "the agent's stream broke: %v", err)}
		}
	}
	if err := s.flush(); err != nil {
		return nil, err
	}
	if !s.finished {
		return nil, &retryable{agentErr(CodeBadResponse, "the agent's stream ended before its finish")}
	}
	// The decisions it carried are the agent's now.
	for id := range r.decided {
		delete(r.decided, id)
	}
	return s.pending, nil
}

// drainTime bounds how long the rest of a finished stream is read.
const drainTime = 2 * time.Second

// drain reads what follows a stream's finish chunk ([DONE]) to the response's end, for up to
// drainTime and 64 KiB, so that the route sees its response end as it does with a
// browser rather than an abort: a route's req.signal then fires only for a stop.
func drain(br *bufio.Reader, body io.Closer) {
	t := time.AfterFunc(drainTime, func() { _ = body.Close() })
	defer t.Stop()
	for n := 0; n < 64<<10; {
		line, err := br.ReadString('\n')
		n += len(line)
		if err != nil {
			return
		}
	}
}

// messages are the request's: the conversation as UIMessages, the run's answer so far
// the last, with the decisions of calls that waited for a person as the SDK's client
// sends them (state approval-responded).
func (r *aisdkRun) messages() []map[string]any {
	all := append(append([]chat.Message(nil), r.past...), r.mine...)
	ui := aisdk.UIMessages(all, nil)
	run := r.req.RunID.String()
	for _, m := range ui {
		if m["id"] != run || m["role"] != "assistant" {
			continue
		}
		parts, _ := m["parts"].([]any)
		for _, p := range parts {
			part, ok := p.(map[string]any)
			if !ok {
				continue
			}
			id, _ := part["toolCallId"].(string)
			approved, ok := r.decided[id]
			if !ok {
				continue
			}
			delete(part, "output")
			delete(part, "errorText")
			part["state"] = "approval-responded"
			part["approval"] = map[string]any{"id": id, "approved": approved}
		}
	}
	return ui
}

// aisdkStream reads one response's chunks into the run.
type aisdkStream struct {
	r        *aisdkRun
	finished bool
	// held is a call whose input is complete and that is not stored yet: an approval
	// request may follow it (the call is then stored waiting), else it runs.
	held    *conversation.ToolCall
	pending []pendingApproval
}

type uiChunk struct {
	Type            string          `json:"type"`
	Delta           string          `json:"delta"`
	ToolCallID      string          `json:"toolCallId"`
	ToolName        string          `json:"toolName"`
	Input           json.RawMessage `json:"input"`
	Output          json.RawMessage `json:"output"`
	ErrorText       string          `json:"errorText"`
	ApprovalID      string          `json:"approvalId"`
	MessageMetadata json.RawMessage `json:"messageMetadata"`
}

func (s *aisdkStream) chunk(data string) error {
	var c uiChunk
	if err := json.Unmarshal([]byte(data), &c); err != nil || c.Type == "" {
		return agentErr(CodeBadResponse, "the agent's stream has a chunk that is not the UI message stream's: %.200q", data)
	}
	if c.Type != "tool-approval-request" {
		if err := s.flush(); err != nil {
			return err
		}
	}
	r := s.r
	switch c.Type {
	case "text-delta":
		if c.Delta == "" {
			return nil
		}
		if err := r.out.Text(c.Delta); err != nil {
			return err
		}
		r.mirrorText(chat.KindText, c.Delta)
	case "reasoning-delta":
		if c.Delta == "" {
			return nil
		}
		if err := r.out.Reasoning(c.Delta); err != nil {
			return err
		}
		r.mirrorText(chat.KindReasoning, c.Delta)
	case "reasoning-end":
		if err := r.out.EndReasoning(nil); err != nil {
			return err
		}
		r.close()
	case "text-end", "finish-step":
		r.close()
	case "tool-input-available":
		input := c.Input
		if len(input) == 0 || string(input) == "null" {
			input = json.RawMessage(`{}`)
		}
		s.held = &conversation.ToolCall{ID: c.ToolCallID, Name: c.ToolName, Input: input}
	case "tool-input-error":
		call := conversation.ToolCall{ID: c.ToolCallID, Name: c.ToolName, Input: c.Input}
		if err := r.start(call); err != nil {
			return err
		}
		return r.end(c.ToolCallID, conversation.ToolResult{Err: errors.New(orText(c.ErrorText, "the tool's input was not valid"))})
	case "tool-approval-request":
		if s.held == nil || s.held.ID != c.ToolCallID {
			if err := s.flush(); err != nil {
				return err
			}
			return agentErr(CodeBadResponse, "the agent asked to approve call %q, which its stream did not make", c.ToolCallID)
		}
		call := *s.held
		s.held = nil
		ch, err := r.out.AwaitApproval(call)
		if err != nil {
			return err
		}
		r.close()
		r.mine = append(r.mine, chat.Message{RunID: &r.req.RunID, Role: chat.RoleTool, Kind: chat.KindText, Status: chat.MessageComplete,
			Tool: &chat.ToolCall{CallID: call.ID, Name: call.Name, Input: call.Input, Status: chat.ToolAwaitingApproval}})
		s.pending = append(s.pending, pendingApproval{id: call.ID, ch: ch, asked: r.a.cfg.Clock.Now()})
	case "tool-output-available":
		out := string(c.Output)
		var str string
		if json.Unmarshal(c.Output, &str) == nil {
			out = str
		}
		return r.end(c.ToolCallID, conversation.ToolResult{Output: out})
	case "tool-output-error":
		return r.end(c.ToolCallID, conversation.ToolResult{Err: errors.New(orText(c.ErrorText, "the tool failed"))})
	case "tool-output-denied":
		// chatd ended the call denied when the person decided.
	case "finish", "message-metadata":
		if err := r.usage(c.MessageMetadata); err != nil {
			return err
		}
		if c.Type == "finish" {
			r.close()
			s.finished = true
		}
	case "error":
		return agentErr(CodeAgent, "%s", orText(c.ErrorText, "the agent failed"))
	case "abort":
		return agentErr(CodeAgent, "the agent aborted its answer")
	default:
		// start, start-step, text-start, reasoning-start, tool-input-start and -delta,
		// sources, files, data parts: nothing to store.
	}
	return nil
}

// flush stores a held call as running: no approval request followed it.
func (s *aisdkStream) flush() error {
	if s.held == nil {
		return nil
	}
	call := *s.held
	s.held = nil
	return s.r.start(call)
}

// start stores a call the agent runs itself.
func (r *aisdkRun) start(call conversation.ToolCall) error {
	if err := r.out.ToolStart(call); err != nil {
		return err
	}
	r.close()
	r.mine = append(r.mine, chat.Message{RunID: &r.req.RunID, Role: chat.RoleTool, Kind: chat.KindText, Status: chat.MessageComplete,
		Tool: &chat.ToolCall{CallID: call.ID, Name: call.Name, Input: call.Input, Status: chat.ToolRunning}})
	return nil
}

// end stores a call's result; a call the stream did not start (one approved in an
// earlier turn) is ended all the same.
func (r *aisdkRun) end(callID string, res conversation.ToolResult) error {
	t := r.tool(callID)
	if t == nil {
		return agentErr(CodeBadResponse, "the agent sent the result of call %q, which its stream did not make", callID)
	}
	if t.Status != chat.ToolRunning {
		return nil // ended already (denied, interrupted)
	}
	if err := r.out.ToolEnd(callID, res); err != nil {
		return err
	}
	out := res.Output
	t.Status = chat.ToolOK
	if res.Err != nil {
		t.Status = chat.ToolError
		out = res.Err.Error()
	}
	t.Output = &out
	return nil
}

// usage reads {usage: {inputTokens, outputTokens}} from message metadata, when a route
// sends it (messageMetadata in toUIMessageStreamResponse).
func (r *aisdkRun) usage(meta json.RawMessage) error {
	if len(meta) == 0 {
		return nil
	}
	var m struct {
		Usage *struct {
			InputTokens  int64 `json:"inputTokens"`
			OutputTokens int64 `json:"outputTokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(meta, &m) != nil || m.Usage == nil {
		return nil
	}
	return r.out.Usage(conversation.Usage{InputTokens: m.Usage.InputTokens, OutputTokens: m.Usage.OutputTokens})
}

// mirrorText appends delta to the run's open segment of kind, or opens one.
func (r *aisdkRun) mirrorText(kind chat.MessageKind, delta string) {
	if n := len(r.mine); n > 0 {
		last := &r.mine[n-1]
		if last.Role == chat.RoleAssistant && last.Kind == kind && last.Status == chat.MessageStreaming {
			last.Content += delta
			return
		}
	}
	r.close()
	r.mine = append(r.mine, chat.Message{RunID: &r.req.RunID, Role: chat.RoleAssistant, Kind: kind, Content: delta, Status: chat.MessageStreaming})
}

// close marks the open segment complete in the mirror.
func (r *aisdkRun) close() {
	if n := len(r.mine); n > 0 && r.mine[n-1].Status == chat.MessageStreaming {
		r.mine[n-1].Status = chat.MessageComplete
	}
}

func orText(s, fallback string) string {
	if strings.TrimSpace(s) == "" {
		return fallback
	}
	return s
}

func strPtr(s string) *string { return &s }
