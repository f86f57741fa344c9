package ws

import (
	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// command answers a command of a connection that has said hello with exactly one ack,
// error or history.
func (c *conn) command(f clientFrame) {
	switch f.Type {
	case typeAuthRefresh:
		c.refresh(f)

	case typeChatSend:
		if f.RequestID == nil {
			c.replyError(nil, conversation.CodeBadRequest, "chat.send needs a requestId")
			return
		}
		if f.Content == nil {
			c.replyError(f.RequestID, conversation.CodeBadRequest, "chat.send needs content")
			return
		}
		editOf, ok := c.messageID(f, "editOf", f.EditOf)
		if !ok {
			return
		}
		res, err := c.actor.Send(c.ctx, conversation.SendRequest{RequestID: *f.RequestID, Content: *f.Content, WhileRunning: chat.DoubleText(f.WhileRunning), EditOf: editOf, Token: c.token})
		if err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		ack := wireAck{Type: "ack", RequestID: f.RequestID, Duplicate: res.Duplicate, Status: string(res.Status)}
		if res.RunID != uuid.Nil { // a queued message has no run yet
			ack.RunID = &res.RunID
		}
		c.reply(ack)

	case typeChatUnqueue:
		if f.RequestID == nil {
			c.replyError(nil, conversation.CodeBadRequest, "chat.unqueue needs the requestId of the queued message")
			return
		}
		if err := c.actor.Unqueue(c.ctx, *f.RequestID); err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireAck{Type: "ack", RequestID: f.RequestID})

	case typeChatCancel:
		runID, ok := c.runID(f)
		if !ok {
			return
		}
		res, err := c.actor.Cancel(c.ctx, runID)
		if err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireAck{Type: "ack", RequestID: f.RequestID, RunID: &res.RunID, Status: string(res.Status)})

	case typeHistoryFetch:
		var before int64
		if f.Before != nil {
			if *f.Before < 1 {
				c.replyError(f.RequestID, conversation.CodeBadRequest, "before must be a message position (1 or more)")
				return
			}
			before = *f.Before
		}
		limit := defaultHistoryLimit
		if f.Limit != nil {
			limit = *f.Limit
		}
		through, ok := c.messageID(f, "through", f.Through)
		if !ok {
			return
		}
		var page conversation.HistoryPage
		var err error
		if through != nil {
			page, err = c.actor.Branch(c.ctx, *through, before, limit)
		} else {
			page, err = c.actor.History(c.ctx, before, limit)
		}
		if err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireHistory{Type: "history", RequestID: f.RequestID, Messages: toWireMessages(page.Messages), HasMore: page.HasMore})

	case typeToolDecide:
		idErr := chat.CheckID(f.ToolCallID)
		switch {
		case f.ToolCallID == "":
			c.replyError(f.RequestID, conversation.CodeBadRequest, "tool.decide needs a toolCallId")
		case idErr != nil:
			c.replyError(f.RequestID, conversation.CodeBadRequest, "toolCallId "+idErr.Error())
		case f.Decision != "approve" && f.Decision != "deny":
			c.replyError(f.RequestID, conversation.CodeBadRequest, `decision must be "approve" or "deny"`)
		case f.InputHash != "" && !validHash(f.InputHash):
			c.replyError(f.RequestID, conversation.CodeBadRequest, "inputHash must be 64 lowercase hex digits (SHA-256)")
		default:
			runID, ok := c.runID(f)
			if !ok {
				return
			}
			res, err := c.actor.DecideAs(c.ctx, conversation.DecideRequest{
				RunID: runID, CallID: f.ToolCallID, Approved: f.Decision == "approve",
				InputHash: f.InputHash, Scope: f.Scope, By: c.user, Via: chat.DecidedViaWS,
			})
			if err != nil {
				c.replyErr(f.RequestID, err)
				return
			}
			c.reply(wireAck{Type: "ack", RequestID: f.RequestID, RunID: &res.RunID, Status: string(res.Status)})
		}

	case typeApprovalRevoke:
		id, err := uuid.Parse(f.RuleID)
		if f.RuleID == "" || err != nil {
			c.replyError(f.RequestID, conversation.CodeBadRequest, "approval.revoke needs a ruleId (a UUID)")
			return
		}
		if err := c.actor.Revoke(c.ctx, id); err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireAck{Type: "ack", RequestID: f.RequestID})

	case typeChatResume:
		if f.RequestID == nil {
			c.replyError(nil, conversation.CodeBadRequest, "chat.resume needs a requestId")
			return
		}
		runID, ok := c.requiredRunID(f)
		if !ok {
			return
		}
		if f.Mode != "" && f.Mode != "continue" && f.Mode != "retry" {
			c.replyError(f.RequestID, conversation.CodeBadRequest, `mode must be "continue" or "retry"`)
			return
		}
		res, err := c.actor.Continue(c.ctx, conversation.ContinueRequest{RunID: runID, RequestID: *f.RequestID, Retry: f.Mode == "retry"})
		if err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireAck{Type: "ack", RequestID: f.RequestID, RunID: &res.RunID, Duplicate: res.Duplicate, Status: string(res.Status)})

	case typeChatRegenerate:
		if f.RequestID == nil {
			c.replyError(nil, conversation.CodeBadRequest, "chat.regenerate needs a requestId")
			return
		}
		runID, ok := c.requiredRunID(f)
		if !ok {
			return
		}
		res, err := c.actor.Continue(c.ctx, conversation.ContinueRequest{RunID: runID, RequestID: *f.RequestID, Retry: true, Regenerate: true})
		if err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireAck{Type: "ack", RequestID: f.RequestID, RunID: &res.RunID, Duplicate: res.Duplicate, Status: string(res.Status)})

	case typeBranchSelect:
		id, ok := c.messageID(f, "messageId", f.MessageID)
		if !ok {
			return
		}
		if id == nil {
			c.replyError(f.RequestID, conversation.CodeBadRequest, "branch.select needs a messageId")
			return
		}
		if err := c.actor.SelectBranch(c.ctx, *id); err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireAck{Type: "ack", RequestID: f.RequestID})

	case typeChatDismiss:
		runID, ok := c.requiredRunID(f)
		if !ok {
			return
		}
		res, err := c.actor.Dismiss(c.ctx, runID)
		if err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireAck{Type: "ack", RequestID: f.RequestID, RunID: &res.RunID, Duplicate: res.Duplicate, Status: string(res.Status)})
	}
}

// requiredRunID reads a frame's runId where it is required (chat.resume, chat.dismiss).
func (c *conn) requiredRunID(f clientFrame) (uuid.UUID, bool) {
	id, ok := c.runID(f)
	if ok && id == uuid.Nil {
		c.replyError(f.RequestID, conversation.CodeBadRequest, f.Type+" needs the runId of the run")
		return uuid.Nil, false
	}
	return id, ok
}

// runID reads a frame's optional runId: uuid.Nil when it is absent. A malformed one is
// answered with an error and ok is false.
func (c *conn) runID(f clientFrame) (id uuid.UUID, ok bool) {
	if f.RunID == nil {
		return uuid.Nil, true
	}
	id, err := uuid.Parse(*f.RunID)
	if err != nil || id == uuid.Nil {
		// The nil UUID names no run; taken as "no runId" it would act on whatever run
		// is active.
		c.replyError(f.RequestID, conversation.CodeBadRequest, "runId must be a UUID of a run")
		return uuid.Nil, false
	}
	return id, true
}

// messageID reads an optional message id field (nil when absent). A malformed one is
// answered with an error and ok is false.
func (c *conn) messageID(f clientFrame, field string, v *string) (*uuid.UUID, bool) {
	if v == nil {
		return nil, true
	}
	id, err := uuid.Parse(*v)
	if err != nil || id == uuid.Nil {
		c.replyError(f.RequestID, conversation.CodeBadRequest, field+" must be the UUID of a message")
		return nil, false
	}
	return &id, true
}

// validHash reports whether h is a SHA-256 in lowercase hex, as chat.InputHash writes it.
func validHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, r := range h {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}
