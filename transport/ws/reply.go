package ws

import (
	"encoding/json"
	"errors"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/transport"
)

// reply queues a reply frame in the outbox, under the replies' budget.
func (c *conn) reply(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.logEvent(c.s.log.Error()).Err(err).Msg("encode reply")
		return
	}
	c.out.Reply(b)
}

func (c *conn) replyError(requestID *string, code, message string) {
	c.reply(wireErrorReply{Type: "error", RequestID: requestID, Code: code, Message: message})
}

// replyErr answers a failed command with the error's code.
func (c *conn) replyErr(requestID *string, err error) {
	var ce *conversation.Error
	switch {
	case errors.As(err, &ce):
		if ce.Code == conversation.CodeRateLimited {
			// The conversation's only limit: its user's active runs.
			c.s.cfg.Metrics.RateLimited(transport.LimitRuns)
		}
		c.replyError(requestID, ce.Code, ce.Message)
	case errors.Is(err, conversation.ErrStopped), errors.Is(err, hub.ErrClosed):
		c.replyError(requestID, conversation.CodeInternal, "the server is shutting down; reconnect")
		c.out.Close(transport.DisconnectShutdown, true)
	case c.ctx.Err() != nil:
		// The connection is closing; nobody is listening for the answer.
	default:
		c.logEvent(c.s.log.Error()).Err(err).Msg("command failed")
		c.replyError(requestID, conversation.CodeInternal, "internal error")
	}
}

// replyCode is the code replyErr answers err with.
func replyCode(err error) string {
	if ce := (*conversation.Error)(nil); errors.As(err, &ce) {
		return ce.Code
	}
	return conversation.CodeInternal
}

// violation answers a frame that breaks the protocol and closes with 4000.
func (c *conn) violation(requestID *string, message string) {
	c.replyError(requestID, conversation.CodeBadRequest, message)
	c.out.Close(protocolViolation(message), true)
}
