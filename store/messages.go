package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// MessageInsert stores a new message. It returns ErrConflict when the position is taken.
// A message whose parent is the session's active leaf becomes the leaf (the active path
// grows with it); any other leaves the path as it is.
func (s *Store) MessageInsert(ctx context.Context, m chat.Message) error {
	p := queries.MessageInsertParams{
		ID:        m.ID,
		SessionID: m.SessionID,
		RunID:     m.RunID,
		ParentID:  m.ParentID,
		Position:  m.Position,
		Role:      string(m.Role),
		Kind:      string(kindOrText(m.Kind)),
		Content:   m.Content,
		Status:    string(m.Status),
		CreatedAt: chat.Timestamp(m.CreatedAt),
	}
	if m.Tool != nil {
		p.ToolCallID = &m.Tool.CallID
		p.ToolName = &m.Tool.Name
		p.ToolInput = m.Tool.Input
		p.ToolStatus = ptr(string(m.Tool.Status))
		if d := m.Tool.Decision; d != nil {
			b, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("insert message %d: %w", m.Position, err)
			}
			p.ToolDecision = b
		}
	}
	p.Fence = fenceOf(ctx)
	n, err := s.q.MessageInsert(ctx, s.w, p)
	if err != nil {
		return fmt.Errorf("insert message %d: %w", m.Position, mapErr(err))
	}
	if n == 0 {
		return fmt.Errorf("insert message %d of session %s: %w", m.Position, m.SessionID, ErrFenced)
	}
	return nil
}

// MessageGet returns the message with id, or ErrNotFound.
func (s *Store) MessageGet(ctx context.Context, id uuid.UUID) (chat.Message, error) {
	row, err := s.q.MessageGet(ctx, s.db, id)
	if err != nil {
		return chat.Message{}, fmt.Errorf("get message %s: %w", id, mapErr(err))
	}
	return messageFromRow(row.Message, row.RequestID), nil
}

// MessageUpdate writes what can change after insertion: content, status, error, and a
// tool call's output and status, but only while the stored message's status is one of
// from: the statuses the caller last knew it in (chat.MessageStreaming for a segment that
// closes or a tool call that is approved or ends). A writer that has fallen behind cannot
// rewrite a message that has moved on.
//
// It returns ErrNotFound when no message has the id, and ErrStale, naming the stored
// status, when the message is in none of from; in both cases nothing was written. Passing
// no from is a programming error, returned as such without asking the database.
func (s *Store) MessageUpdate(ctx context.Context, m chat.Message, from ...chat.MessageStatus) error {
	if len(from) == 0 {
		return fmt.Errorf("update message %s: no expected status given", m.ID)
	}
	code, msg := errorColumns(m.Error)
	p := queries.MessageUpdateParams{
		ID:           m.ID,
		Content:      m.Content,
		Status:       string(m.Status),
		ErrorCode:    code,
		ErrorMessage: msg,
		ProviderData: m.ProviderData,
		UpdatedAt:    chat.Timestamp(m.UpdatedAt),
		FromStatuses: statusStrings(from),
	}
	if m.Tool != nil {
		p.ToolOutput = m.Tool.Output
		p.ToolStatus = ptr(string(m.Tool.Status))
		if d := m.Tool.Decision; d != nil {
			b, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("update message %s: %w", m.ID, err)
			}
			p.ToolDecision = b
		}
	}
	p.Fence = fenceOf(ctx)
	n, err := s.q.MessageUpdate(ctx, s.w, p)
	if err != nil {
		return fmt.Errorf("update message %s: %w", m.ID, mapErr(err))
	}
	if n > 0 {
		return nil
	}
	// Rare, so the read that tells a missing message from a stale or fenced write is paid
	// only here.
	cur, err := s.q.MessageGet(ctx, s.db, m.ID)
	if err != nil {
		return fmt.Errorf("update message %s: %w", m.ID, mapErr(err))
	}
	if fenced, err := s.fenced(ctx, cur.Message.SessionID); err != nil || fenced {
		if err != nil {
			return fmt.Errorf("update message %s: %w", m.ID, err)
		}
		return fmt.Errorf("update message %s: %w", m.ID, ErrFenced)
	}
	return fmt.Errorf("update message %s: %w: status is %s, not %s", m.ID, ErrStale, cur.Message.Status, orList(from))
}

// MessagesBefore returns up to limit of the newest messages of the session's active
// path with a position below before, in ascending position, and whether older ones
// exist. Pass before <= 0 for the newest messages of all.
func (s *Store) MessagesBefore(ctx context.Context, sessionID uuid.UUID, before int64, limit int) ([]chat.Message, bool, error) {
	return s.MessagesPath(ctx, sessionID, nil, before, limit)
}

// MessagesPath is MessagesBefore on the branch that ends at leaf (its ancestors and
// itself; the session's active path when leaf is nil). A leaf that is no message of the
// session has no messages. Each message that is one of several alternatives carries its
// Branch.
func (s *Store) MessagesPath(ctx context.Context, sessionID uuid.UUID, leaf *uuid.UUID, before int64, limit int) ([]chat.Message, bool, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	if limit < 1 {
		return nil, false, fmt.Errorf("list messages: limit %d is below 1", limit)
	}
	rows, err := s.q.MessagesPathBefore(ctx, s.db, queries.MessagesPathBeforeParams{
		SessionID: sessionID,
		Leaf:      leaf,
		Before:    before,
		MaxRows:   int32(min(limit, math.MaxInt32-1)) + 1,
	})
	if err != nil {
		return nil, false, fmt.Errorf("list messages of session %s: %w", sessionID, mapErr(err))
	}
	hasMore := len(rows) > limit
	if hasMore {
		rows = rows[:limit]
	}
	msgs := make([]chat.Message, len(rows))
	for i, r := range rows { // rows are newest first
		msgs[len(rows)-1-i] = messageFromRow(r.Message, r.RequestID)
	}
	if err := s.branches(ctx, sessionID, msgs); err != nil {
		return nil, false, err
	}
	return msgs, hasMore, nil
}

// branches sets the Branch of each of msgs that has siblings.
func (s *Store) branches(ctx context.Context, sessionID uuid.UUID, msgs []chat.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	var parents []uuid.UUID
	roots := false
	for _, m := range msgs {
		if m.ParentID == nil {
			roots = true
		} else {
			parents = append(parents, *m.ParentID)
		}
	}
	if parents == nil {
		parents = []uuid.UUID{}
	}
	rows, err := s.q.MessageSiblings(ctx, s.db, queries.MessageSiblingsParams{SessionID: sessionID, Parents: parents, Roots: roots})
	if err != nil {
		return fmt.Errorf("read the branches of session %s: %w", sessionID, mapErr(err))
	}
	children := make(map[uuid.UUID][]uuid.UUID) // by parent; uuid.Nil: the roots
	for _, r := range rows {
		p := uuid.Nil
		if r.ParentID != nil {
			p = *r.ParentID
		}
		children[p] = append(children[p], r.ID)
	}
	for i := range msgs {
		msgs[i].Branch = chat.BranchOf(msgs[i].ID, children[deref(msgs[i].ParentID)])
	}
	return nil
}

// MessageChildren returns the children of parent (nil: the session's first messages),
// oldest first.
func (s *Store) MessageChildren(ctx context.Context, sessionID uuid.UUID, parent *uuid.UUID) ([]uuid.UUID, error) {
	p := queries.MessageSiblingsParams{SessionID: sessionID, Parents: []uuid.UUID{}, Roots: parent == nil}
	if parent != nil {
		p.Parents = []uuid.UUID{*parent}
	}
	rows, err := s.q.MessageSiblings(ctx, s.db, p)
	if err != nil {
		return nil, fmt.Errorf("read the children of a message of session %s: %w", sessionID, mapErr(err))
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids, nil
}

// MessageLeaves returns the session's leaves, the messages nothing was written under,
// newest first, at most limit of them: where its branches end.
func (s *Store) MessageLeaves(ctx context.Context, sessionID uuid.UUID, limit int) ([]uuid.UUID, error) {
	if limit < 1 {
		return nil, fmt.Errorf("list leaves: limit %d is below 1", limit)
	}
	ids, err := s.q.MessageLeaves(ctx, s.db, queries.MessageLeavesParams{SessionID: sessionID, MaxRows: int32(min(limit, math.MaxInt32))})
	if err != nil {
		return nil, fmt.Errorf("read the leaves of session %s: %w", sessionID, mapErr(err))
	}
	return ids, nil
}

// MessageNewestBelow returns the newest message of the subtree under message id,
// itself included: the leaf of the branch through id that was written last. ErrNotFound
// when id is no message of the session.
func (s *Store) MessageNewestBelow(ctx context.Context, sessionID, id uuid.UUID) (uuid.UUID, error) {
	leaf, err := s.q.MessageNewestBelow(ctx, s.db, queries.MessageNewestBelowParams{ID: id, SessionID: sessionID})
	if err != nil {
		return uuid.Nil, fmt.Errorf("read the branch through message %s: %w", id, mapErr(err))
	}
	return leaf, nil
}

// SessionSetLeaf makes leaf (a message of the session; nil: none) the session's active
// leaf. ErrNotFound when the session is gone or leaf is no message of it.
func (s *Store) SessionSetLeaf(ctx context.Context, sessionID uuid.UUID, leaf *uuid.UUID) error {
	n, err := s.q.SessionSetLeaf(ctx, s.w, queries.SessionSetLeafParams{SessionID: sessionID, Leaf: leaf, Fence: fenceOf(ctx)})
	if err != nil {
		return fmt.Errorf("select a branch of session %s: %w", sessionID, mapErr(err))
	}
	if n == 0 {
		if fenced, err := s.fenced(ctx, sessionID); err != nil || fenced {
			if err != nil {
				return fmt.Errorf("select a branch of session %s: %w", sessionID, err)
			}
			return fmt.Errorf("select a branch of session %s: %w", sessionID, ErrFenced)
		}
		return fmt.Errorf("select a branch of session %s: %w", sessionID, ErrNotFound)
	}
	return nil
}

// MessagesByRun returns the messages of one run in ascending position.
func (s *Store) MessagesByRun(ctx context.Context, runID uuid.UUID) ([]chat.Message, error) {
	rows, err := s.q.MessagesListByRun(ctx, s.db, &runID)
	if err != nil {
		return nil, fmt.Errorf("list messages of run %s: %w", runID, mapErr(err))
	}
	msgs := make([]chat.Message, len(rows))
	for i, r := range rows {
		msgs[i] = messageFromRow(r.Message, r.RequestID)
	}
	return msgs, nil
}

// MessagesSettleRun gives every message of the run that is still streaming the status
// status (running tool calls become cancelled), and returns how many it changed. It ends
// rows the writer lost track of, such as one whose insert reported an error but committed.
//
// Messages in except are left as they are: their writer still has their final state to
// store, which settling them first would refuse (updates are guarded by status).
func (s *Store) MessagesSettleRun(ctx context.Context, runID uuid.UUID, status chat.MessageStatus, now time.Time, except ...uuid.UUID) (int64, error) {
	if except == nil {
		except = []uuid.UUID{}
	}
	n, err := s.q.MessagesSettleRuns(ctx, s.w, queries.MessagesSettleRunsParams{
		Status:    string(status),
		UpdatedAt: chat.Timestamp(now),
		RunIds:    []uuid.UUID{runID},
		ExceptIds: except,
		Fence:     fenceOf(ctx),
	})
	if err != nil {
		return 0, fmt.Errorf("settle messages of run %s: %w", runID, mapErr(err))
	}
	return n, nil
}

func kindOrText(k chat.MessageKind) chat.MessageKind {
	if k == "" {
		return chat.KindText
	}
	return k
}

func messageFromRow(r queries.Message, requestID *string) chat.Message {
	m := chat.Message{
		ID:        r.ID,
		SessionID: r.SessionID,
		RunID:     r.RunID,
		ParentID:  r.ParentID,
		RequestID: deref(requestID),
		Position:  r.Position,
		Role:      chat.Role(r.Role),
		Kind:      chat.MessageKind(r.Kind),
		Content:   r.Content,
		Status:    chat.MessageStatus(r.Status),
		Error:     errorInfo(r.ErrorCode, r.ErrorMessage),
		CreatedAt: r.CreatedAt.UTC(),
		UpdatedAt: r.UpdatedAt.UTC(),

		ProviderData: r.ProviderData,
	}
	if r.ToolCallID != nil {
		m.Tool = &chat.ToolCall{
			CallID: *r.ToolCallID,
			Name:   deref(r.ToolName),
			Input:  r.ToolInput,
			Output: r.ToolOutput,
			Status: chat.ToolStatus(deref(r.ToolStatus)),
		}
		if len(r.ToolDecision) > 0 {
			var d chat.ToolDecision
			if json.Unmarshal(r.ToolDecision, &d) == nil {
				d.At = d.At.UTC()
				m.Tool.Decision = &d
			}
		}
	}
	return m
}

// MessageDeleteEmpty removes a segment that is still streaming and holds no text (a
// process opened it and died before storing any), and reports whether it did.
func (s *Store) MessageDeleteEmpty(ctx context.Context, id uuid.UUID) (bool, error) {
	n, err := s.q.MessageDeleteEmpty(ctx, s.db, queries.MessageDeleteEmptyParams{ID: id, Fence: fenceOf(ctx)})
	if err != nil {
		return false, fmt.Errorf("delete empty message %s: %w", id, mapErr(err))
	}
	return n > 0, nil
}
