package ws_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// The connection fuzz target's input is a list of client frames, one per line; a line
// starting with a NUL byte is sent, without it, as a binary frame. An input starting with
// fuzzPipelined sends every frame at once and then reads; otherwise each frame is sent
// once the previous one is answered, and fuzzSession and fuzzRun in a frame are replaced
// with the shared session's id and the last run id the connection saw.
const (
	fuzzPipelined  = "!"
	fuzzSession    = "$SID"
	fuzzRun        = "$RUN"
	fuzzMaxFrames  = 24
	fuzzReadLimit  = 4096
	fuzzMaxContent = 1000
	// fuzzWait bounds the wait for the answer to one frame: longer means the server hung.
	fuzzWait = 10 * time.Second
)

// fuzzCloseCodes are the close codes docs/protocol.md documents.
var fuzzCloseCodes = map[websocket.StatusCode]bool{1000: true, 1001: true, 1008: true, 1009: true, 4000: true, 4001: true, 4004: true, 4008: true, 4029: true}

// fuzzReplies are the frames that answer a client frame; every other frame the server
// sends is a sequenced event.
var fuzzReplies = map[string]bool{"ack": true, "error": true, "history": true, "snapshot": true, "resumed": true}

// fuzzAgent's runs depend on the message: "tool" calls a tool, "fail" fails, "hang" runs
// until cancelled; anything else answers with text.
func fuzzAgent() conversation.Agent {
	return script.PerRun(func(req conversation.Request) []script.Step {
		last := req.Content
		switch {
		case strings.Contains(last, "hang"):
			return []script.Step{script.Text("waiting"), script.Hang()}
		case strings.Contains(last, "fail"):
			return []script.Step{script.Text("partial"), script.Fail("model_error", "scripted failure")}
		case strings.Contains(last, "tool"):
			return []script.Step{script.Text("calling"), script.Tool("t1", "current_time", `{}`, "12:00"), script.Text("done")}
		}
		return []script.Step{script.Text("hello", " there")}
	})
}

// FuzzConnection feeds a whole connection, on a real server with a scripted agent,
// arbitrary frames. Whatever they are, the server must not panic or hang, must send only
// frames the protocol's schema allows, and must answer every frame with exactly one
// ack, error, history, snapshot or resumed, unless it closes the connection with a
// documented close code. The seed corpus is testdata/fuzz/FuzzConnection; `make fuzz`
// runs it longer.
func FuzzConnection(f *testing.F) {
	f.Add([]byte(`{"type":"hello","requestId":"h"}` + "\n" + `{"type":"chat.send","requestId":"r1","content":"hi"}`))

	// One server for every input: its cleanup is the fuzz target's.
	e := newEnv(f, envOptions{
		agent:    fuzzAgent(),
		conv:     func(c *conversation.Config) { c.MaxContentBytes = fuzzMaxContent },
		wsConfig: func(c *ws.Config) { c.ReadLimit = fuzzReadLimit; c.MaxQueuedCommands = 4 },
	})
	first := e.session()
	sid := first.State.SessionID
	_ = first.WS.Close(websocket.StatusNormalClosure, "")

	f.Fuzz(func(t *testing.T, input []byte) {
		pipelined := bytes.HasPrefix(input, []byte(fuzzPipelined))
		if pipelined {
			input = input[len(fuzzPipelined):]
		}
		lines := bytes.Split(input, []byte("\n"))
		if len(lines) > fuzzMaxFrames {
			lines = lines[:fuzzMaxFrames]
		}
		fc := dialFuzz(t, e.URL)
		defer fc.ws.CloseNow()
		defer func() { t.Logf("%d frames sent, %d answered, closed: %v", fc.sent, fc.replies, fc.closed) }()
		if pipelined {
			fc.pipelined(lines)
			return
		}
		for i, line := range lines {
			line = bytes.ReplaceAll(line, []byte(fuzzSession), []byte(sid))
			line = bytes.ReplaceAll(line, []byte(fuzzRun), []byte(fc.lastRun))
			if !fc.send(line) {
				return // closed
			}
			if !fc.awaitReplies(i + 1) {
				return // closed with a documented code
			}
		}
	})
}

// fuzzConn is the client side of one fuzzed connection.
type fuzzConn struct {
	t       *testing.T
	ws      *websocket.Conn
	sent    int
	replies int
	lastRun string
	closed  bool
}

func dialFuzz(t *testing.T, url string) *fuzzConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fuzzWait)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.SetReadLimit(-1)
	return &fuzzConn{t: t, ws: c}
}

// send writes one frame and reports whether the connection took it.
func (fc *fuzzConn) send(line []byte) bool {
	typ := websocket.MessageText
	if len(line) > 0 && line[0] == 0 {
		typ, line = websocket.MessageBinary, line[1:]
	}
	ctx, cancel := context.WithTimeout(context.Background(), fuzzWait)
	defer cancel()
	if err := fc.ws.Write(ctx, typ, line); err != nil {
		// The server closed the connection: reading tells how.
		fc.awaitClose()
		return false
	}
	fc.sent++
	return true
}

// pipelined sends every frame, then reads until each is answered or the connection closes.
func (fc *fuzzConn) pipelined(lines [][]byte) {
	for _, line := range lines {
		if !fc.send(line) {
			return
		}
	}
	fc.awaitReplies(fc.sent)
}

// awaitReplies reads until n frames have been answered, and reports whether they were;
// false when the connection closed first (with a documented code, or the test fails).
func (fc *fuzzConn) awaitReplies(n int) bool {
	for fc.replies < n {
		if !fc.read() {
			return false
		}
	}
	return true
}

// awaitClose reads until the server's close.
func (fc *fuzzConn) awaitClose() {
	for fc.read() {
	}
}

// read reads one frame and checks it; false once the connection has closed.
func (fc *fuzzConn) read() bool {
	t := fc.t
	if fc.closed {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), fuzzWait)
	defer cancel()
	typ, b, err := fc.ws.Read(ctx)
	if err != nil {
		fc.closed = true
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hang: nothing from the server for %s with %d frames sent and %d answered", fuzzWait, fc.sent, fc.replies)
		}
		code := websocket.CloseStatus(err)
		if !fuzzCloseCodes[code] {
			t.Fatalf("the connection ended without a documented close code (%d): %v", code, err)
		}
		return false
	}
	if typ != websocket.MessageText {
		t.Fatalf("the server sent a binary frame: %q", b)
	}
	if err := wstest.ValidateServerFrame(b); err != nil {
		t.Fatalf("the server sent a frame its schema does not allow: %v\n%s", err, b)
	}
	var fr struct {
		Type  string `json:"type"`
		Seq   int64  `json:"seq"`
		RunID string `json:"runId"`
	}
	if err := json.Unmarshal(b, &fr); err != nil {
		t.Fatalf("the server sent a frame that is not JSON: %v\n%s", err, b)
	}
	if fr.RunID != "" {
		fc.lastRun = fr.RunID
	}
	if fuzzReplies[fr.Type] && fr.Seq == 0 {
		fc.replies++
		if fc.replies > fc.sent {
			t.Fatalf("%d replies to %d frames; the last: %s", fc.replies, fc.sent, b)
		}
	}
	return true
}
