package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type bundle struct {
	ctx     context.Context
	session chat.Session
	now     time.Time
}

// setup returns a store on a fresh database, with a session in it. Options edit the pool's
// configuration, as storetest.New's do.
func setup(t *testing.T, opts ...func(*pgxpool.Config)) (*store.Store, bundle) {
	t.Helper()
	t.Parallel()
	s := storetest.New(t, opts...)
	ctx := context.Background()
	now := chat.Timestamp(time.Now())
	sess, err := s.SessionCreate(ctx, chat.Session{ID: uuid.New(), Owner: "alice", CreatedAt: now})
	require.NoError(t, err)
	return s, bundle{ctx: ctx, session: sess, now: now}
}

func startRun(t *testing.T, s *store.Store, b bundle, requestID string, pos int64) (chat.Run, chat.Message) {
	t.Helper()
	run := chat.Run{ID: uuid.New(), SessionID: b.session.ID, RequestID: requestID, Status: chat.RunRunning, StartedAt: b.now, LastActivityAt: b.now}
	user := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: pos, Role: chat.RoleUser, Content: "hi " + requestID, Status: chat.MessageComplete, CreatedAt: b.now}
	require.NoError(t, s.RunStart(b.ctx, run, user, 0))
	return run, user
}

func TestSessionCreateKeepsFirstOwner(t *testing.T) {
	s, b := setup(t)
	got, err := s.SessionCreate(b.ctx, chat.Session{ID: b.session.ID, Owner: "mallory", CreatedAt: b.now.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, "alice", got.Owner)
	require.Equal(t, b.now, got.CreatedAt)

	_, err = s.SessionGet(b.ctx, uuid.New())
	require.ErrorIs(t, err, store.ErrNotFound)
}

// A caller that creates a session while another transaction's insert of it is still open
// waits for that transaction and then gets the stored row, not "not found".
func TestSessionCreateWaitsForAConcurrentInsert(t *testing.T) {
	s, b := setup(t)
	id := uuid.New()
	inserted, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.InTx(b.ctx, func(tx *store.Store) error {
			_, err := tx.SessionCreate(b.ctx, chat.Session{ID: id, Owner: "first", CreatedAt: b.now})
			close(inserted)
			<-release
			return err
		})
	}()
	<-inserted

	type result struct {
		sess chat.Session
		err  error
	}
	second := make(chan result, 1)
	go func() {
		sess, err := s.SessionCreate(b.ctx, chat.Session{ID: id, Owner: "second", CreatedAt: b.now})
		second <- result{sess, err}
	}()

	// Wait until the second insert is blocked on the first one's row lock.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for waiting := false; !waiting; {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the second insert never waited for the first")
		}
		require.NoError(t, s.Pool().QueryRow(b.ctx,
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
	}
	close(release)
	require.NoError(t, <-first)
	r := <-second
	require.NoError(t, r.err)
	require.Equal(t, "first", r.sess.Owner)
}

func TestRunStartStoresRunAndUserMessage(t *testing.T) {
	s, b := setup(t)
	run, user := startRun(t, s, b, "r1", 1)

	got, err := s.RunByRequest(b.ctx, b.session.ID, "r1")
	require.NoError(t, err)
	require.Equal(t, run.ID, got.ID)
	require.Equal(t, chat.RunRunning, got.Status)
	require.Nil(t, got.EndedAt)

	msgs, err := s.MessagesByRun(b.ctx, run.ID)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	user.RequestID = "r1"
	user.Kind = chat.KindText
	user.UpdatedAt = user.CreatedAt
	require.Equal(t, user, msgs[0])

	sess, err := s.SessionGet(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Equal(t, b.now, sess.UpdatedAt)
}

// The store writes the timestamps it is given: a user message stamped a moment after its
// run started keeps its own time.
func TestRunStartKeepsTheMessageTimestamp(t *testing.T) {
	s, b := setup(t)
	run := chat.Run{ID: uuid.New(), SessionID: b.session.ID, RequestID: "r1", StartedAt: b.now, LastActivityAt: b.now}
	later := b.now.Add(7 * time.Microsecond)
	user := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 1, Role: chat.RoleUser, Content: "x", Status: chat.MessageComplete, CreatedAt: later}
	require.NoError(t, s.RunStart(b.ctx, run, user, 0))
	msgs, err := s.MessagesByRun(b.ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, later, msgs[0].CreatedAt)
	got, err := s.RunGet(b.ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, b.now, got.StartedAt)
}

func TestRunStartDuplicateRequestIsConflictAndWritesNothing(t *testing.T) {
	s, b := setup(t)
	startRun(t, s, b, "r1", 1)

	run := chat.Run{ID: uuid.New(), SessionID: b.session.ID, RequestID: "r1", StartedAt: b.now, LastActivityAt: b.now}
	user := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 2, Role: chat.RoleUser, Content: "again", Status: chat.MessageComplete, CreatedAt: b.now}
	err := s.RunStart(b.ctx, run, user, 0)
	require.ErrorIs(t, err, store.ErrConflict)

	msgs, _, err := s.MessagesBefore(b.ctx, b.session.ID, 0, 10)
	require.NoError(t, err)
	require.Len(t, msgs, 1, "the failed start must not leave its user message")
}

func TestMessageInsertPositionConflict(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	m := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 1, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	require.ErrorIs(t, s.MessageInsert(b.ctx, m), store.ErrConflict)
}

func TestMessageUpdateToolAndMissing(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	tool := chat.Message{
		ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 2, Role: chat.RoleTool,
		Status: chat.MessageStreaming, CreatedAt: b.now,
		Tool: &chat.ToolCall{CallID: "c1", Name: "lookup", Input: json.RawMessage(`{"q": "x"}`), Status: chat.ToolRunning},
	}
	require.NoError(t, s.MessageInsert(b.ctx, tool))

	out := "42"
	tool.Tool.Output = &out
	tool.Tool.Status = chat.ToolOK
	tool.Status = chat.MessageComplete
	tool.UpdatedAt = b.now.Add(time.Second)
	require.NoError(t, s.MessageUpdate(b.ctx, tool, chat.MessageStreaming))

	msgs, err := s.MessagesByRun(b.ctx, run.ID)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	got := msgs[1]
	require.Equal(t, chat.MessageComplete, got.Status)
	require.Equal(t, "42", *got.Tool.Output)
	require.Equal(t, chat.ToolOK, got.Tool.Status)
	require.JSONEq(t, `{"q":"x"}`, string(got.Tool.Input))
	require.Equal(t, "r1", got.RequestID)

	missing := tool
	missing.ID = uuid.New()
	require.ErrorIs(t, s.MessageUpdate(b.ctx, missing, chat.MessageStreaming), store.ErrNotFound)
}

func TestMessagesBeforePages(t *testing.T) {
	s, b := setup(t)
	run, user := startRun(t, s, b, "r1", 1)
	parent := user.ID
	for pos := int64(2); pos <= 7; pos++ {
		m := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, ParentID: &parent, Position: pos, Role: chat.RoleAssistant, Status: chat.MessageComplete, CreatedAt: b.now}
		require.NoError(t, s.MessageInsert(b.ctx, m))
		parent = m.ID
	}

	positions := func(ms []chat.Message) []int64 {
		var ps []int64
		for _, m := range ms {
			ps = append(ps, m.Position)
		}
		return ps
	}
	msgs, more, err := s.MessagesBefore(b.ctx, b.session.ID, 0, 3)
	require.NoError(t, err)
	require.Equal(t, []int64{5, 6, 7}, positions(msgs))
	require.True(t, more)

	msgs, more, err = s.MessagesBefore(b.ctx, b.session.ID, 5, 3)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 3, 4}, positions(msgs))
	require.True(t, more)

	msgs, more, err = s.MessagesBefore(b.ctx, b.session.ID, 2, 3)
	require.NoError(t, err)
	require.Equal(t, []int64{1}, positions(msgs))
	require.False(t, more)

}

func TestInTxRollsBack(t *testing.T) {
	s, b := setup(t)
	boom := errors.New("boom")
	err := s.InTx(b.ctx, func(tx *store.Store) error {
		startRun(t, tx, b, "r1", 1)
		return boom
	})
	require.ErrorIs(t, err, boom)
	_, err = s.RunByRequest(b.ctx, b.session.ID, "r1")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestSessionSandboxAndCancelReason(t *testing.T) {
	s, b := setup(t)
	require.Empty(t, b.session.SandboxID)
	require.NoError(t, s.SessionSetSandbox(b.ctx, b.session.ID, "local-123", time.Now()))
	got, err := s.SessionGet(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Equal(t, "local-123", got.SandboxID)
	require.NoError(t, s.SessionSetSandbox(b.ctx, b.session.ID, "", time.Now()))
	got, err = s.SessionGet(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Empty(t, got.SandboxID)
	require.ErrorIs(t, s.SessionSetSandbox(b.ctx, uuid.New(), "x", time.Now()), store.ErrNotFound)

	run, _ := startRun(t, s, b, "r1", 1)
	run.Status = chat.RunCancelled
	run.CancelReason = chat.CancelAbandoned
	ended := b.now
	run.EndedAt = &ended
	require.NoError(t, s.RunUpdate(b.ctx, run, chat.RunRunning))
	stored, err := s.RunGet(b.ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, chat.CancelAbandoned, stored.CancelReason)
}

// rowJSON returns every column of one row of table as JSON, read with plain SQL so that a
// column the store does not map is compared too.
func rowJSON(t *testing.T, s *store.Store, table string, id uuid.UUID) string {
	t.Helper()
	var row string
	require.NoError(t, s.Pool().QueryRow(context.Background(),
		"SELECT to_jsonb(t)::text FROM "+table+" t WHERE id = $1", id).Scan(&row))
	return row
}

// endRun stores run as ended with status, from running.
func endRun(t *testing.T, s *store.Store, b bundle, run chat.Run, status chat.RunStatus) chat.Run {
	t.Helper()
	ended := b.now.Add(time.Second)
	run.Status = status
	run.EndedAt = &ended
	run.LastActivityAt = ended
	run.Usage = chat.Usage{InputTokens: 10, OutputTokens: 20, ContextTokens: 10, ContextWindow: 1000}
	require.NoError(t, s.RunUpdate(b.ctx, run, chat.RunRunning))
	return run
}

// A writer that fell behind (a retry, a second node) cannot rewrite a run that has ended:
// it learns the run moved on, and not one column changes.
func TestRunUpdateAfterEndIsStaleAndWritesNothing(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	done := endRun(t, s, b, run, chat.RunDone)
	before := rowJSON(t, s, "runs", run.ID)

	late := done
	late.Status = chat.RunCancelled
	late.CancelReason = chat.CancelAbandoned
	late.Error = &chat.ErrorInfo{Code: "abandoned", Message: "nobody watched"}
	lateEnd := b.now.Add(time.Hour)
	late.EndedAt = &lateEnd
	late.LastActivityAt = lateEnd
	late.Usage = chat.Usage{InputTokens: 99, OutputTokens: 99, ContextTokens: 99, ContextWindow: 99}
	err := s.RunUpdate(b.ctx, late, chat.ActiveRunStatuses()...)
	require.ErrorIs(t, err, store.ErrStale)
	require.NotErrorIs(t, err, store.ErrNotFound)
	require.ErrorContains(t, err, "status is done")

	require.Equal(t, before, rowJSON(t, s, "runs", run.ID))
	got, err := s.RunGet(b.ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, done, got)
}

// The same for a message: a segment that closed cannot be rewritten by a late close.
func TestMessageUpdateAfterCompleteIsStaleAndWritesNothing(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	seg := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 2, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	require.NoError(t, s.MessageInsert(b.ctx, seg))
	seg.Content = "the whole answer"
	seg.Status = chat.MessageComplete
	seg.UpdatedAt = b.now.Add(time.Second)
	require.NoError(t, s.MessageUpdate(b.ctx, seg, chat.MessageStreaming))
	before := rowJSON(t, s, "messages", seg.ID)

	late := seg
	late.Content = "half an answer"
	late.Status = chat.MessageInterrupted
	late.Error = &chat.ErrorInfo{Code: "interrupted", Message: "late"}
	late.ProviderData = json.RawMessage(`{"late": true}`)
	late.UpdatedAt = b.now.Add(time.Hour)
	err := s.MessageUpdate(b.ctx, late, chat.MessageStreaming)
	require.ErrorIs(t, err, store.ErrStale)
	require.NotErrorIs(t, err, store.ErrNotFound)
	require.ErrorContains(t, err, "status is complete")

	require.Equal(t, before, rowJSON(t, s, "messages", seg.ID))
	got, err := s.MessageGet(b.ctx, seg.ID)
	require.NoError(t, err)
	seg.RequestID, seg.Kind = "r1", chat.KindText
	require.Equal(t, seg, got)
}

// Writes from a status the caller expects go through: a run that waited for approval runs
// again, then ends; any of several expected statuses will do.
func TestRunUpdateFromExpectedStatus(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)

	run.Status = chat.RunAwaitingApproval
	run.LastActivityAt = b.now.Add(time.Millisecond)
	require.NoError(t, s.RunUpdate(b.ctx, run, chat.RunRunning))
	run.Status = chat.RunRunning
	run.LastActivityAt = b.now.Add(2 * time.Millisecond)
	require.NoError(t, s.RunUpdate(b.ctx, run, chat.ActiveRunStatuses()...))

	done := endRun(t, s, b, run, chat.RunDone)
	got, err := s.RunGet(b.ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, done, got)
}

// A segment closes from streaming; a tool call that waited for approval is approved
// (streaming to streaming, its tool status awaiting_approval to running), then ends.
func TestMessageUpdateFromExpectedStatus(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	seg := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 2, Role: chat.RoleAssistant, Kind: chat.KindText, Status: chat.MessageStreaming, CreatedAt: b.now}
	require.NoError(t, s.MessageInsert(b.ctx, seg))
	seg.Content = "let me look"
	seg.Status = chat.MessageComplete
	seg.ProviderData = json.RawMessage(`{"signature": "s"}`)
	seg.UpdatedAt = b.now.Add(time.Second)
	require.NoError(t, s.MessageUpdate(b.ctx, seg, chat.MessageStreaming))
	got, err := s.MessageGet(b.ctx, seg.ID)
	require.NoError(t, err)
	require.Equal(t, seg.Content, got.Content)
	require.Equal(t, chat.MessageComplete, got.Status)
	require.JSONEq(t, `{"signature": "s"}`, string(got.ProviderData))
	require.Equal(t, seg.UpdatedAt, got.UpdatedAt)

	tool := chat.Message{
		ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 3, Role: chat.RoleTool, Kind: chat.KindText,
		Status: chat.MessageStreaming, CreatedAt: b.now,
		Tool: &chat.ToolCall{CallID: "c1", Name: "rm", Input: json.RawMessage(`{}`), Status: chat.ToolAwaitingApproval},
	}
	require.NoError(t, s.MessageInsert(b.ctx, tool))
	tool.Tool.Status = chat.ToolRunning
	tool.UpdatedAt = b.now.Add(2 * time.Second)
	require.NoError(t, s.MessageUpdate(b.ctx, tool, chat.MessageStreaming))
	got, err = s.MessageGet(b.ctx, tool.ID)
	require.NoError(t, err)
	require.Equal(t, chat.MessageStreaming, got.Status)
	require.Equal(t, chat.ToolRunning, got.Tool.Status)
	require.Equal(t, tool.UpdatedAt, got.UpdatedAt)

	out := "removed"
	tool.Tool.Output = &out
	tool.Tool.Status = chat.ToolOK
	tool.Status = chat.MessageComplete
	tool.UpdatedAt = b.now.Add(3 * time.Second)
	require.NoError(t, s.MessageUpdate(b.ctx, tool, chat.MessageStreaming))
	got, err = s.MessageGet(b.ctx, tool.ID)
	require.NoError(t, err)
	tool.RequestID = "r1"
	require.Equal(t, tool, got)
}

// A row that does not exist is not found, not stale, whatever was expected of it.
func TestUpdateOfMissingRowIsNotFound(t *testing.T) {
	s, b := setup(t)
	run := chat.Run{ID: uuid.New(), SessionID: b.session.ID, RequestID: "r1", Status: chat.RunDone, StartedAt: b.now, LastActivityAt: b.now}
	err := s.RunUpdate(b.ctx, run, chat.ActiveRunStatuses()...)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NotErrorIs(t, err, store.ErrStale)

	m := chat.Message{ID: uuid.New(), SessionID: b.session.ID, Position: 1, Role: chat.RoleAssistant, Status: chat.MessageComplete, CreatedAt: b.now}
	err = s.MessageUpdate(b.ctx, m, chat.MessageStreaming)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NotErrorIs(t, err, store.ErrStale)

	_, err = s.MessageGet(b.ctx, m.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// An update that expects nothing is a bug in the caller: it is refused before any
// statement is sent, so it cannot write unguarded.
func TestUpdateWithoutExpectedStatusSendsNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, b := setup(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = store.NewMetrics(reg) })
	run, _ := startRun(t, s, b, "r1", 1)
	seg := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 2, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	require.NoError(t, s.MessageInsert(b.ctx, seg))
	runBefore, segBefore := rowJSON(t, s, "runs", run.ID), rowJSON(t, s, "messages", seg.ID)
	sent := func() uint64 {
		counts, _ := statementCounts(t, reg)
		var n uint64
		for _, c := range counts {
			n += c
		}
		return n
	}
	n := sent()

	run.Status = chat.RunDone
	err := s.RunUpdate(b.ctx, run)
	require.ErrorContains(t, err, "no expected status")
	require.NotErrorIs(t, err, store.ErrNotFound)
	require.NotErrorIs(t, err, store.ErrStale)

	seg.Status = chat.MessageComplete
	err = s.MessageUpdate(b.ctx, seg)
	require.ErrorContains(t, err, "no expected status")
	require.NotErrorIs(t, err, store.ErrNotFound)
	require.NotErrorIs(t, err, store.ErrStale)

	require.Equal(t, n, sent(), "no statement is sent")
	require.Equal(t, runBefore, rowJSON(t, s, "runs", run.ID))
	require.Equal(t, segBefore, rowJSON(t, s, "messages", seg.ID))
}

// Two writers race to end one run (a finish and an abandonment, say): the one that waited
// for the other's row lock sees the run as the other left it, and is stale.
func TestRunUpdateRaceHasOneWinner(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	locked, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.InTx(b.ctx, func(tx *store.Store) error {
			done := run
			done.Status = chat.RunDone
			err := tx.RunUpdate(b.ctx, done, chat.ActiveRunStatuses()...)
			close(locked)
			<-release
			return err
		})
	}()
	<-locked

	second := make(chan error, 1)
	go func() {
		cancelled := run
		cancelled.Status = chat.RunCancelled
		second <- s.RunUpdate(b.ctx, cancelled, chat.ActiveRunStatuses()...)
	}()

	// Wait until the second update is blocked on the first one's row lock.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for waiting := false; !waiting; {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("the second update never waited for the first")
		}
		require.NoError(t, s.Pool().QueryRow(b.ctx,
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting))
	}
	close(release)
	require.NoError(t, <-first)
	err := <-second
	require.ErrorIs(t, err, store.ErrStale)
	require.ErrorContains(t, err, "status is done")
	got, err := s.RunGet(b.ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, got.Status)
}

// The janitor's deadlines: a sandbox is listed idle once unused since the cut-off, and
// paused once paused since it; the conditional writes refuse a sandbox that changed.
func TestSessionSandboxDeadlines(t *testing.T) {
	s, b := setup(t)
	t0 := b.now
	require.NoError(t, s.SessionSetSandbox(b.ctx, b.session.ID, "sb1", t0))
	idle, err := s.SessionSandboxesIdle(b.ctx, t0.Add(-time.Second), 10)
	require.NoError(t, err)
	require.Empty(t, idle, "used after the cut-off")
	idle, err = s.SessionSandboxesIdle(b.ctx, t0, 10)
	require.NoError(t, err)
	require.Equal(t, []chat.SessionSandbox{{SessionID: b.session.ID, SandboxID: "sb1"}}, idle)

	// Used again: no longer idle by the old cut-off, and the idle pause is refused.
	require.NoError(t, s.SessionSandboxUsed(b.ctx, b.session.ID, t0.Add(time.Minute)))
	ok, err := s.SessionSandboxPauseIdle(b.ctx, b.session.ID, "sb1", t0, t0.Add(time.Minute))
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = s.SessionSandboxPauseIdle(b.ctx, b.session.ID, "other", t0.Add(time.Minute), t0.Add(time.Minute))
	require.NoError(t, err)
	require.False(t, ok, "not the session's sandbox")
	ok, err = s.SessionSandboxPauseIdle(b.ctx, b.session.ID, "sb1", t0.Add(time.Minute), t0.Add(2*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	idle, err = s.SessionSandboxesIdle(b.ctx, t0.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, idle, "a paused sandbox is not idle")
	// A later pause does not move the stored one.
	require.NoError(t, s.SessionSandboxPaused(b.ctx, b.session.ID, "sb1", t0.Add(time.Hour)))
	paused, err := s.SessionSandboxesPaused(b.ctx, t0.Add(2*time.Minute), 10)
	require.NoError(t, err)
	require.Len(t, paused, 1)

	ok, err = s.SessionSandboxKilled(b.ctx, b.session.ID, "sb1", t0.Add(time.Minute), t0.Add(3*time.Minute))
	require.NoError(t, err)
	require.False(t, ok, "paused after the cut-off")
	ok, err = s.SessionSandboxKilled(b.ctx, b.session.ID, "sb1", t0.Add(2*time.Minute), t0.Add(3*time.Minute))
	require.NoError(t, err)
	require.True(t, ok)
	id, err := s.SessionSandbox(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Empty(t, id)
	killed, err := s.SessionSandboxKilledAt(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Equal(t, t0.Add(3*time.Minute), *killed)
	paused, err = s.SessionSandboxesPaused(b.ctx, t0.Add(time.Hour), 10)
	require.NoError(t, err)
	require.Empty(t, paused)

	// A new sandbox forgets the kill.
	require.NoError(t, s.SessionSetSandbox(b.ctx, b.session.ID, "sb2", t0.Add(4*time.Minute)))
	killed, err = s.SessionSandboxKilledAt(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Nil(t, killed)
}
