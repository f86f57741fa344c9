package aisdk

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// RandomRun is a run's events as an actor publishes them, drawn from rng: text and
// reasoning segments of random deltas (any Unicode, quotes, newlines, "data:" lines),
// tool calls that end ok, with an error or denied, some after an approval, progress
// reports (transient data-progress parts), and an end
// (done, cancelled or failed), optionally seen by a stream that joined part way (a
// snapshot). It returns the stream chatd sends for it, and the text and reasoning the
// SDK must assemble from it: the conformance corpus the JavaScript tests parse with the
// SDK's own parser (internal/gencorpus).
func RandomRun(rng *rand.Rand) (stream string, text, reasoning []string) {
	run := uuid.New()
	enc := newEncoder(run)
	var out []byte
	emit := func(ev conversation.Event) { out = append(out, enc.event(&ev)...) }
	emit(conversation.Event{Type: conversation.EventChatStarted, RunID: run})
	for range 1 + rng.IntN(5) {
		switch rng.IntN(4) {
		case 0, 1:
			kind := chat.KindText
			if rng.IntN(3) == 0 {
				kind = chat.KindReasoning
			}
			m := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleAssistant, Kind: kind, Status: chat.MessageStreaming}
			emit(conversation.Event{Type: conversation.EventSegmentStarted, RunID: run, Message: &m})
			var whole string
			for range rng.IntN(8) {
				d := randomText(rng)
				whole += d
				emit(conversation.Event{Type: conversation.EventDelta, RunID: run, MessageID: m.ID, Text: d})
			}
			emit(conversation.Event{Type: conversation.EventSegmentEnded, RunID: run, MessageID: m.ID})
			if kind == chat.KindReasoning {
				reasoning = append(reasoning, whole)
			} else {
				text = append(text, whole)
			}
		case 2:
			call := fmt.Sprintf("call_%d", rng.IntN(1000))
			input, _ := json.Marshal(map[string]string{"command": randomText(rng)})
			m := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleTool, Status: chat.MessageStreaming,
				Tool: &chat.ToolCall{CallID: call, Name: "shell", Input: input, Status: chat.ToolRunning}}
			if rng.IntN(2) == 0 {
				m.Tool.Status = chat.ToolAwaitingApproval
			}
			emit(conversation.Event{Type: conversation.EventToolStart, RunID: run, Message: &m})
			out1 := randomText(rng)
			if rng.IntN(2) == 0 {
				emit(conversation.Event{Type: conversation.EventToolOutput, RunID: run, MessageID: m.ID, Text: out1})
			}
			end := m
			tool := *m.Tool
			end.Tool = &tool
			end.Tool.Output = &out1
			end.Tool.Status = []chat.ToolStatus{chat.ToolOK, chat.ToolError, chat.ToolDenied}[rng.IntN(3)]
			emit(conversation.Event{Type: conversation.EventToolEnd, RunID: run, Message: &end})
		case 3:
			of := 1 + rng.IntN(10)
			p := &chat.Progress{Step: rng.IntN(of + 1), Of: of, Label: randomText(rng)}
			emit(conversation.Event{Type: conversation.EventRunStatus, RunID: run, Run: &chat.Run{ID: run, Status: chat.RunRunning, Progress: p}})
		}
	}
	endType := []conversation.EventType{conversation.EventChatDone, conversation.EventChatCancelled, conversation.EventChatError}[rng.IntN(3)]
	emit(conversation.Event{Type: endType, RunID: run, Run: &chat.Run{ID: run, Error: &chat.ErrorInfo{Code: "x", Message: randomText(rng)}}})
	return string(out), text, reasoning
}

func randomText(rng *rand.Rand) string {
	pieces := []string{"a", " ", "é", "日本", "\"", "\\", "\n", "data: x", "\r\n", "[DONE]", "😀", "\u2028", "<b>", "{}"}
	var s string
	for range rng.IntN(6) {
		s += pieces[rng.IntN(len(pieces))]
	}
	return s
}
