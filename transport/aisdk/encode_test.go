package aisdk

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// chunksOf splits an encoded stream into its JSON chunks, checking the SSE framing.
func chunksOf(t testing.TB, stream string) (out []map[string]any, ended bool) {
	t.Helper()
	for _, ev := range strings.Split(strings.TrimSuffix(stream, "\n\n"), "\n\n") {
		if ev == "" {
			continue
		}
		require.True(t, strings.HasPrefix(ev, "data: "), "an event that is not one data line: %q", ev)
		data := strings.TrimPrefix(ev, "data: ")
		require.NotContains(t, data, "\n", "a data line holds a raw newline")
		if data == "[DONE]" {
			require.False(t, ended, "[DONE] twice")
			ended = true
			continue
		}
		require.False(t, ended, "a chunk after [DONE]")
		var c map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &c), data)
		out = append(out, c)
	}
	return out, ended
}

// A run joined part way (resume) is streamed from its start out of the snapshot: the
// stored text of a closed segment, the open one's text so far (left open for the live
// deltas), a finished tool call and a pending approval; then live events continue it.
func TestCatchUpStreamsTheRunFromItsStart(t *testing.T) {
	run := uuid.New()
	closed := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleAssistant, Kind: chat.KindText, Content: "first", Status: chat.MessageComplete}
	out := "it is noon"
	tool := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleTool, Status: chat.MessageComplete, Tool: &chat.ToolCall{CallID: "c1", Name: "clock", Input: json.RawMessage(`{}`), Output: &out, Status: chat.ToolOK}}
	ask := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleTool, Status: chat.MessageStreaming, Tool: &chat.ToolCall{CallID: "c2", Name: "shell", Input: json.RawMessage(`{"command":"ls"}`), Status: chat.ToolAwaitingApproval}}
	open := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleAssistant, Kind: chat.KindText, Content: "sec", Status: chat.MessageStreaming}
	user := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleUser, Content: "go"}
	enc := newEncoder(run)
	frames, err := enc.catchUp(conversation.CatchUp{Snapshot: &conversation.Snapshot{
		Messages:  []chat.Message{user, closed, tool, ask, open},
		ActiveRun: &chat.Run{ID: run, Status: chat.RunRunning},
	}})
	require.NoError(t, err)
	require.True(t, enc.active)
	live := enc.event(&conversation.Event{Type: conversation.EventDelta, RunID: run, MessageID: open.ID, Text: "ond"})
	live = append(live, enc.event(&conversation.Event{Type: conversation.EventSegmentEnded, RunID: run, MessageID: open.ID})...)
	live = append(live, enc.event(&conversation.Event{Type: conversation.EventChatDone, RunID: run})...)
	// Another run's event, or one after the end, is not this stream's.
	require.Empty(t, enc.event(&conversation.Event{Type: conversation.EventDelta, RunID: uuid.New(), Text: "x"}))
	chunks, ended := chunksOf(t, string(frames[0])+string(live))
	require.True(t, ended)
	var types []string
	for _, c := range chunks {
		types = append(types, c["type"].(string))
	}
	require.Equal(t, []string{
		"start", "start-step",
		"text-start", "text-delta", "text-end",
		"tool-input-start", "tool-input-available", "tool-output-available",
		"tool-input-start", "tool-input-available", "tool-approval-request",
		"text-start", "text-delta", // the open segment, so far
		"text-delta", "text-end", "finish-step", "finish",
	}, types)
	require.Equal(t, run.String(), chunks[0]["messageId"])
	require.Equal(t, "sec", chunks[12]["delta"])
	require.Equal(t, "ond", chunks[13]["delta"])
}

// An ended run seen by a late stream is the whole message and its end; a run that is not
// the snapshot's (another is active) gives nothing, so the resume endpoint says 204.
func TestCatchUpOfAnEndedOrOtherRun(t *testing.T) {
	run := uuid.New()
	enc := newEncoder(run)
	frames, err := enc.catchUp(conversation.CatchUp{Snapshot: &conversation.Snapshot{LastRun: &chat.Run{ID: run, Status: chat.RunCancelled}}})
	require.NoError(t, err)
	chunks, ended := chunksOf(t, string(frames[0]))
	require.True(t, ended)
	require.Equal(t, "abort", chunks[len(chunks)-1]["type"])
	require.False(t, enc.active)

	other := newEncoder(run)
	frames, err = other.catchUp(conversation.CatchUp{Snapshot: &conversation.Snapshot{ActiveRun: &chat.Run{ID: uuid.New()}}})
	require.NoError(t, err)
	require.Empty(t, frames)
	require.False(t, other.started)
}

// Random runs: every stream is one data line per chunk, valid JSON, [DONE] once at the
// end, and each text delta belongs to a part that was started and not yet ended. The
// JavaScript conformance test parses the same streams with the SDK itself.
func TestRandomRunsAreWellFormed(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		stream, _, _ := RandomRun(rng)
		chunks, ended := chunksOf(t, stream)
		require.True(t, ended)
		open := map[string]bool{}
		for _, c := range chunks {
			id, _ := c["id"].(string)
			switch c["type"] {
			case "text-start", "reasoning-start":
				open[id] = true
			case "text-delta", "reasoning-delta":
				require.True(t, open[id], "a delta of a part not started: %v", c)
			case "text-end", "reasoning-end":
				require.True(t, open[id])
				delete(open, id)
			}
		}
		require.Empty(t, open, "parts left open at the end")
	}
}

func FuzzEncodeDelta(f *testing.F) {
	f.Add("hello")
	f.Add("data: [DONE]\n\n")
	f.Add("\u2028\x00\xff")
	f.Fuzz(func(t *testing.T, text string) {
		run, seg := uuid.New(), uuid.New()
		enc := newEncoder(run)
		m := chat.Message{ID: seg, RunID: &run, Role: chat.RoleAssistant, Kind: chat.KindText}
		s := string(enc.event(&conversation.Event{Type: conversation.EventSegmentStarted, RunID: run, Message: &m}))
		s += string(enc.event(&conversation.Event{Type: conversation.EventDelta, RunID: run, MessageID: seg, Text: text}))
		s += string(enc.event(&conversation.Event{Type: conversation.EventChatDone, RunID: run}))
		chunks, ended := chunksOf(t, s)
		require.True(t, ended)
		if strings.ToValidUTF8(text, "\uFFFD") == text {
			require.Equal(t, text, chunks[3]["delta"], "the delta round-trips")
		}
	})
}

// Progress goes out as a transient data-progress part when it changes (a run.status with
// the same progress, such as a usage update, sends none), and a resumed stream starts
// with the latest.
func TestProgressIsATransientDataPart(t *testing.T) {
	run := uuid.New()
	p := func(step int) *chat.Progress { return &chat.Progress{Step: step, Of: 7, Label: "pages"} }
	status := func(pr *chat.Progress) *conversation.Event {
		return &conversation.Event{Type: conversation.EventRunStatus, RunID: run, Run: &chat.Run{ID: run, Status: chat.RunRunning, Progress: pr}}
	}
	enc := newEncoder(run)
	var out []byte
	out = append(out, enc.event(&conversation.Event{Type: conversation.EventChatStarted, RunID: run})...)
	out = append(out, enc.event(status(nil))...)
	out = append(out, enc.event(status(p(1)))...)
	out = append(out, enc.event(status(p(1)))...)
	out = append(out, enc.event(status(p(2)))...)
	chunks, _ := chunksOf(t, string(out))
	var got []map[string]any
	for _, c := range chunks {
		if c["type"] == "data-progress" {
			require.Equal(t, true, c["transient"])
			require.Equal(t, "progress", c["id"])
			got = append(got, c["data"].(map[string]any))
		}
	}
	require.Equal(t, []map[string]any{
		{"step": 1.0, "of": 7.0, "label": "pages"},
		{"step": 2.0, "of": 7.0, "label": "pages"},
	}, got)

	late := newEncoder(run)
	frames, err := late.catchUp(conversation.CatchUp{Snapshot: &conversation.Snapshot{ActiveRun: &chat.Run{ID: run, Status: chat.RunRunning, Progress: p(3)}}})
	require.NoError(t, err)
	chunks, _ = chunksOf(t, string(frames[0]))
	require.Equal(t, "data-progress", chunks[len(chunks)-1]["type"])
	require.Equal(t, 3.0, chunks[len(chunks)-1]["data"].(map[string]any)["step"])
	require.Empty(t, late.event(status(p(3))), "the same progress again is not sent")
}

// A run a stopped process interrupted mid-sentence and the next one continued is one
// text part: in a stream that joins it after the restart (the interrupted segment's
// part stays open and the continuation streams into it), and in the transcript. A
// segment that ended with no text is no part, in either.
func TestContinuedTextIsOnePart(t *testing.T) {
	run := uuid.New()
	user := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleUser, Content: "go", Status: chat.MessageComplete}
	cut := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleAssistant, Kind: chat.KindText, Content: "Hello wo", Status: chat.MessageInterrupted}
	empty := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleAssistant, Kind: chat.KindText, Status: chat.MessageInterrupted}
	cont := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleAssistant, Kind: chat.KindText, Content: "rl", Status: chat.MessageStreaming}

	enc := newEncoder(run)
	frames, err := enc.catchUp(conversation.CatchUp{Snapshot: &conversation.Snapshot{
		Messages:  []chat.Message{user, cut, empty, cont},
		ActiveRun: &chat.Run{ID: run, Status: chat.RunRunning},
	}})
	require.NoError(t, err)
	live := enc.event(&conversation.Event{Type: conversation.EventDelta, RunID: run, MessageID: cont.ID, Text: "d."})
	live = append(live, enc.event(&conversation.Event{Type: conversation.EventSegmentEnded, RunID: run, MessageID: cont.ID, Status: chat.MessageComplete})...)
	live = append(live, enc.event(&conversation.Event{Type: conversation.EventChatDone, RunID: run})...)
	chunks, ended := chunksOf(t, string(frames[0])+string(live))
	require.True(t, ended)
	var text strings.Builder
	starts, ends := 0, 0
	for _, c := range chunks {
		switch c["type"] {
		case "text-start":
			starts++
			require.Equal(t, cut.ID.String(), c["id"])
		case "text-delta":
			require.Equal(t, cut.ID.String(), c["id"], "the continuation streams into the interrupted part")
			text.WriteString(c["delta"].(string))
		case "text-end":
			ends++
			require.Equal(t, cut.ID.String(), c["id"])
		}
	}
	require.Equal(t, 1, starts)
	require.Equal(t, 1, ends)
	require.Equal(t, "Hello world.", text.String())

	cont.Content, cont.Status = "rld.", chat.MessageComplete
	ui := UIMessages([]chat.Message{user, cut, empty, cont}, nil)
	require.Len(t, ui, 2)
	require.Equal(t, []any{
		map[string]any{"type": "step-start"},
		map[string]any{"type": "text", "text": "Hello world.", "state": "done"},
	}, ui[1]["parts"])

	// A tool call after an interrupted segment closes its part: the text after it is
	// another one, as the transcript has it.
	tool := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleTool, Status: chat.MessageComplete, Tool: &chat.ToolCall{CallID: "c1", Name: "clock", Input: json.RawMessage(`{}`), Status: chat.ToolOK}}
	after := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleAssistant, Kind: chat.KindText, Content: "after", Status: chat.MessageComplete}
	enc = newEncoder(run)
	frames, err = enc.catchUp(conversation.CatchUp{Snapshot: &conversation.Snapshot{
		Messages: []chat.Message{user, cut, tool, after},
		LastRun:  &chat.Run{ID: run, Status: chat.RunDone},
	}})
	require.NoError(t, err)
	chunks, _ = chunksOf(t, string(frames[0]))
	var types []string
	for _, c := range chunks {
		types = append(types, c["type"].(string))
	}
	require.Equal(t, []string{"start", "start-step", "text-start", "text-delta", "text-end",
		"tool-input-start", "tool-input-available", "tool-output-available",
		"text-start", "text-delta", "text-end", "finish-step", "finish"}, types)
	parts := UIMessages([]chat.Message{user, cut, tool, after}, nil)[1]["parts"].([]any)
	require.Len(t, parts, 4, "step-start, the cut text, the tool, the text after")
}
