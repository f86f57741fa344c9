package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync/atomic"
	"testing"
)

// ToolCaller is an OpenAI-compatible model provider (chat completions, streamed) that
// calls the tools a test names in its messages, for tests of tools through the real
// agent loop: a user message "call <tool> <json input>" gets a call of that tool with
// that input; a tool result gets the text "<tool> said: <result>" and ends the run; any
// other message gets "ok". Point chatd at it with CHATD_AGENT=openai and
// OPENAI_BASE_URL=<URL>/v1.
type ToolCaller struct {
	*httptest.Server
	calls atomic.Int64
}

var callPattern = regexp.MustCompile(`^call (\S+) (\{.*\})\s*$`)

// NewToolCaller starts one; it is closed when the test ends.
func NewToolCaller(t testing.TB) *ToolCaller {
	tc := &ToolCaller{}
	tc.Server = httptest.NewServer(http.HandlerFunc(tc.serve))
	t.Cleanup(tc.Close)
	return tc
}

// Requests is how many model calls it answered.
func (tc *ToolCaller) Requests() int64 { return tc.calls.Load() }

func (tc *ToolCaller) serve(w http.ResponseWriter, r *http.Request) {
	n := tc.calls.Add(1)
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			Name       string          `json:"name"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	last := req.Messages[len(req.Messages)-1]
	text := contentText(last.Content)
	var chunks []string
	switch {
	case last.Role == "user" && callPattern.MatchString(text):
		m := callPattern.FindStringSubmatch(text)
		name, _ := json.Marshal(m[1])
		args, _ := json.Marshal(m[2])
		id := fmt.Sprintf(`"call_tc_%d"`, n)
		chunks = []string{
			chunk(`{"role":"assistant","content":""}`, ""),
			chunk(`{"tool_calls":[{"index":0,"id":`+id+`,"type":"function","function":{"name":`+string(name)+`,"arguments":""}}]}`, ""),
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":`+string(args)+`}}]}`, ""),
			chunk(`{}`, "tool_calls"),
		}
	case last.Role == "tool":
		tool := "the tool"
		for i := len(req.Messages) - 2; i >= 0; i-- {
			for _, c := range req.Messages[i].ToolCalls {
				if c.ID == last.ToolCallID {
					tool = c.Function.Name
				}
			}
		}
		said, _ := json.Marshal(tool + " said: " + text)
		chunks = []string{chunk(`{"role":"assistant","content":`+string(said)+`}`, ""), chunk(`{}`, "stop")}
	default:
		chunks = []string{chunk(`{"role":"assistant","content":"ok"}`, ""), chunk(`{}`, "stop")}
	}
	usage := `{"id":"chatcmpl-tc","object":"chat.completion.chunk","created":1700000000,"model":"tool-caller","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`
	chunks = append(chunks, usage, "[DONE]")
	events := make([]Event, len(chunks))
	for i, c := range chunks {
		events[i] = Event{Data: c}
	}
	SSE(events...)(w, r)
}

func chunk(delta, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-tc","object":"chat.completion.chunk","created":1700000000,"model":"tool-caller","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

// contentText is a message's content as text: a string, or the text of its parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	out := ""
	for _, p := range parts {
		out += p.Text
	}
	return out
}
