// Package anthropic is an agent.Model for Anthropic's Messages API, through the official
// SDK, streaming.
//
// It streams text, thinking (extended thinking, when a budget is configured) and tool_use
// blocks, assembling each call's input from its JSON fragments. Thinking blocks keep their
// signatures, and redacted thinking its data, so they go back to the API with the tool
// results as it requires. The SDK's own retries are off: the agent loop retries, and only
// while nothing has streamed. Errors, including error events mid-stream and overload,
// are classified for it.
//
// An answer that was cut off (agent.ModelRequest.Continue) is continued with a prefill:
// the request ends with the assistant message holding the text so far, and the model
// writes on from its last character. The API refuses a prefill that ends in white
// space, so that is trimmed off, and the answer's opening white space is dropped as far
// as it repeats it (agent.SkipRepeatedSpace): the user has it already. Extended
// thinking does not allow prefills; with a ThinkingBudget the cut-off message is sent
// whole and followed by a user message, agent.ContinueInstruction.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"unicode"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/chatd/chatd/agent"
)

// DefaultMaxTokens caps an answer when Config.MaxTokens is 0: the API requires a cap.
const DefaultMaxTokens = 8192

// Config configures the provider.
type Config struct {
	// BaseURL of the API; empty for https://api.anthropic.com.
	BaseURL string
	// APIKey, sent as x-api-key.
	APIKey string
	// Model name, e.g. claude-sonnet-4-5. Required.
	Model string
	// MaxTokens caps each answer, thinking included; 0 means DefaultMaxTokens.
	MaxTokens int64
	// ThinkingBudget turns extended thinking on with this many tokens (at least 1024,
	// less than MaxTokens); 0 leaves it off.
	ThinkingBudget int64
	// HTTPClient, for tests and proxies.
	HTTPClient *http.Client
}

// Model is the Anthropic provider.
type Model struct {
	cfg    Config
	client anthropic.Client
}

var _ agent.Model = (*Model)(nil)

// New returns the provider. The SDK's environment defaults (ANTHROPIC_* variables read
// by the SDK itself) are not used: Config is the whole configuration.
func New(cfg Config) (*Model, error) {
	if cfg.Model == "" {
		return nil, errors.New("anthropic: the model name is required (CHATD_MODEL)")
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = DefaultMaxTokens
	}
	if cfg.MaxTokens < 0 {
		return nil, errors.New("anthropic: the answer cap (CHATD_MAX_TOKENS) must be positive")
	}
	if cfg.ThinkingBudget != 0 && (cfg.ThinkingBudget < 1024 || cfg.ThinkingBudget >= cfg.MaxTokens) {
		return nil, errors.New("anthropic: the thinking budget (CHATD_THINKING_BUDGET) must be at least 1024 and less than the answer cap (CHATD_MAX_TOKENS)")
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithMaxRetries(0),
		option.WithAPIKey(cfg.APIKey),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Model{cfg: cfg, client: anthropic.NewClient(opts...)}, nil
}

// Stream makes one streaming Messages call.
func (m *Model) Stream(ctx context.Context, req agent.ModelRequest, emit func(agent.ModelEvent) error) error {
	params, err := m.params(req)
	if err != nil {
		return &agent.ModelError{Code: agent.CodeModelRejected, Message: err.Error()}
	}
	if req.Continue != "" {
		emit = agent.SkipRepeatedSpace(req.Continue, emit)
	}
	// Whatever arrives counts for the loop's idle timeout, though a tool call's input
	// or a ping makes no event. A keep-alive's error is the run's end, which the next
	// event or ctx reports.
	alive := func() { _ = emit(agent.ModelEvent{Kind: agent.EventKeepAlive}) }
	stream := m.client.Messages.NewStreaming(ctx, params, option.WithMiddleware(agent.KeepAliveMiddleware(alive)))
	defer stream.Close()

	// The block being streamed, by kind.
	var (
		kind      string // text, thinking, redacted_thinking, tool_use, or another we skip
		call      agent.ToolCall
		input     strings.Builder
		signature string
		redacted  string
		usage     agent.Usage
		gotUsage  bool
		stop      anthropic.StopReason
		stopped   bool // message_stop arrived
	)
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "message_start":
			u := ev.Message.Usage
			usage.InputTokens = u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
			usage.OutputTokens = u.OutputTokens
			gotUsage = true
		case "content_block_start":
			b := ev.ContentBlock
			kind, signature, redacted = b.Type, "", ""
			input.Reset()
			switch b.Type {
			case "tool_use":
				call = agent.ToolCall{ID: b.ID, Name: b.Name}
			case "redacted_thinking":
				redacted = b.Data
			case "text":
				if b.Text != "" {
					if err := emit(agent.ModelEvent{Kind: agent.EventText, Text: b.Text}); err != nil {
						return err
					}
				}
			case "thinking":
				if b.Thinking != "" {
					if err := emit(agent.ModelEvent{Kind: agent.EventReasoning, Reasoning: agent.Reasoning{Text: b.Thinking}}); err != nil {
						return err
					}
				}
			}
		case "content_block_delta":
			d := ev.Delta
			var err error
			switch d.Type {
			case "text_delta":
				if d.Text != "" {
					err = emit(agent.ModelEvent{Kind: agent.EventText, Text: d.Text})
				}
			case "thinking_delta":
				if d.Thinking != "" {
					err = emit(agent.ModelEvent{Kind: agent.EventReasoning, Reasoning: agent.Reasoning{Text: d.Thinking}})
				}
			case "signature_delta":
				signature += d.Signature
			case "input_json_delta":
				input.WriteString(d.PartialJSON)
			}
			if err != nil {
				return err
			}
		case "content_block_stop":
			var err error
			switch kind {
			case "thinking":
				err = emit(agent.ModelEvent{Kind: agent.EventReasoningEnd, Reasoning: agent.Reasoning{Signature: signature}})
			case "redacted_thinking":
				err = emit(agent.ModelEvent{Kind: agent.EventReasoningEnd, Reasoning: agent.Reasoning{Redacted: redacted}})
			case "tool_use":
				call.Input = json.RawMessage(input.String())
				if strings.TrimSpace(input.String()) == "" {
					call.Input = json.RawMessage("{}")
				}
				err = emit(agent.ModelEvent{Kind: agent.EventToolCall, ToolCall: call})
			}
			kind = ""
			if err != nil {
				return err
			}
		case "message_delta":
			if ev.Delta.StopReason != "" {
				stop = ev.Delta.StopReason
			}
			// The counts are cumulative; input is repeated by newer API versions.
			u := ev.Usage
			if in := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens; in > 0 {
				usage.InputTokens = in
			}
			if u.OutputTokens > 0 {
				usage.OutputTokens = u.OutputTokens
			}
			gotUsage = true
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return classify(ctx, err)
	}
	if !stopped {
		return &agent.ModelError{Code: agent.CodeStreamCut, Message: "the model's answer broke off before it finished", Transient: true}
	}
	switch stop {
	case anthropic.StopReasonRefusal:
		return &agent.ModelError{Code: agent.CodeContentFilter, Message: "the model declined to answer under its content policy"}
	case anthropic.StopReasonModelContextWindowExceeded:
		return &agent.ModelError{Code: agent.CodeContextTooLong, Message: "the conversation is too long for the model: lower CHATD_CONTEXT_TOKENS"}
	}
	if gotUsage {
		return emit(agent.ModelEvent{Kind: agent.EventUsage, Usage: usage})
	}
	return nil
}

func (m *Model) params(req agent.ModelRequest) (anthropic.MessageNewParams, error) {
	p := anthropic.MessageNewParams{
		Model:     anthropic.Model(m.cfg.Model),
		MaxTokens: m.cfg.MaxTokens,
	}
	if m.cfg.ThinkingBudget > 0 {
		p.Thinking = anthropic.ThinkingConfigParamOfEnabled(m.cfg.ThinkingBudget)
	}
	if strings.TrimSpace(req.System) != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	var results []anthropic.ContentBlockParamUnion // tool results waiting for their user message
	flush := func() {
		if len(results) > 0 {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(results...))
			results = nil
		}
	}
	for i, msg := range req.Messages {
		switch {
		case msg.Role == agent.RoleUser:
			flush()
			if strings.TrimSpace(msg.Text) == "" {
				continue // the API refuses empty text blocks
			}
			p.Messages = append(p.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(msg.Text)))
		case msg.Role == agent.RoleAssistant && req.Continue != "" && i == len(req.Messages)-1 && m.cfg.ThinkingBudget == 0:
			flush()
			// The prefill: only the text (a thinking block there would be refused), and
			// none of its trailing white space. Nothing at all for white space alone:
			// the model then answers afresh, and SkipRepeatedSpace keeps it from
			// repeating that white space.
			if prefill := strings.TrimRightFunc(msg.Text, unicode.IsSpace); prefill != "" {
				p.Messages = append(p.Messages, anthropic.NewAssistantMessage(anthropic.NewTextBlock(prefill)))
			}
		case msg.Role == agent.RoleAssistant:
			flush()
			var blocks []anthropic.ContentBlockParamUnion
			for _, r := range msg.Reasoning {
				// Only blocks the API signed can go back: an unsigned one (cut off, or
				// from another provider) would be refused.
				switch {
				case r.Redacted != "":
					blocks = append(blocks, anthropic.NewRedactedThinkingBlock(r.Redacted))
				case r.Signature != "":
					blocks = append(blocks, anthropic.NewThinkingBlock(r.Signature, r.Text))
				}
			}
			if strings.TrimSpace(msg.Text) != "" {
				blocks = append(blocks, anthropic.NewTextBlock(msg.Text))
			}
			for _, c := range msg.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, toolInput(c.Input), c.Name))
			}
			if len(blocks) == 0 {
				continue
			}
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(blocks...))
			if req.Continue != "" && i == len(req.Messages)-1 {
				// Thinking allows no prefill: ask for the rest instead.
				p.Messages = append(p.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(agent.ContinueInstruction)))
			}
		case msg.Role == agent.RoleTool:
			block := anthropic.NewToolResultBlock(msg.ToolCallID, msg.Result, msg.IsError)
			if strings.TrimSpace(msg.Result) == "" {
				// A tool that printed nothing: the API refuses empty text blocks, and
				// a tool_result's content is optional.
				block.OfToolResult.Content = nil
			}
			results = append(results, block)
		}
	}
	flush()
	for _, t := range req.Tools {
		var schema struct {
			Properties any      `json:"properties"`
			Required   []string `json:"required"`
		}
		var extra map[string]any
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
			return p, errors.New("tool " + t.Name + ": input schema: " + err.Error())
		}
		if err := json.Unmarshal(t.InputSchema, &extra); err != nil {
			return p, errors.New("tool " + t.Name + ": input schema: " + err.Error())
		}
		for _, k := range []string{"type", "properties", "required"} {
			delete(extra, k)
		}
		tool := anthropic.ToolParam{
			Name:        t.Name,
			InputSchema: anthropic.ToolInputSchemaParam{Properties: schema.Properties, Required: schema.Required, ExtraFields: extra},
		}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return p, nil
}

// toolInput is a stored call's input as the API takes it: an object. Input the model
// garbled was stored as a JSON string of the raw text; it goes back wrapped in an object.
func toolInput(in json.RawMessage) any {
	var obj map[string]json.RawMessage
	if json.Unmarshal(in, &obj) == nil && obj != nil {
		return in
	}
	var raw any
	_ = json.Unmarshal(in, &raw)
	return map[string]any{"invalid_input": raw}
}

// classify maps the SDK's errors onto the loop's: HTTP answers and error events (which
// the SDK turns into the same *Error, with the stream's 200 status) by status and type,
// connection trouble as transient, a garbled event as a bad response.
func classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var apiErr *anthropic.Error
	if errors.As(err, &apiErr) {
		kind, msg := errorBody(apiErr.RawJSON())
		if kind == "" {
			kind = string(apiErr.Type())
		}
		status := apiErr.StatusCode
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		if status < 400 { // an error event in a stream that had started fine
			status = statusOf(kind)
		}
		return agent.StatusError(status, h, kind, msg, err)
	}
	if e := agent.TransportError(ctx, err); e != nil {
		return e
	}
	if s := err.Error(); strings.HasPrefix(s, "received error while streaming: ") {
		// An error event whose body the SDK could not read as an error.
		kind, msg := errorBody(strings.TrimPrefix(s, "received error while streaming: "))
		return agent.StatusError(statusOf(kind), nil, kind, msg, err)
	}
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntax) || errors.As(err, &typeErr) || strings.Contains(err.Error(), "invalid character") {
		return &agent.ModelError{Code: agent.CodeBadResponse, Message: "the model provider sent a malformed answer", Err: err}
	}
	return &agent.ModelError{Code: agent.CodeModelUnreachable, Message: "the model call failed", Transient: true, Err: err}
}

// errorBody reads {"type":"error","error":{"type":…,"message":…}}.
func errorBody(raw string) (kind, message string) {
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(raw), &body)
	return body.Error.Type, body.Error.Message
}

// statusOf is the HTTP status an error type stands for, as Anthropic documents them.
func statusOf(kind string) int {
	switch kind {
	case "invalid_request_error":
		return http.StatusBadRequest
	case "authentication_error":
		return http.StatusUnauthorized
	case "permission_error":
		return http.StatusForbidden
	case "not_found_error":
		return http.StatusNotFound
	case "request_too_large":
		return http.StatusRequestEntityTooLarge
	case "rate_limit_error":
		return http.StatusTooManyRequests
	case "overloaded_error":
		return 529
	default: // api_error and anything new: the server's trouble
		return http.StatusInternalServerError
	}
}
