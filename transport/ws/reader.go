package ws

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// readLoop reads frames until the connection ends.
func (c *conn) readLoop() {
	for {
		typ, data, err := c.ws.Read(c.ctx)
		if err != nil {
			c.logReadError(err)
			return
		}
		if c.out.Closing() {
			continue // keep reading so the close handshake can finish
		}
		c.handle(typ, data)
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
	if typ != websocket.MessageText {
		c.replyError(nil, conversation.CodeBadRequest, "frames must be JSON in text frames")
		return
	}
	var f clientFrame
	err := json.Unmarshal(data, &f)
	validID := f.RequestID != nil && chat.ValidRequestID(*f.RequestID)
	if f.RequestID != nil && !validID {
		c.replyError(nil, conversation.CodeBadRequest, fmt.Sprintf("requestId must be 1 to %d characters", chat.MaxRequestIDLen))
		return
	}
	if err != nil {
		// A field of the wrong type leaves the others decoded: echo a valid requestId
		// so the client can match the error to its request.
		var echo *string
		if validID {
			echo = f.RequestID
		}
		c.replyError(echo, conversation.CodeBadRequest, "malformed frame: "+jsonProblem(err))
		return
	}
	switch f.Type {
	case "":
		c.replyError(f.RequestID, conversation.CodeBadRequest, "type is required")
	case typeHello, typeChatSend, typeChatCancel, typeToolDecide, typeChatResume, typeChatDismiss, typeHistoryFetch, typeAuthRefresh:
		c.queue(f)
	default:
		t := f.Type
		if len(t) > 64 {
			t = t[:64] + "…"
		}
		c.replyError(f.RequestID, codeUnknownType, fmt.Sprintf("unknown frame type %q", t))
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
