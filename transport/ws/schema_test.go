package ws_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// docs/protocol.schema.json and the Go types are in step: one frame of every kind, encoded
// as the server encodes it, validates; and the schema's frame types are the ones the Go
// side defines. (Every frame the other tests send and receive is validated as well, but
// only the kinds they happen to produce.)
func TestSchemaMatchesEncoders(t *testing.T) {
	t.Parallel()
	f := newSchemaFixture()
	frames := f.serverFrames(t)
	encoded := map[string]bool{}
	for name, b := range frames {
		var head struct{ Type string }
		require.NoError(t, json.Unmarshal(b, &head))
		encoded[head.Type] = true
		t.Run(name, func(t *testing.T) {
			require.NoError(t, wstest.ValidateServerFrame(b))
		})
	}
	types, err := wstest.FrameTypes("ServerFrame")
	require.NoError(t, err)
	require.ElementsMatch(t, slices.Collect(maps.Keys(types)), slices.Collect(maps.Keys(encoded)), "a frame of every server frame type is encoded")
}

// The schema is not so loose that it would let the server's mistakes through.
func TestSchemaRejectsWhatTheServerMustNotSend(t *testing.T) {
	t.Parallel()
	f := newSchemaFixture()
	base := f.serverFrames(t)
	for name, c := range map[string]struct {
		frame string
		edit  func(map[string]any)
	}{
		"an undocumented field":        {"snapshot, run running", func(m map[string]any) { m["extra"] = 1 }},
		"an undocumented event field":  {"chat.delta", func(m map[string]any) { m["status"] = "complete" }},
		"a missing seq":                {"chat.done, done", func(m map[string]any) { delete(m, "seq") }},
		"a run id that is no UUID":     {"chat.delta", func(m map[string]any) { m["runId"] = "r1" }},
		"an unknown error code":        {"error", func(m map[string]any) { m["code"] = "oops" }},
		"an unknown run status":        {"run.status, running", func(m map[string]any) { m["run"].(map[string]any)["status"] = "sleeping" }},
		"a terminal status mid-run":    {"run.status, running", func(m map[string]any) { m["run"].(map[string]any)["status"] = "done" }},
		"a time that is not RFC 3339":  {"chat.started", func(m map[string]any) { m["run"].(map[string]any)["startedAt"] = "yesterday" }},
		"a tool message without tool":  {"tool.start, running", func(m map[string]any) { delete(m["message"].(map[string]any), "tool") }},
		"a text message with tool":     {"assistant.segment.started, text", func(m map[string]any) { m["message"].(map[string]any)["tool"] = map[string]any{} }},
		"a kind on a user message":     {"chat.started", func(m map[string]any) { m["userMessage"].(map[string]any)["kind"] = "reasoning" }},
		"a failed run without error":   {"chat.error, error", func(m map[string]any) { delete(m["run"].(map[string]any), "error") }},
		"an ended run without endedAt": {"chat.done, done", func(m map[string]any) { delete(m["run"].(map[string]any), "endedAt") }},
		"an unknown frame type":        {"ack", func(m map[string]any) { m["type"] = "ack2" }},
		"auth.expiring without expiry": {"auth.expiring", func(m map[string]any) { delete(m, "expiresAt") }},
		"an expiry that is no time":    {"auth.refreshed", func(m map[string]any) { m["expiresAt"] = 1700000000 }},
	} {
		t.Run(name, func(t *testing.T) {
			require.Contains(t, base, c.frame)
			var m map[string]any
			require.NoError(t, json.Unmarshal(base[c.frame], &m))
			c.edit(m)
			b, err := json.Marshal(m)
			require.NoError(t, err)
			require.Error(t, wstest.ValidateServerFrame(b))
		})
	}
}

// Client frames: the documented ones validate, unknown fields included; malformed ones
// do not.
func TestSchemaClientFrames(t *testing.T) {
	t.Parallel()
	valid := []string{
		`{"type":"hello"}`,
		`{"type":"hello","requestId":"h1","sessionId":"0193a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b","epoch":"e466","lastSeq":17,"token":"t","future":true}`,
		`{"type":"chat.send","requestId":"r1","content":"hi"}`,
		`{"type":"chat.cancel"}`,
		`{"type":"chat.cancel","requestId":"c1","runId":"0193a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b"}`,
		`{"type":"history.fetch","requestId":"h1","before":3,"limit":200}`,
		`{"type":"tool.decide","toolCallId":"call-1","decision":"deny","runId":"0193a3c4-5b6e-7f80-9a1b-2c3d4e5f6a7b"}`,
		`{"type":"chat.resume","requestId":"x1","runId":"0193a2b4-7c1d-7000-8000-000000000001"}`,
		`{"type":"chat.resume","requestId":"x2","runId":"0193a2b4-7c1d-7000-8000-000000000001","mode":"continue"}`,
		`{"type":"chat.dismiss","runId":"0193a2b4-7c1d-7000-8000-000000000001"}`,
		`{"type":"auth.refresh","token":"t"}`,
		`{"type":"auth.refresh","requestId":"a1","token":"t"}`,
	}
	for _, s := range valid {
		require.NoError(t, wstest.ValidateClientFrame([]byte(s)), s)
	}
	invalid := []string{
		`{}`,
		`[]`,
		`{"type":"chat.explode"}`,
		`{"type":"hello","sessionId":"not-a-uuid"}`,
		`{"type":"hello","epoch":"e466"}`,
		`{"type":"hello","epoch":"e466","lastSeq":-1}`,
		`{"type":"chat.send","content":"hi"}`,
		`{"type":"chat.send","requestId":"","content":"hi"}`,
		`{"type":"chat.send","requestId":"` + strings.Repeat("r", 129) + `","content":"hi"}`,
		`{"type":"chat.send","requestId":"r1","content":" \t\n"}`,
		`{"type":"chat.send","requestId":"r1","content":"a\u0000b"}`,
		`{"type":"chat.send","requestId":"r1","content":5}`,
		`{"type":"chat.cancel","runId":"nope"}`,
		`{"type":"history.fetch","limit":0}`,
		`{"type":"history.fetch","limit":201}`,
		`{"type":"history.fetch","before":0}`,
		`{"type":"tool.decide","decision":"approve"}`,
		`{"type":"tool.decide","toolCallId":"call-1","decision":"maybe"}`,
		`{"type":"chat.resume"}`,
		`{"type":"chat.resume","requestId":"x1"}`,
		`{"type":"chat.resume","requestId":"x1","runId":"0193a2b4-7c1d-7000-8000-000000000001","mode":"later"}`,
		`{"type":"chat.dismiss"}`,
		`{"type":"auth.refresh"}`,
		`{"type":"auth.refresh","token":""}`,
	}
	for _, s := range invalid {
		require.Error(t, wstest.ValidateClientFrame([]byte(s)), s)
	}
	require.NoError(t, wstest.ValidateClientFrame([]byte(`{"type":"chat.send","requestId":"`+strings.Repeat("é", 128)+`","content":"hi"}`)),
		"requestId counts characters, not bytes")
	require.Error(t, wstest.ValidateClientFrame([]byte(`{"type":"hello","sessionId":"00000000-0000-0000-0000-000000000000"}`)), "the nil UUID")
	require.Error(t, wstest.ValidateClientFrame([]byte(`{"type":"chat.cancel","requestId":"a\u0000b"}`)), "NUL in a requestId")
}

// Blank content is what the server calls blank: only Unicode white space as Go's
// strings.TrimSpace trims it.
func TestSchemaBlankContent(t *testing.T) {
	t.Parallel()
	send := func(content string) []byte {
		b, err := json.Marshal(map[string]any{"type": "chat.send", "requestId": "r1", "content": content})
		require.NoError(t, err)
		return b
	}
	var spaces []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.IsSpace(r) {
			spaces = append(spaces, r)
		}
	}
	for _, r := range spaces {
		require.Error(t, wstest.ValidateClientFrame(send(string(r)+" "+string(r))), "U+%04X is blank", r)
		require.NoError(t, wstest.ValidateClientFrame(send(string(r)+"x"+string(r))), "U+%04X around text", r)
	}
	// Not white space to Go, though some regex dialects' \s match them.
	for _, r := range []rune{'\uFEFF', '\u200B', '\u180E', 'x', '\u00e9'} {
		require.NotEmpty(t, strings.TrimSpace(string(r)), "U+%04X", r)
		require.NoError(t, wstest.ValidateClientFrame(send(string(r))), "U+%04X is not blank", r)
	}
}

// The schema's frame types are exactly the Go side's: the client frame types the
// transport handles, the conversation's event types, and the seven other server frames.
func TestSchemaFrameTypesMatchGo(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)

	clientGo := stringConsts(t, filepath.Join(root, "transport"), func(name string, _ ast.Expr) bool {
		return len(name) > 4 && strings.HasPrefix(name, "type") && name[4] >= 'A' && name[4] <= 'Z'
	})
	eventsGo := stringConsts(t, filepath.Join(root, "conversation"), func(_ string, typ ast.Expr) bool {
		id, ok := typ.(*ast.Ident)
		return ok && id.Name == "EventType"
	})
	require.Len(t, eventsGo, 16, "conversation's event types")
	serverGo := append([]string{"snapshot", "resumed", "ack", "error", "history", "auth.refreshed", "auth.expiring"}, eventsGo...)

	clientSchema, err := wstest.FrameTypes("ClientFrame")
	require.NoError(t, err)
	serverSchema, err := wstest.FrameTypes("ServerFrame")
	require.NoError(t, err)
	eventSchema, err := wstest.FrameTypes("Event")
	require.NoError(t, err)
	require.ElementsMatch(t, clientGo, slices.Collect(maps.Keys(clientSchema)), "client frame types: Go vs schema")
	require.ElementsMatch(t, serverGo, slices.Collect(maps.Keys(serverSchema)), "server frame types: Go vs schema")
	require.ElementsMatch(t, eventsGo, slices.Collect(maps.Keys(eventSchema)), "event types: Go vs schema")
}

// schemaFixture is one run's worth of domain values to encode.
type schemaFixture struct {
	session, run, msg uuid.UUID
	now               time.Time
}

func newSchemaFixture() schemaFixture {
	return schemaFixture{
		session: uuid.Must(uuid.NewV7()),
		run:     uuid.Must(uuid.NewV7()),
		msg:     uuid.Must(uuid.NewV7()),
		now:     chat.Timestamp(time.Now()),
	}
}

func (f schemaFixture) runAt(status chat.RunStatus) *chat.Run {
	r := &chat.Run{
		ID: f.run, SessionID: f.session, RequestID: "r1", Status: status,
		StartedAt: f.now, LastActivityAt: f.now.Add(time.Second), Model: "demo",
	}
	switch status {
	case chat.RunAwaitingApproval, chat.RunPaused:
		r.PendingApproval = &chat.PendingApproval{ToolCallID: "call-1", Name: "shell", Input: json.RawMessage(`{"cmd":"ls"}`)}
		r.Usage = chat.Usage{InputTokens: 1830, OutputTokens: 212}
	case chat.RunRunning:
		r.Usage = chat.Usage{InputTokens: 1830, OutputTokens: 212, ContextTokens: 1290, ContextWindow: 64000}
	default:
		ended := f.now.Add(2 * time.Second)
		r.EndedAt = &ended
	}
	switch status {
	case chat.RunError:
		r.Error = &chat.ErrorInfo{Code: "model_unavailable", Message: "the model is overloaded (gave up after 3 attempts)"}
	case chat.RunInterrupted:
		r.Error = &chat.ErrorInfo{Code: conversation.CodeInterrupted, Message: "the server stopped"}
		r.CancelReason = chat.CancelShutdown
	case chat.RunCancelled:
		r.CancelReason = chat.CancelUser
	}
	return r
}

// messages returns a message of every role, kind and status, and tool messages of every
// tool status, with and without output and errors.
func (f schemaFixture) messages() []chat.Message {
	pos := int64(0)
	msg := func(role chat.Role, status chat.MessageStatus) chat.Message {
		pos++
		m := chat.Message{
			ID: uuid.Must(uuid.NewV7()), SessionID: f.session, RunID: &f.run, RequestID: "r1",
			Position: pos, Role: role, Kind: chat.KindText, Status: status, CreatedAt: f.now, UpdatedAt: f.now,
		}
		if role != chat.RoleTool {
			m.Content = "some text"
		}
		return m
	}
	out := []chat.Message{msg(chat.RoleUser, chat.MessageComplete)}
	system := msg(chat.RoleSystem, chat.MessageComplete)
	system.RunID, system.RequestID = nil, ""
	out = append(out, system)
	for _, kind := range []chat.MessageKind{chat.KindText, chat.KindReasoning} {
		for _, status := range []chat.MessageStatus{chat.MessageStreaming, chat.MessageComplete, chat.MessageCancelled, chat.MessageError, chat.MessageInterrupted} {
			m := msg(chat.RoleAssistant, status)
			m.Kind = kind
			if status == chat.MessageError {
				m.Error = &chat.ErrorInfo{Code: "model_stream_cut", Message: "the answer broke off"}
			}
			if kind == chat.KindReasoning && status == chat.MessageComplete {
				m.Content = "" // a redacted block
				m.ProviderData = json.RawMessage(`{"signature":"never sent"}`)
			}
			out = append(out, m)
		}
	}
	output := func(s string) *string { return &s }
	for _, c := range []struct {
		status chat.MessageStatus
		tool   chat.ToolStatus
		output *string
		err    *chat.ErrorInfo
	}{
		{chat.MessageStreaming, chat.ToolRunning, nil, nil},
		{chat.MessageStreaming, chat.ToolRunning, output("connecting…\n"), nil},
		{chat.MessageStreaming, chat.ToolAwaitingApproval, nil, nil},
		{chat.MessageComplete, chat.ToolOK, output("3 results"), nil},
		{chat.MessageComplete, chat.ToolOK, output(""), nil},
		{chat.MessageComplete, chat.ToolError, output("exit 1"), &chat.ErrorInfo{Code: "tool_error", Message: "exit 1"}},
		{chat.MessageComplete, chat.ToolDenied, output(conversation.DeclinedOutput), nil},
		{chat.MessageError, chat.ToolError, output(""), &chat.ErrorInfo{Code: "tool_unfinished", Message: "the run ended before this tool call did"}},
		{chat.MessageCancelled, chat.ToolCancelled, output("partial"), nil},
		{chat.MessageInterrupted, chat.ToolCancelled, output(""), nil},
	} {
		m := msg(chat.RoleTool, c.status)
		m.Tool = &chat.ToolCall{CallID: "call-" + strconv.FormatInt(pos, 10), Name: "demo_lookup", Input: json.RawMessage(`{"q": "x", "n": [1, 2]}`), Output: c.output, Status: c.tool}
		m.Error = c.err
		out = append(out, m)
	}
	return out
}

// serverFrames encodes one server frame of every kind (several for some), keyed by a name
// that starts with its type.
func (f schemaFixture) serverFrames(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	add := func(name string, b []byte, err error) {
		t.Helper()
		require.NoError(t, err, name)
		out[name] = b
	}
	marshal := func(name string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		add(name, b, err)
	}
	msgs := f.messages()
	ev := func(typ conversation.EventType, seq int64) *conversation.Event {
		return &conversation.Event{Seq: seq, Type: typ, RunID: f.run, RequestID: "r1"}
	}
	event := func(name string, e *conversation.Event) {
		t.Helper()
		add(name, ws.EncodeEvent(e), nil)
	}
	find := func(role chat.Role, kind chat.MessageKind, status chat.MessageStatus, tool chat.ToolStatus) *chat.Message {
		t.Helper()
		for i, m := range msgs {
			if m.Role == role && m.Kind == kind && m.Status == status && (m.Tool == nil || m.Tool.Status == tool) {
				return &msgs[i]
			}
		}
		t.Fatalf("no %s %s %s %s message", role, kind, status, tool)
		return nil
	}

	// Replies and catch-up.
	b, err := ws.EncodeSnapshot(&conversation.Snapshot{SessionID: f.session, Epoch: "e466"})
	add("snapshot, empty", b, err)
	for _, status := range []chat.RunStatus{chat.RunRunning, chat.RunAwaitingApproval, chat.RunPaused} {
		b, err := ws.EncodeSnapshot(&conversation.Snapshot{
			RequestID: "h1", SessionID: f.session, Epoch: "e466", LastSeq: 70, Messages: msgs, HasMore: true, ActiveRun: f.runAt(status),
		})
		add("snapshot, run "+string(status), b, err)
	}
	b, err = ws.EncodeResumed(&conversation.Resumed{RequestID: "h2", SessionID: f.session, Epoch: "e466", LastSeq: 17})
	add("resumed", b, err)
	b, err = ws.EncodeResumed(&conversation.Resumed{SessionID: f.session, Epoch: "e466"})
	add("resumed, no requestId", b, err)
	rid := func(s string) *string { return &s }
	for _, status := range []chat.RunStatus{chat.RunRunning, chat.RunAwaitingApproval, chat.RunPaused, chat.RunDone, chat.RunError, chat.RunCancelled, chat.RunInterrupted} {
		marshal("ack, "+string(status), ws.WireAck{Type: "ack", RequestID: rid("r1"), RunID: &f.run, Duplicate: status != chat.RunRunning, Status: string(status)})
	}
	marshal("ack", ws.WireAck{Type: "ack", RunID: &f.run, Status: string(chat.RunCancelled)})
	marshal("error", ws.WireErrorReply{Type: "error", RequestID: rid("r2"), Code: conversation.CodeRunActive, Message: "run is still active"})
	marshal("error, no requestId", ws.WireErrorReply{Type: "error", Code: conversation.CodeBadRequest, Message: "malformed frame: invalid JSON at byte 8"})
	marshal("history", ws.WireHistory{Type: "history", RequestID: rid("h1"), Messages: ws.ToWireMessages(msgs), HasMore: true})
	expires := time.Unix(f.now.Unix()+3600, 0).UTC()
	marshal("auth.expiring", ws.WireAuthExpiring{Type: "auth.expiring", ExpiresAt: expires})
	marshal("auth.refreshed", ws.WireAuthRefreshed{Type: "auth.refreshed", RequestID: rid("a1"), ExpiresAt: &expires})
	marshal("auth.refreshed, never expires", ws.WireAuthRefreshed{Type: "auth.refreshed"})
	marshal("history, empty", ws.WireHistory{Type: "history", Messages: ws.ToWireMessages(nil)})

	// Events, in the order of a run.
	started := ev(conversation.EventChatStarted, 1)
	started.Run, started.Message = f.runAt(chat.RunRunning), find(chat.RoleUser, chat.KindText, chat.MessageComplete, "")
	started.Run.Usage = chat.Usage{}
	event("chat.started", started)
	for _, kind := range []chat.MessageKind{chat.KindText, chat.KindReasoning} {
		e := ev(conversation.EventSegmentStarted, 2)
		m := *find(chat.RoleAssistant, kind, chat.MessageStreaming, "")
		m.Content = ""
		e.Message = &m
		event("assistant.segment.started, "+string(kind), e)
	}
	for name, text := range map[string]string{"": "Demo", ", empty": "", ", escaped": "<b>\"x\"</b>\n\u2028\x00"} {
		e := ev(conversation.EventDelta, 3)
		e.MessageID, e.Text = f.msg, text
		event("chat.delta"+name, e)
		e = ev(conversation.EventToolOutput, 4)
		e.MessageID, e.Text = f.msg, text
		event("tool.output"+name, e)
	}
	for _, status := range []chat.MessageStatus{chat.MessageComplete, chat.MessageCancelled, chat.MessageError, chat.MessageInterrupted} {
		e := ev(conversation.EventSegmentEnded, 5)
		e.MessageID, e.Status = f.msg, status
		if status == chat.MessageError {
			e.Error = &chat.ErrorInfo{Code: "model_stream_cut", Message: "the answer broke off"}
		}
		event("assistant.segment.ended, "+string(status), e)
	}
	for _, tool := range []chat.ToolStatus{chat.ToolRunning, chat.ToolAwaitingApproval} {
		e := ev(conversation.EventToolStart, 6)
		e.Message = find(chat.RoleTool, chat.KindText, chat.MessageStreaming, tool)
		event("tool.start, "+string(tool), e)
	}
	update := ev(conversation.EventToolUpdate, 7)
	update.Message = find(chat.RoleTool, chat.KindText, chat.MessageStreaming, chat.ToolRunning)
	event("tool.update", update)
	for _, m := range msgs {
		if m.Role == chat.RoleTool && m.Status != chat.MessageStreaming {
			e := ev(conversation.EventToolEnd, 8)
			e.Message = &m
			event("tool.end, "+string(m.Status)+" "+string(m.Tool.Status)+" "+strconv.FormatInt(m.Position, 10), e)
		}
	}
	notice := ev(conversation.EventMessageAdded, 8)
	notice.Message = &chat.Message{
		ID: f.msg, SessionID: f.session, RunID: &f.run, RequestID: "r1", Position: 9, Role: chat.RoleSystem,
		Kind: chat.KindText, Status: chat.MessageComplete, Content: "The previous sandbox was stopped.", CreatedAt: f.now, UpdatedAt: f.now,
	}
	event("message.added", notice)
	for _, status := range []chat.RunStatus{chat.RunRunning, chat.RunAwaitingApproval, chat.RunPaused} {
		e := ev(conversation.EventRunStatus, 9)
		e.Run = f.runAt(status)
		event("run.status, "+string(status), e)
	}
	for typ, status := range map[conversation.EventType][]chat.RunStatus{
		conversation.EventChatDone:      {chat.RunDone},
		conversation.EventChatError:     {chat.RunError, chat.RunInterrupted},
		conversation.EventChatCancelled: {chat.RunCancelled},
	} {
		for _, s := range status {
			e := ev(typ, 10)
			e.Run = f.runAt(s)
			event(string(typ)+", "+string(s), e)
		}
	}
	// Approvals as a security boundary: decisions, rules.
	cmd := "ls"
	rule := chat.ApprovalRule{ID: f.msg, SessionID: f.session, Tool: "shell", Command: &cmd, CreatedBy: "u1", CreatedVia: chat.DecidedViaWS, ToolCallID: "c1", CreatedAt: f.now}
	anyTool := chat.ApprovalRule{ID: f.run, SessionID: f.session, Tool: "search", CreatedBy: "u1", CreatedVia: chat.DecidedViaHTTP, ToolCallID: "c2", CreatedAt: f.now}
	rules := ev(conversation.EventApprovalRules, 11)
	rules.Rules = []chat.ApprovalRule{rule, anyTool}
	event("approval.rules", rules)
	event("approval.rules, none, no run", &conversation.Event{Seq: 12, Type: conversation.EventApprovalRules, Rules: []chat.ApprovalRule{}})
	b, err = ws.EncodeSnapshot(&conversation.Snapshot{SessionID: f.session, Epoch: "e466", ApprovalRules: []chat.ApprovalRule{rule}})
	add("snapshot, rules", b, err)
	marshal("ack, approval.revoke", ws.WireAck{Type: "ack", RequestID: rid("v1")})
	// Messages sent mid-run under the queue policy.
	queued := []chat.Queued{{SessionID: f.session, RequestID: "q1", Content: "next", CreatedAt: f.now}}
	event("queue.updated", &conversation.Event{Seq: 20, Type: conversation.EventQueue, Queued: queued})
	event("queue.updated, empty", &conversation.Event{Seq: 21, Type: conversation.EventQueue, Queued: []chat.Queued{}})
	b, err = ws.EncodeSnapshot(&conversation.Snapshot{SessionID: f.session, Epoch: "e466", Queued: queued})
	add("snapshot, queued", b, err)
	marshal("ack, queued send", ws.WireAck{Type: "ack", RequestID: rid("q1"), Status: "queued"})
	steering := []chat.Queued{{SessionID: f.session, RequestID: "s1", Content: "also", CreatedAt: f.now, Steering: true}}
	event("queue.updated, steering", &conversation.Event{Seq: 22, Type: conversation.EventQueue, Queued: steering})
	marshal("ack, steering send", ws.WireAck{Type: "ack", RequestID: rid("s1"), RunID: &f.run, Status: "steering"})
	marshal("ack, steered repeat", ws.WireAck{Type: "ack", RequestID: rid("s1"), RunID: &f.run, Duplicate: true, Status: "steered"})
	// Branches: a message with its parent and its place among its siblings, and the
	// event that replaces a tab's path.
	other := uuid.New()
	edited := chat.Message{ID: f.msg, SessionID: f.session, RunID: &f.run, RequestID: "r1", Position: 3, Role: chat.RoleUser, Kind: chat.KindText, Content: "again", Status: chat.MessageComplete, ParentID: &other, Branch: &chat.Branch{Siblings: []uuid.UUID{other, f.msg}, Index: 1}, CreatedAt: f.now}
	event("branch.selected", &conversation.Event{Seq: 23, Type: conversation.EventBranch, Messages: []chat.Message{edited}, HasMore: true, Leaf: &edited.ID})
	event("branch.selected, empty path", &conversation.Event{Seq: 24, Type: conversation.EventBranch, Messages: []chat.Message{}})
	editStarted := ev(conversation.EventChatStarted, 25)
	editStarted.Run, editStarted.Message = f.runAt(chat.RunRunning), &edited
	event("chat.started, an edit", editStarted)
	marshal("ack, branch.select", ws.WireAck{Type: "ack", RequestID: rid("b1")})
	for i, d := range []chat.ToolDecision{
		{Approved: true, By: "u1", At: f.now, Via: chat.DecidedViaWS},
		{Approved: false, At: f.now, Via: chat.DecidedViaExpiry},
		{Approved: true, By: "u1", At: f.now, Via: chat.DecidedViaRule, RuleID: &rule.ID},
		{Approved: false, At: f.now},
	} {
		m := *find(chat.RoleTool, chat.KindText, chat.MessageStreaming, chat.ToolRunning)
		tc := *m.Tool
		tc.Decision = &d
		m.Tool = &tc
		e := ev(conversation.EventToolUpdate, int64(13+i))
		e.Message = &m
		event("tool.update, decision "+strconv.Itoa(i), e)
	}
	return out
}

// moduleRoot is the directory of go.mod, found from the test's working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the working directory")
		dir = parent
	}
}

// stringConsts returns the values of the string constants declared in the non-test Go
// files under dir (test helpers like wstest excluded) that keep reports true for.
func stringConsts(t *testing.T, dir string, keep func(name string, typ ast.Expr) bool) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "wstest" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) || !keep(name.Name, vs.Type) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					out = append(out, v)
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	return out
}
