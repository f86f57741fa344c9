package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// The webhook events (docs/webhooks.md): a run's status change that someone outside
// may act on.
const (
	WebhookRunCompleted        = "run.completed"
	WebhookRunFailed           = "run.failed"
	WebhookRunCancelled        = "run.cancelled"
	WebhookRunAwaitingApproval = "run.awaiting_approval"
)

// WebhookType is the event a run's change to status queues, "" for none.
func WebhookType(status chat.RunStatus) string {
	switch status {
	case chat.RunDone:
		return WebhookRunCompleted
	case chat.RunError, chat.RunInterrupted:
		return WebhookRunFailed
	case chat.RunCancelled:
		return WebhookRunCancelled
	case chat.RunAwaitingApproval:
		return WebhookRunAwaitingApproval
	}
	return ""
}

// EnableWebhooks makes every run status change that has a webhook event queue it in the
// webhook outbox, in the statement that stores the change (CHATD_WEBHOOK_URL).
func (s *Store) EnableWebhooks() { s.webhooks = true }

func runUpdateEventParams(p queries.RunUpdateParams, typ string, run chat.Run) queries.RunUpdateEventParams {
	at := chat.Timestamp(run.LastActivityAt)
	if run.EndedAt != nil {
		at = chat.Timestamp(*run.EndedAt)
	}
	payload, _ := json.Marshal(webhookBody{Type: typ, Timestamp: at, Data: webhookRun(run)})
	return queries.RunUpdateEventParams{
		ID: p.ID, Status: p.Status, ErrorCode: p.ErrorCode, ErrorMessage: p.ErrorMessage,
		EndedAt: p.EndedAt, LastActivityAt: p.LastActivityAt,
		InputTokens: p.InputTokens, OutputTokens: p.OutputTokens, ContextTokens: p.ContextTokens, ContextWindow: p.ContextWindow,
		ProgressStep: p.ProgressStep, ProgressOf: p.ProgressOf, ProgressLabel: p.ProgressLabel,
		AgentState: p.AgentState, CancelReason: p.CancelReason, Recoveries: p.Recoveries,
		DismissedAt: p.DismissedAt, ResumeRequestIds: p.ResumeRequestIds, FromStatuses: p.FromStatuses, Fence: p.Fence,
		EventID: uuid.Must(uuid.NewV7()), EventType: typ, EventPayload: payload, EventAt: at,
	}
}

// webhookBody is an event as it is sent: Standard Webhooks' type, timestamp, data.
type webhookBody struct {
	Type      string      `json:"type"`
	Timestamp time.Time   `json:"timestamp"`
	Data      webhookData `json:"data"`
}

// webhookData is the run, in the protocol's field names (Run), with its session and
// owner: what a receiver needs to act without asking back.
type webhookData struct {
	RunID           uuid.UUID         `json:"runId"`
	SessionID       uuid.UUID         `json:"sessionId"`
	RequestID       string            `json:"requestId"`
	Status          chat.RunStatus    `json:"status"`
	StartedAt       time.Time         `json:"startedAt"`
	EndedAt         *time.Time        `json:"endedAt"`
	LastActivityAt  time.Time         `json:"lastActivityAt"`
	Error           *webhookError     `json:"error,omitempty"`
	CancelReason    chat.CancelReason `json:"cancelReason,omitempty"`
	Usage           *chat.Usage       `json:"usage,omitempty"`
	Progress        *webhookProgress  `json:"progress,omitempty"`
	Model           string            `json:"model,omitempty"`
	Recoveries      int               `json:"recoveries"`
	PendingApproval *webhookPending   `json:"pendingApproval,omitempty"`
	RetryOf         *uuid.UUID        `json:"retryOf,omitempty"`
}

type webhookError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type webhookProgress struct {
	Step  int    `json:"step"`
	Of    int    `json:"of"`
	Label string `json:"label,omitempty"`
}

type webhookPending struct {
	ToolCallID string          `json:"toolCallId"`
	Name       string          `json:"name"`
	Input      json.RawMessage `json:"input"`
	InputHash  string          `json:"inputHash"`
}

func webhookRun(r chat.Run) webhookData {
	d := webhookData{
		RunID: r.ID, SessionID: r.SessionID, RequestID: r.RequestID, Status: r.Status,
		StartedAt: r.StartedAt, EndedAt: r.EndedAt, LastActivityAt: r.LastActivityAt,
		CancelReason: r.CancelReason, Model: r.Model, Recoveries: r.Recoveries, RetryOf: r.RetryOf,
	}
	if r.Error != nil {
		d.Error = &webhookError{Code: r.Error.Code, Message: r.Error.Message}
	}
	if r.Usage != (chat.Usage{}) {
		u := r.Usage
		d.Usage = &u
	}
	if p := r.Progress; p != nil {
		d.Progress = &webhookProgress{Step: p.Step, Of: p.Of, Label: p.Label}
	}
	if p := r.PendingApproval; p != nil {
		input := p.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		d.PendingApproval = &webhookPending{ToolCallID: p.ToolCallID, Name: p.Name, Input: input, InputHash: chat.InputHash(p.Input)}
	}
	return d
}

// WebhookEvent is an event claimed for delivery.
type WebhookEvent struct {
	ID        uuid.UUID
	RunID     uuid.UUID
	Type      string
	Payload   []byte
	Attempts  int // this one included
	CreatedAt time.Time
}

// WebhookClaim claims up to limit events due at now for this node until lockedUntil:
// no other node claims them meanwhile.
func (s *Store) WebhookClaim(ctx context.Context, now, lockedUntil time.Time, limit int) ([]WebhookEvent, error) {
	rows, err := s.q.WebhookClaim(ctx, s.db, queries.WebhookClaimParams{
		Now: chat.Timestamp(now), LockedUntil: timestampPtr(&lockedUntil), Lim: int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("claim webhook events: %w", mapErr(err))
	}
	out := make([]WebhookEvent, len(rows))
	for i, r := range rows {
		out[i] = WebhookEvent{ID: r.ID, RunID: r.RunID, Type: r.Type, Payload: r.Payload, Attempts: int(r.Attempts), CreatedAt: r.CreatedAt.UTC()}
	}
	return out, nil
}

// WebhookDelivered records that the event was delivered at at.
func (s *Store) WebhookDelivered(ctx context.Context, id uuid.UUID, at time.Time) error {
	if err := s.q.WebhookDelivered(ctx, s.db, queries.WebhookDeliveredParams{ID: id, At: timestampPtr(&at)}); err != nil {
		return fmt.Errorf("record webhook %s delivered: %w", id, mapErr(err))
	}
	return nil
}

// WebhookRetry records a failed attempt: the event is due again at next, or with
// giveUp never again (failed at at).
func (s *Store) WebhookRetry(ctx context.Context, id uuid.UUID, lastError string, at, next time.Time, giveUp bool) error {
	err := s.q.WebhookRetry(ctx, s.db, queries.WebhookRetryParams{
		ID: id, LastError: lastError, Next: chat.Timestamp(next), GiveUp: giveUp, At: chat.Timestamp(at),
	})
	if err != nil {
		return fmt.Errorf("record webhook %s failed: %w", id, mapErr(err))
	}
	return nil
}

// WebhookStats counts the events pending, delivered and given up.
type WebhookStats struct {
	Pending, Delivered, Failed int64
}

// WebhookStats counts the outbox's events.
func (s *Store) WebhookStats(ctx context.Context) (WebhookStats, error) {
	r, err := s.q.WebhookStats(ctx, s.db)
	if err != nil {
		return WebhookStats{}, fmt.Errorf("count webhook events: %w", mapErr(err))
	}
	return WebhookStats{Pending: r.Pending, Delivered: r.Delivered, Failed: r.Failed}, nil
}

// WebhookUndelivered is an event not delivered (yet, or ever), for the admin listener.
type WebhookUndelivered struct {
	ID            uuid.UUID  `json:"id"`
	RunID         uuid.UUID  `json:"runId"`
	Type          string     `json:"type"`
	Attempts      int        `json:"attempts"`
	CreatedAt     time.Time  `json:"createdAt"`
	NextAttemptAt *time.Time `json:"nextAttemptAt,omitempty"`
	LastError     string     `json:"lastError,omitempty"`
	FailedAt      *time.Time `json:"failedAt,omitempty"`
}

// WebhookRecent returns the newest limit events not delivered.
func (s *Store) WebhookRecent(ctx context.Context, limit int) ([]WebhookUndelivered, error) {
	rows, err := s.q.WebhookRecent(ctx, s.db, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("read webhook events: %w", mapErr(err))
	}
	out := make([]WebhookUndelivered, len(rows))
	for i, r := range rows {
		u := WebhookUndelivered{ID: r.ID, RunID: r.RunID, Type: r.Type, Attempts: int(r.Attempts), CreatedAt: r.CreatedAt.UTC(), LastError: r.LastError, FailedAt: utcPtr(r.FailedAt)}
		if r.FailedAt == nil {
			next := r.NextAttemptAt.UTC()
			u.NextAttemptAt = &next
		}
		out[i] = u
	}
	return out, nil
}
