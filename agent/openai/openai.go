// Package openai is an agent.Model for OpenAI's Chat Completions API and the many servers
// that speak it (Ollama, vLLM, llama.cpp's server, LM Studio, OpenRouter, …), through the
// official SDK, streaming.
//
// It streams text, tool calls (assembled from the fragments they arrive in), reasoning
// where the server sends it (reasoning_content or reasoning in the delta), and usage (asked
// for with stream_options.include_usage). Reasoning goes back as reasoning_content on
// assistant messages that called tools, as DeepSeek's thinking mode requires; elsewhere
// it stays out. The SDK's own retries are off: the agent loop retries, and only while
// nothing has streamed. Errors are classified for it.
//
// An answer that was cut off (agent.ModelRequest.Continue) goes back as the assistant
// message it is, followed by a user message, agent.ContinueInstruction, that asks the
// model to write the rest without repeating anything: Chat Completions has no way to
// make a model continue its own message. Servers that do (vLLM, llama.cpp's server)
// can with Config.ContinueFinalMessage. Either way the answer's opening white space is
// dropped as far as it repeats the cut-off text's trailing white space
// (agent.SkipRepeatedSpace).
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/chatd/chatd/agent"
)

// Config configures the provider.
type Config struct {
	// BaseURL of the API, e.g. http://localhost:11434/v1 for Ollama. Empty for OpenAI.
	BaseURL string
	// APIKey; local servers usually take any value.
	APIKey string
	// Model name, e.g. gpt-4.1-mini or llama3.2. Required.
	Model string
	// MaxTokens caps each answer (max_completion_tokens); 0 leaves it to the server.
	MaxTokens int64
	// HTTPClient, for tests and proxies.
	HTTPClient *http.Client
	// ContinueFinalMessage continues a cut-off answer (agent.ModelRequest.Continue) the
	// way vLLM and llama.cpp's server can: the request ends with the cut-off assistant
	// message and carries "continue_final_message": true and "add_generation_prompt":
	// false, so the model writes on from its last token. Leave it off for servers that
	// do not know these fields (OpenAI's among them): the cut-off message is then
	// followed by agent.ContinueInstruction.
	ContinueFinalMessage bool
}

// Model is the OpenAI-compatible provider.
type Model struct {
	cfg         Config
	completions openai.ChatCompletionService
}

var _ agent.Model = (*Model)(nil)

// New returns the provider. The SDK's environment defaults (OPENAI_BASE_URL,
// OPENAI_ORG_ID, OPENAI_PROJECT_ID, OPENAI_CUSTOM_HEADERS, … read by the SDK itself) are
// not used: Config is the whole configuration.
func New(cfg Config) (*Model, error) {
	if cfg.Model == "" {
		return nil, errors.New("openai: the model name is required (CHATD_MODEL)")
	}
	// openai.NewClient always applies the environment (this SDK has no
	// WithoutEnvironmentDefaults option), and an OPENAI_BASE_URL that is set but empty,
	// as docker-compose passes an unset variable, became an empty base URL. The service
	// built on its own starts from nothing: only the production base URL as the default.
	opts := []option.RequestOption{option.WithEnvironmentProduction(), option.WithMaxRetries(0)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	key := cfg.APIKey
	if key == "" {
		key = "unused" // local servers accept any; OpenAI answers 401, which says what to fix
	}
	opts = append(opts, option.WithAPIKey(key))
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Model{cfg: cfg, completions: openai.NewChatCompletionService(opts...)}, nil
}

// Stream makes one streaming chat completion.
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
	stream := m.completions.NewStreaming(ctx, params, option.WithMiddleware(agent.KeepAliveMiddleware(alive)))
	defer stream.Close()

	calls := toolCalls{byIndex: map[int64]*toolCall{}}
	var (
		usage        agent.Usage
		gotUsage     bool
		finish       string
		reasoningOn  bool
		endReasoning = func() error {
			if !reasoningOn {
				return nil
			}
			reasoningOn = false
			return emit(agent.ModelEvent{Kind: agent.EventReasoningEnd})
		}
	)
	for stream.Next() {
		chunk := stream.Current()
		if chunk.Usage.PromptTokens > 0 || chunk.Usage.CompletionTokens > 0 {
			usage = agent.Usage{InputTokens: chunk.Usage.PromptTokens, OutputTokens: chunk.Usage.CompletionTokens}
			gotUsage = true
		}
		for _, choice := range chunk.Choices {
			if choice.Index != 0 {
				continue
			}
			d := choice.Delta
			if r := reasoning(d); r != "" {
				reasoningOn = true
				if err := emit(agent.ModelEvent{Kind: agent.EventReasoning, Reasoning: agent.Reasoning{Text: r}}); err != nil {
					return err
				}
			}
			for _, text := range []string{d.Content, d.Refusal} {
				if text == "" {
					continue
				}
				if err := endReasoning(); err != nil {
					return err
				}
				if err := emit(agent.ModelEvent{Kind: agent.EventText, Text: text}); err != nil {
					return err
				}
			}
			for _, tc := range d.ToolCalls {
				calls.add(tc)
			}
			if choice.FinishReason != "" {
				finish = choice.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		return classify(ctx, err)
	}
	if finish == "" {
		return &agent.ModelError{Code: agent.CodeStreamCut, Message: "the model's answer broke off before it finished", Transient: true}
	}
	if finish == "content_filter" {
		return &agent.ModelError{Code: agent.CodeContentFilter, Message: "the model provider stopped the answer under its content policy"}
	}
	if err := endReasoning(); err != nil {
		return err
	}
	for _, c := range calls.calls {
		args := json.RawMessage(c.args.String())
		if len(strings.TrimSpace(string(args))) == 0 {
			args = json.RawMessage("{}")
		}
		if err := emit(agent.ModelEvent{Kind: agent.EventToolCall, ToolCall: agent.ToolCall{ID: c.id, Name: c.name, Input: args}}); err != nil {
			return err
		}
	}
	if gotUsage {
		return emit(agent.ModelEvent{Kind: agent.EventUsage, Usage: usage})
	}
	return nil
}

// toolCall is one call of a response, as far as its fragments have come.
type toolCall struct {
	id, name string
	args     strings.Builder
}

// toolCalls assembles a response's tool calls from the fragments they arrive in.
type toolCalls struct {
	calls   []*toolCall         // in the order they began
	byIndex map[int64]*toolCall // the call each index continues
}

// add takes one fragment. A fragment continues the call at its index, unless it carries
// an id other than that call's: Ollama sends every call of a parallel batch whole, each
// with its own id and all at index 0. A fragment without an index continues the latest
// call, or begins one when its id is new.
func (t *toolCalls) add(tc openai.ChatCompletionChunkChoiceDeltaToolCall) {
	hasIndex := tc.JSON.Index.Valid()
	var c *toolCall
	switch {
	case hasIndex:
		c = t.byIndex[tc.Index]
	case len(t.calls) > 0:
		c = t.calls[len(t.calls)-1]
	}
	if c == nil || (tc.ID != "" && c.id != "" && tc.ID != c.id) {
		c = &toolCall{}
		t.calls = append(t.calls, c)
	}
	if hasIndex {
		t.byIndex[tc.Index] = c
	}
	if tc.ID != "" {
		c.id = tc.ID
	}
	c.name += tc.Function.Name // names may come in pieces too
	c.args.WriteString(tc.Function.Arguments)
}

// reasoning reads the reasoning some servers put in the delta: reasoning_content
// (DeepSeek, vLLM) or reasoning (OpenRouter, Ollama).
func reasoning(d openai.ChatCompletionChunkChoiceDelta) string {
	for _, key := range []string{"reasoning_content", "reasoning"} {
		// Fields the SDK does not know are never Valid: read the raw JSON.
		var s string
		if json.Unmarshal([]byte(d.JSON.ExtraFields[key].Raw()), &s) == nil && s != "" {
			return s
		}
	}
	return ""
}

func (m *Model) params(req agent.ModelRequest) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{
		Model:         shared.ChatModel(m.cfg.Model),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	if m.cfg.MaxTokens > 0 {
		p.MaxCompletionTokens = openai.Int(m.cfg.MaxTokens)
	}
	if req.System != "" {
		p.Messages = append(p.Messages, openai.SystemMessage(req.System))
	}
	for _, msg := range req.Messages {
		switch msg.Role {
		case agent.RoleUser:
			p.Messages = append(p.Messages, openai.UserMessage(msg.Text))
		case agent.RoleAssistant:
			a := openai.ChatCompletionAssistantMessageParam{}
			if msg.Text != "" {
				a.Content.OfString = param.NewOpt(msg.Text)
			}
			for _, c := range msg.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: arguments(c.Input)},
					},
				})
			}
			if msg.Text == "" && len(a.ToolCalls) == 0 {
				continue // reasoning only: nothing to send
			}
			if r := reasoningText(msg.Reasoning); r != "" && len(a.ToolCalls) > 0 {
				// DeepSeek's thinking mode refuses (400) an assistant message with tool
				// calls that lacks its reasoning_content. Reasoning text is only there
				// when the server sent some; messages without calls go without, as
				// DeepSeek wants them.
				a.SetExtraFields(map[string]any{"reasoning_content": r})
			}
			p.Messages = append(p.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		case agent.RoleTool:
			p.Messages = append(p.Messages, openai.ToolMessage(msg.Result, msg.ToolCallID))
		}
	}
	if n := len(req.Messages); req.Continue != "" && n > 0 && req.Messages[n-1].Role == agent.RoleAssistant {
		if m.cfg.ContinueFinalMessage {
			// The two go together: vLLM and llama.cpp refuse continue_final_message
			// with a generation prompt, which would open a new message.
			p.SetExtraFields(map[string]any{"continue_final_message": true, "add_generation_prompt": false})
		} else {
			p.Messages = append(p.Messages, openai.UserMessage(agent.ContinueInstruction))
		}
	}
	for _, t := range req.Tools {
		var schema map[string]any
		if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
			return p, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        t.Name,
			Description: openai.String(t.Description),
			Parameters:  shared.FunctionParameters(schema),
		}))
	}
	return p, nil
}

// reasoningText joins the text of a message's reasoning blocks.
func reasoningText(blocks []agent.Reasoning) string {
	var parts []string
	for _, b := range blocks {
		if b.Text != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// arguments is a stored call's input as the API takes it: JSON text. Input the model
// garbled was stored as a JSON string of the raw text; that text goes back as it came.
func arguments(in json.RawMessage) string {
	var raw string
	if json.Unmarshal(in, &raw) == nil {
		return raw
	}
	return string(in)
}

// classify maps the SDK's errors onto the loop's: HTTP answers by status, an error event
// in the stream by its type, connection trouble as transient, a garbled chunk as a bad
// response.
func classify(ctx context.Context, err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		var h http.Header
		if apiErr.Response != nil {
			h = apiErr.Response.Header
		}
		return agent.StatusError(apiErr.StatusCode, h, apiErr.Type+" "+apiErr.Code, apiErr.Message, err)
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		var body struct {
			Error struct {
				Message string          `json:"message"`
				Type    string          `json:"type"`
				Code    json.RawMessage `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(streamErr.Event.Data, &body)
		kind := body.Error.Type
		var code string
		if json.Unmarshal(body.Error.Code, &code) == nil {
			kind += " " + code
		}
		// An error in the middle of the stream is the server's own trouble, unless it
		// says otherwise: with an HTTP status for a code (vLLM, OpenRouter), or by
		// saying the request was wrong.
		status := http.StatusInternalServerError
		var n int
		switch {
		case json.Unmarshal(body.Error.Code, &n) == nil && n >= 400 && n <= 599:
			status = n
		case strings.Contains(kind, "invalid_request"):
			status = http.StatusBadRequest
		}
		return agent.StatusError(status, nil, kind, body.Error.Message, err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if e := agent.TransportError(ctx, err); e != nil {
		return e
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) || strings.Contains(err.Error(), "invalid character") {
		return &agent.ModelError{Code: agent.CodeBadResponse, Message: "the model provider sent a malformed answer", Err: err}
	}
	return &agent.ModelError{Code: agent.CodeModelUnreachable, Message: "the model call failed", Transient: true, Err: err}
}
