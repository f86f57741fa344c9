package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// ApprovalRuleInsert stores a session's approval rule. Fenced like every write of an
// actor: ErrFenced when the session's lease moved on.
func (s *Store) ApprovalRuleInsert(ctx context.Context, r chat.ApprovalRule) error {
	n, err := s.q.ApprovalRuleInsert(ctx, s.w, queries.ApprovalRuleInsertParams{
		ID:         r.ID,
		SessionID:  r.SessionID,
		Tool:       r.Tool,
		Command:    r.Command,
		CreatedBy:  r.CreatedBy,
		CreatedVia: r.CreatedVia,
		ToolCallID: r.ToolCallID,
		CreatedAt:  chat.Timestamp(r.CreatedAt),
		Fence:      fenceOf(ctx),
	})
	if err != nil {
		return fmt.Errorf("insert approval rule: %w", mapErr(err))
	}
	if n == 0 {
		return fmt.Errorf("insert approval rule of session %s: %w", r.SessionID, ErrFenced)
	}
	return nil
}

// ApprovalRuleDelete removes a session's approval rule and reports whether there was one.
func (s *Store) ApprovalRuleDelete(ctx context.Context, sessionID, id uuid.UUID) (bool, error) {
	n, err := s.q.ApprovalRuleDelete(ctx, s.w, queries.ApprovalRuleDeleteParams{ID: id, SessionID: sessionID, Fence: fenceOf(ctx)})
	if err != nil {
		return false, fmt.Errorf("delete approval rule %s: %w", id, mapErr(err))
	}
	return n > 0, nil
}

// ApprovalRules lists a session's approval rules, oldest first.
func (s *Store) ApprovalRules(ctx context.Context, sessionID uuid.UUID) ([]chat.ApprovalRule, error) {
	rows, err := s.q.ApprovalRulesList(ctx, s.db, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list approval rules of session %s: %w", sessionID, mapErr(err))
	}
	rules := make([]chat.ApprovalRule, len(rows))
	for i, r := range rows {
		rules[i] = chat.ApprovalRule{
			ID: r.ID, SessionID: r.SessionID, Tool: r.Tool, Command: r.Command,
			CreatedBy: r.CreatedBy, CreatedVia: r.CreatedVia, ToolCallID: r.ToolCallID,
			CreatedAt: r.CreatedAt.UTC(),
		}
	}
	return rules, nil
}
