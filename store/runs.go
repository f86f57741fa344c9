package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// RunStart stores a new run together with its user message, in one statement that also
// marks the session active and, when it has no title yet, titles it from the message
// (chat.SessionTitle). It returns ErrConflict when the session already has a run with
// the same RequestID (or, which the caller should never cause, a message at the same
// position), ErrNotFound when the session does not exist or was deleted, and ErrRunLimit
// when maxActive is above 0 and the session's owner has that many active runs already,
// in any session, on any process (see withOwnerLock).
func (s *Store) RunStart(ctx context.Context, run chat.Run, user chat.Message, maxActive int) error {
	_, err := s.RunStartCounted(ctx, run, user, maxActive)
	return err
}

// RunStartCounted is RunStart, and with maxActive above 0 also says how many active runs
// the session's owner had before this one (when it started, or was refused for the
// limit): a caller can tell from it whether its next start could be refused.
func (s *Store) RunStartCounted(ctx context.Context, run chat.Run, user chat.Message, maxActive int) (int, error) {
	var row queries.RunStartRow
	err := s.withOwnerLock(ctx, run.SessionID, maxActive, func(db queries.DBTX) (err error) {
		row, err = s.q.RunStart(ctx, db, queries.RunStartParams{
			Fence:     fenceOf(ctx),
			MaxActive: int32(max(maxActive, 0)),
			MessageID: user.ID,
			ParentID:  user.ParentID,
			SessionID: run.SessionID,
			RunID:     run.ID,
			Position:  user.Position,
			Content:   user.Content,
			StartedAt: chat.Timestamp(run.StartedAt),
			// The message keeps its own timestamp: what was sent to clients is what is stored.
			MessageCreatedAt: chat.Timestamp(user.CreatedAt),
			RequestID:        run.RequestID,
			Model:            run.Model,
			Title:            chat.SessionTitle(user.Content),
		})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("start run %s: %w", run.RequestID, mapErr(err))
	}
	if row.Stored == 0 {
		return int(row.Active), s.notStarted(ctx, "start run "+run.RequestID, run.SessionID, row.Active, maxActive)
	}
	return int(row.Active), nil
}

// notStarted is the error of a run start that wrote nothing: the owner's limit when the
// count reached it, the fence when the lease was taken over, else a session that is gone.
func (s *Store) notStarted(ctx context.Context, op string, sessionID uuid.UUID, active int64, maxActive int) error {
	if fenced, err := s.fenced(ctx, sessionID); err != nil || fenced {
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		return fmt.Errorf("%s: session %s: %w", op, sessionID, ErrFenced)
	}
	if maxActive > 0 && active >= int64(maxActive) {
		return fmt.Errorf("%s: %w: %d active, the limit is %d", op, ErrRunLimit, active, maxActive)
	}
	return fmt.Errorf("%s: session %s: %w", op, sessionID, ErrNotFound)
}

// withOwnerLock runs f, which counts the active runs of the session's owner and starts
// one only under the limit, holding the owner's lock (RunOwnerLock) when there is a
// limit: f's statement sees every start before it, on every process, so two starts at
// once cannot both take the last place. Without a limit f runs as it is. With one, the
// lock and f's statement go out as one batch: one round trip, and one implicit
// transaction, so the lock is held until the statement commits, and the statement,
// whose snapshot is taken after the lock, sees every start committed before. Either
// way a run starts in one round trip, which a slow database makes the whole cost of a
// first token.
func (s *Store) withOwnerLock(ctx context.Context, sessionID uuid.UUID, maxActive int, f func(queries.DBTX) error) error {
	if maxActive <= 0 {
		return f(s.w)
	}
	if tx, ok := s.db.(pgx.Tx); ok { // inside InTx: the lock lasts until that commits
		if err := s.q.RunOwnerLock(ctx, tx, sessionID); err != nil {
			return err
		}
		return f(tx)
	}
	b := &lockedBatch{pool: s.pool}
	if err := s.q.RunOwnerLock(ctx, b, sessionID); err != nil {
		return err
	}
	return f(b)
}

// lockedBatch is the DBTX of a locked run start: statements executed on it are queued,
// and the first row read sends them all, that read's statement last, as one batch.
type lockedBatch struct {
	pool *pgxpool.Pool
	b    pgx.Batch
}

func (l *lockedBatch) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	l.b.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

func (l *lockedBatch) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("store: a locked batch reads one row")
}

func (l *lockedBatch) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return batchRow{l, ctx, sql, args}
}

type batchRow struct {
	l    *lockedBatch
	ctx  context.Context
	sql  string
	args []any
}

func (r batchRow) Scan(dest ...any) error {
	r.l.b.Queue(r.sql, r.args...).QueryRow(func(row pgx.Row) error { return row.Scan(dest...) })
	return r.l.pool.SendBatch(r.ctx, &r.l.b).Close()
}

// RunGet returns the run with id, or ErrNotFound.
func (s *Store) RunGet(ctx context.Context, id uuid.UUID) (chat.Run, error) {
	row, err := s.q.RunGet(ctx, s.db, id)
	if err != nil {
		return chat.Run{}, fmt.Errorf("get run %s: %w", id, mapErr(err))
	}
	return runFromRow(row), nil
}

// RunByRequest returns the session's run for requestID, or ErrNotFound.
func (s *Store) RunByRequest(ctx context.Context, sessionID uuid.UUID, requestID string) (chat.Run, error) {
	row, err := s.q.RunGetByRequest(ctx, s.db, queries.RunGetByRequestParams{
		SessionID: sessionID,
		RequestID: requestID,
	})
	if err != nil {
		return chat.Run{}, fmt.Errorf("get run %s of session %s: %w", requestID, sessionID, mapErr(err))
	}
	return runFromRow(row), nil
}

// RunUpdate writes the run's status, error, end time, last activity and usage, but only
// while the stored run's status is one of from: the statuses the caller last knew the run
// in (usually chat.ActiveRunStatuses()). It is how a writer that has fallen behind, such
// as a retry or a second node, is kept from rewriting a run that has moved on.
//
// It returns ErrNotFound when no run has the id, and ErrStale, naming the stored status,
// when the run is in none of from; in both cases nothing was written. Passing no from is
// a programming error, returned as such without asking the database.
func (s *Store) RunUpdate(ctx context.Context, run chat.Run, from ...chat.RunStatus) error {
	if len(from) == 0 {
		return fmt.Errorf("update run %s: no expected status given", run.ID)
	}
	p := runUpdateParams(run, from)
	p.Fence = fenceOf(ctx)
	if typ := WebhookType(run.Status); s.webhooks && typ != "" {
		n, err := s.q.RunUpdateEvent(ctx, s.w, runUpdateEventParams(p, typ, run))
		return s.checkRunUpdate(ctx, run.ID, from, n, err)
	}
	n, err := s.q.RunUpdate(ctx, s.w, p)
	return s.checkRunUpdate(ctx, run.ID, from, n, err)
}

// RunContinue is RunUpdate for a run a person continued (chat.resume): the same
// statement marks its session active, so the conversation list shows it first. Errors
// are those of RunUpdate, and ErrRunLimit as RunStart's (maxActive 0: no limit).
func (s *Store) RunContinue(ctx context.Context, run chat.Run, maxActive int, from ...chat.RunStatus) error {
	if len(from) == 0 {
		return fmt.Errorf("continue run %s: no expected status given", run.ID)
	}
	p := runUpdateParams(run, from)
	var row queries.RunContinueRow
	err := s.withOwnerLock(ctx, run.SessionID, maxActive, func(db queries.DBTX) (err error) {
		row, err = s.q.RunContinue(ctx, db, queries.RunContinueParams{
			MaxActive:        int32(max(maxActive, 0)),
			Fence:            fenceOf(ctx),
			ID:               p.ID,
			Status:           p.Status,
			ErrorCode:        p.ErrorCode,
			ErrorMessage:     p.ErrorMessage,
			EndedAt:          p.EndedAt,
			LastActivityAt:   p.LastActivityAt,
			InputTokens:      p.InputTokens,
			OutputTokens:     p.OutputTokens,
			ContextTokens:    p.ContextTokens,
			ContextWindow:    p.ContextWindow,
			ProgressStep:     p.ProgressStep,
			ProgressOf:       p.ProgressOf,
			ProgressLabel:    p.ProgressLabel,
			AgentState:       p.AgentState,
			CancelReason:     p.CancelReason,
			Recoveries:       p.Recoveries,
			DismissedAt:      p.DismissedAt,
			ResumeRequestIds: p.ResumeRequestIds,
			FromStatuses:     p.FromStatuses,
		})
		return err
	})
	if err == nil && row.Moved == 0 && maxActive > 0 && row.Active >= int64(maxActive) {
		fenced, ferr := s.fenced(ctx, run.SessionID)
		if ferr != nil {
			return fmt.Errorf("continue run %s: %w", run.ID, ferr)
		}
		if !fenced {
			return fmt.Errorf("continue run %s: %w: %d active, the limit is %d", run.ID, ErrRunLimit, row.Active, maxActive)
		}
	}
	return s.checkRunUpdate(ctx, run.ID, from, row.Moved, err)
}

func runUpdateParams(run chat.Run, from []chat.RunStatus) queries.RunUpdateParams {
	code, msg := errorColumns(run.Error)
	step, of, label := progressColumns(run.Progress)
	return queries.RunUpdateParams{
		ID:               run.ID,
		Status:           string(run.Status),
		ErrorCode:        code,
		ErrorMessage:     msg,
		EndedAt:          timestampPtr(run.EndedAt),
		LastActivityAt:   chat.Timestamp(run.LastActivityAt),
		InputTokens:      run.Usage.InputTokens,
		OutputTokens:     run.Usage.OutputTokens,
		ContextTokens:    run.Usage.ContextTokens,
		ContextWindow:    run.Usage.ContextWindow,
		ProgressStep:     step,
		ProgressOf:       of,
		ProgressLabel:    label,
		AgentState:       run.AgentState,
		CancelReason:     nilIfEmpty(string(run.CancelReason)),
		Recoveries:       int32(run.Recoveries),
		DismissedAt:      timestampPtr(run.DismissedAt),
		ResumeRequestIds: emptyIfNil(run.ResumeRequestIDs),
		FromStatuses:     statusStrings(from),
	}
}

// checkRunUpdate maps the outcome of a guarded run update: n rows written, or err.
func (s *Store) checkRunUpdate(ctx context.Context, id uuid.UUID, from []chat.RunStatus, n int64, err error) error {
	if err != nil {
		return fmt.Errorf("update run %s: %w", id, mapErr(err))
	}
	if n > 0 {
		return nil
	}
	// Rare, so the read that tells a missing run from a stale or fenced write is paid
	// only here.
	cur, err := s.q.RunGet(ctx, s.db, id)
	if err != nil {
		return fmt.Errorf("update run %s: %w", id, mapErr(err))
	}
	if fenced, err := s.fenced(ctx, cur.SessionID); err != nil || fenced {
		if err != nil {
			return fmt.Errorf("update run %s: %w", id, err)
		}
		return fmt.Errorf("update run %s: %w", id, ErrFenced)
	}
	return fmt.Errorf("update run %s: %w: status is %s, not %s", id, ErrStale, cur.Status, orList(from))
}

func runFromRow(r queries.Run) chat.Run {
	return chat.Run{
		ID:             r.ID,
		SessionID:      r.SessionID,
		RequestID:      r.RequestID,
		Status:         chat.RunStatus(r.Status),
		Error:          errorInfo(r.ErrorCode, r.ErrorMessage),
		StartedAt:      r.StartedAt.UTC(),
		EndedAt:        utcPtr(r.EndedAt),
		LastActivityAt: r.LastActivityAt.UTC(),
		Usage: chat.Usage{
			InputTokens: r.InputTokens, OutputTokens: r.OutputTokens,
			ContextTokens: r.ContextTokens, ContextWindow: r.ContextWindow,
		},
		Progress:         progressOf(r.ProgressStep, r.ProgressOf, r.ProgressLabel),
		AgentState:       r.AgentState,
		Model:            r.Model,
		CancelReason:     chat.CancelReason(deref(r.CancelReason)),
		Recoveries:       int(r.Recoveries),
		DismissedAt:      utcPtr(r.DismissedAt),
		ResumeRequestIDs: slices.Clip(nilIfNone(r.ResumeRequestIds)),
		RetryOf:          r.RetryOf,
	}
}

// SessionAgentState returns the state an agent last reported in the session (the
// newest run's Run.AgentState that is set), nil when none did.
func (s *Store) SessionAgentState(ctx context.Context, sessionID uuid.UUID) (json.RawMessage, error) {
	state, err := s.q.SessionAgentState(ctx, s.db, sessionID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get the agent state of session %s: %w", sessionID, mapErr(err))
	}
	return state, nil
}

// RunStartRetry stores run, which regenerates the answer of run.RetryOf: it answers
// that run's user message, user, and has none of its own. user becomes the session's
// active leaf: the new answer grows a branch under it. Errors are RunStart's.
func (s *Store) RunStartRetry(ctx context.Context, run chat.Run, user uuid.UUID, maxActive int) error {
	if run.RetryOf == nil {
		return fmt.Errorf("start retry %s: no run to retry", run.RequestID)
	}
	var row queries.RunInsertRetryRow
	err := s.withOwnerLock(ctx, run.SessionID, maxActive, func(db queries.DBTX) (err error) {
		row, err = s.q.RunInsertRetry(ctx, db, queries.RunInsertRetryParams{
			Fence:     fenceOf(ctx),
			MaxActive: int32(max(maxActive, 0)),
			RunID:     run.ID,
			SessionID: run.SessionID,
			RequestID: run.RequestID,
			StartedAt: chat.Timestamp(run.StartedAt),
			Model:     run.Model,
			RetryOf:   run.RetryOf,
			Leaf:      user,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("start retry %s: %w", run.RequestID, mapErr(err))
	}
	if row.Stored == 0 {
		return s.notStarted(ctx, "start retry "+run.RequestID, run.SessionID, row.Active, maxActive)
	}
	return nil
}

// RunLatest returns the session's newest run, or ErrNotFound when it has none.
func (s *Store) RunLatest(ctx context.Context, sessionID uuid.UUID) (chat.Run, error) {
	row, err := s.q.RunLatest(ctx, s.db, sessionID)
	if err != nil {
		return chat.Run{}, fmt.Errorf("latest run of session %s: %w", sessionID, mapErr(err))
	}
	return runFromRow(row), nil
}

// nilIfNone keeps a run read back equal to the one written with no resume ids.
func nilIfNone(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func emptyIfNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func timestampPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	return ptr(chat.Timestamp(*t))
}

// progressColumns are a run's progress as stored: of 0 is none.
func progressColumns(p *chat.Progress) (step, of int32, label string) {
	if p == nil {
		return 0, 0, ""
	}
	return int32(p.Step), int32(p.Of), p.Label
}

// progressOf is the progress the columns hold, nil for none (of 0).
func progressOf(step, of int32, label string) *chat.Progress {
	if of <= 0 {
		return nil
	}
	return &chat.Progress{Step: int(step), Of: int(of), Label: label}
}

// RunCursor is where a page of a session's runs ends: the last run's start and id.
type RunCursor struct {
	StartedAt time.Time
	ID        uuid.UUID
}

// RunsPage returns up to limit of the session's runs, newest first, of statuses (none:
// every status), after the cursor (nil: from the newest).
func (s *Store) RunsPage(ctx context.Context, sessionID uuid.UUID, statuses []chat.RunStatus, after *RunCursor, limit int) ([]chat.Run, error) {
	p := queries.RunsPageParams{SessionID: sessionID, Statuses: []string{}, Lim: int32(limit)}
	for _, st := range statuses {
		p.Statuses = append(p.Statuses, string(st))
	}
	if after != nil {
		p.Paged, p.BeforeStarted, p.BeforeID = true, after.StartedAt, after.ID
	}
	rows, err := s.q.RunsPage(ctx, s.db, p)
	if err != nil {
		return nil, fmt.Errorf("list the runs of session %s: %w", sessionID, mapErr(err))
	}
	runs := make([]chat.Run, len(rows))
	for i, r := range rows {
		runs[i] = runFromRow(r)
	}
	return runs, nil
}
