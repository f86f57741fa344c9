package ws

import (
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// FuzzDecodeClientFrame feeds the client-frame decoder arbitrary bytes, as a text frame
// and, when binary is set, as a binary one. Whatever the bytes, it must not panic, and it
// must either take the frame as a command of a known type or say why not with a code the
// protocol documents, echoing only a valid requestId and never the frame itself. The seed
// corpus is testdata/fuzz/FuzzDecodeClientFrame; `make fuzz` runs it longer.
func FuzzDecodeClientFrame(f *testing.F) {
	f.Add([]byte(`{"type":"hello"}`), false)
	f.Fuzz(func(t *testing.T, data []byte, binary bool) {
		typ := websocket.MessageText
		if binary {
			typ = websocket.MessageBinary
		}
		frame, bad := decodeClientFrame(typ, data)
		again, badAgain := decodeClientFrame(typ, data)
		if !reflect.DeepEqual(frame, again) || !reflect.DeepEqual(bad, badAgain) {
			t.Fatalf("decoding %q twice gave two answers", data)
		}
		if bad != nil {
			if !reflect.DeepEqual(frame, clientFrame{}) {
				t.Fatalf("a refused frame %q came with a command: %+v", data, frame)
			}
			checkBadFrame(t, data, bad)
			if binary && bad.code != conversation.CodeBadRequest {
				t.Fatalf("a binary frame got %s, not bad_request", bad.code)
			}
			return
		}
		if binary {
			t.Fatalf("a binary frame was taken as a command: %q", data)
		}
		switch frame.Type {
		case typeHello, typeChatSend, typeChatCancel, typeToolDecide, typeChatResume, typeChatDismiss, typeHistoryFetch:
		default:
			t.Fatalf("a frame of unknown type %q was taken as a command", frame.Type)
		}
		if frame.RequestID != nil && !chat.ValidRequestID(*frame.RequestID) {
			t.Fatalf("a command with an invalid requestId %q was taken", *frame.RequestID)
		}
		if !utf8.Valid(data) {
			t.Fatalf("a frame that is not UTF-8 was taken: %q", data)
		}
		// What was taken is what the frame says: encoding the command and decoding it
		// again gives the same command.
		b, err := json.Marshal(frame)
		if err != nil {
			t.Fatalf("a taken command does not encode: %v", err)
		}
		round, bad := decodeClientFrame(websocket.MessageText, b)
		if bad != nil || !reflect.DeepEqual(round, frame) {
			t.Fatalf("the command of %q, encoded as %s, decodes as %+v (%+v)", data, b, round, bad)
		}
	})
}

// checkBadFrame checks the error reply to a refused frame.
func checkBadFrame(t *testing.T, data []byte, bad *badFrame) {
	t.Helper()
	if bad.code != conversation.CodeBadRequest && bad.code != codeUnknownType {
		t.Fatalf("frame %q refused with code %q, which the protocol does not give a bad frame", data, bad.code)
	}
	if bad.requestID != nil && !chat.ValidRequestID(*bad.requestID) {
		t.Fatalf("the error to %q echoes an invalid requestId %q", data, *bad.requestID)
	}
	// The message names the problem; it does not carry the frame back (a type is cut at
	// 64 bytes and quoted, which can make it up to 4 times longer).
	if bad.message == "" || !utf8.ValidString(bad.message) || len(bad.message) > 320 {
		t.Fatalf("the error to %q has a bad message (%d bytes): %q", data, len(bad.message), bad.message)
	}
	reply, err := json.Marshal(wireErrorReply{Type: "error", RequestID: bad.requestID, Code: bad.code, Message: bad.message})
	if err != nil {
		t.Fatalf("the error reply does not encode: %v", err)
	}
	var back wireErrorReply
	if err := json.Unmarshal(reply, &back); err != nil || back.Message != bad.message {
		t.Fatalf("the error reply %s does not decode to itself: %v", reply, err)
	}
}
