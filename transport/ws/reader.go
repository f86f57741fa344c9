package ws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
)

// readLoop reads frames until the connection ends.
//
// Each frame is handled on a goroutine of its own while the reader waits: decoding it
// (encoding/json) takes more stack than the reader has, and a stack that grew to 8 KiB
// stays 8 KiB while the reader is parked under coder/websocket, too deep for the runtime
// to shrink it. 4 KiB of every idle connection; a goroutine costs about a microsecond,
// and a client sends a few frames a second at most (CommandRate).
func (c *conn) readLoop() {
	for {
		// A context that is never done, as for writes (see write): with c.ctx,
		// coder/websocket would register a context.AfterFunc for every read and keep it
		// while the reader waits. cut, the only thing that cancels c.ctx, also closes the
		// socket, which ends the read.
		typ, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.closed = websocket.CloseStatus(err)
			if ce := (websocket.CloseError{}); errors.As(err, &ce) {
				c.closedReason = ce.Reason
			}
			c.logReadError(err)
			return
		}
		if c.out.Closing() {
			continue // keep reading so the close handshake can finish
		}
		var handled sync.WaitGroup
		handled.Go(func() { c.handle(typ, data) })
		handled.Wait()
	}
}

func (c *conn) logReadError(err error) {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway:
		return
	case websocket.StatusMessageTooBig:
		c.logEvent(c.s.log.Info()).Msg("closed a connection that sent a frame over the read limit")
		return
	}
	if c.ctx.Err() != nil {
		return
	}
	c.logEvent(c.s.log.Debug()).Err(err).Msg("connection ended")
}

// handle decodes a frame and queues it for the worker. Frames that cannot be read as a
// command (not text, not JSON, a bad requestId, an unknown type) are answered here, at
// once; so is a command that finds the queue full (busy). Nothing here waits.
func (c *conn) handle(typ websocket.MessageType, data []byte) {
	f, bad := decodeClientFrame(typ, data)
	if !c.allowCommand() {
		// Every frame spends a token, a bad one too; the reply echoes the requestId
		// when there is a valid one.
		id := f.RequestID
		if bad != nil {
			id = bad.requestID
		}
		c.s.cfg.Metrics.RateLimited(transport.LimitCommand)
		c.replyError(id, codeRateLimited, fmt.Sprintf("too many commands on this connection (at most %g a second, %d at once): not handled; send it again later", float64(c.s.cfg.CommandRate), c.s.cfg.CommandBurst))
		return
	}
	if c.forward(typ, data) {
		return // relayed: the session's node answers
	}
	if bad != nil {
		c.replyError(bad.requestID, bad.code, bad.message)
		return
	}
	f.raw = data
	c.queue(f)
}

// badFrame is the error reply to a frame that cannot be taken as a command.
type badFrame struct {
	requestID *string // echoed when the frame carried a valid one; nil otherwise
	code      string
	message   string
}

// decodeClientFrame reads one client frame: a command of a known type, whose requestId,
// if any, is valid; or the error it is answered with (not text, not a JSON object, a
// field of the wrong type, a bad requestId, no or an unknown type). The fields' values
// are checked by the command that uses them.
func decodeClientFrame(typ websocket.MessageType, data []byte) (clientFrame, *badFrame) {
	if typ != websocket.MessageText {
		return clientFrame{}, &badFrame{code: conversation.CodeBadRequest, message: "frames must be JSON in text frames"}
	}
	var f clientFrame
	err := json.Unmarshal(data, &f)
	validID := f.RequestID != nil && chat.ValidRequestID(*f.RequestID)
	if textErr := chat.CheckJSONText(data); textErr != nil {
		// encoding/json made each byte that is not UTF-8 U+FFFD without a word: an id
		// would have become another (two requestIds one, and the second send a
		// duplicate of the first). The requestId is echoed unless it may be one of them.
		var echo *string
		if validID && !strings.ContainsRune(*f.RequestID, utf8.RuneError) {
			echo = f.RequestID
		}
		return clientFrame{}, &badFrame{requestID: echo, code: conversation.CodeBadRequest, message: "the frame " + textErr.Error() + ": its ids and text must be"}
	}
	if f.RequestID != nil && !validID {
		return clientFrame{}, &badFrame{code: conversation.CodeBadRequest, message: fmt.Sprintf("requestId must be 1 to %d characters", chat.MaxRequestIDLen)}
	}
	if err != nil {
		// A field of the wrong type leaves the others decoded: echo a valid requestId
		// so the client can match the error to its request.
		var echo *string
		if validID {
			echo = f.RequestID
		}
		return clientFrame{}, &badFrame{requestID: echo, code: conversation.CodeBadRequest, message: "malformed frame: " + jsonProblem(err)}
	}
	switch f.Type {
	case "":
		return clientFrame{}, &badFrame{requestID: f.RequestID, code: conversation.CodeBadRequest, message: "type is required"}
	case typeHello, typeChatSend, typeChatCancel, typeToolDecide, typeChatResume, typeChatDismiss, typeHistoryFetch, typeAuthRefresh, typeApprovalRevoke, typeChatUnqueue, typeChatRegenerate, typeBranchSelect:
		return f, nil
	default:
		t := f.Type
		if len(t) > 64 {
			t = t[:64] + "…"
		}
		return clientFrame{}, &badFrame{requestID: f.RequestID, code: codeUnknownType, message: fmt.Sprintf("unknown frame type %q", t)}
	}
}

// jsonProblem describes a decoding error without echoing the whole frame back.
func jsonProblem(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("invalid JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return "a frame must be a JSON object"
		}
		return fmt.Sprintf("field %s must be a %s", typ.Field, typ.Type.Kind())
	}
	return "invalid JSON"
}
