package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/chat"
)

// SandboxStore keeps each session's sandbox id and the times its deadlines count from
// (chatd: the sessions table). The store package implements it; the agent never sees the
// database itself.
type SandboxStore interface {
	SessionSandbox(ctx context.Context, sessionID uuid.UUID) (string, error)
	// SessionSetSandbox records a new sandbox ("" for none), used at now and running.
	SessionSetSandbox(ctx context.Context, sessionID uuid.UUID, sandboxID string, now time.Time) error
	// SessionSandboxKilledAt is when the janitor killed the session's last sandbox; nil
	// when it did not, or the session has a new one.
	SessionSandboxKilledAt(ctx context.Context, sessionID uuid.UUID) (*time.Time, error)
	// SessionSandboxUsed records that the session's sandbox runs and was used at now.
	SessionSandboxUsed(ctx context.Context, sessionID uuid.UUID, now time.Time) error
	// SessionSandboxPaused records that sandboxID was paused at now, unless it already was.
	SessionSandboxPaused(ctx context.Context, sessionID uuid.UUID, sandboxID string, now time.Time) error
	// SessionSandboxPauseIdle records the janitor's pause of sandboxID at now, only when it
	// runs and was last used no later than idleBefore; it reports whether it did.
	SessionSandboxPauseIdle(ctx context.Context, sessionID uuid.UUID, sandboxID string, idleBefore, now time.Time) (bool, error)
	// SessionSandboxKilled forgets sandboxID, killed at now, only when it has been paused
	// since no later than pausedBefore; it reports whether it did. Its workspace is kept
	// until the retention has passed (see WorkspaceStore).
	SessionSandboxKilled(ctx context.Context, sessionID uuid.UUID, sandboxID string, pausedBefore, now time.Time) (bool, error)
	// SessionWorkspace returns the sandbox whose workspace is the session's newest (its
	// sandbox's now, or the last one it had, not removed yet; "" for none) and whether
	// this node made it.
	SessionWorkspace(ctx context.Context, sessionID uuid.UUID) (string, bool, error)
	WorkspaceStore
}

// WorkspaceStore keeps a record of every sandbox a session has had, until its workspace
// is removed (chatd: the workspaces table): SessionSetSandbox records the new one and
// releases the others, SessionSandboxKilled releases the killed one, and deleting the
// session marks them all deleted.
type WorkspaceStore interface {
	// SessionDeletedWorkspaces lists the sandboxes of the deleted session sessionID whose
	// workspaces are not removed yet; none when the session is not deleted.
	SessionDeletedWorkspaces(ctx context.Context, sessionID uuid.UUID) ([]string, error)
	// WorkspaceRemoved forgets the workspace of sandboxID, removed, and reports whether
	// its record was there. A sandbox still its session's keeps its record.
	WorkspaceRemoved(ctx context.Context, sandboxID string) (bool, error)
}

// Sandboxes gives each session one sandbox, reused by its runs: the id is stored with the
// session, and a session whose sandbox was killed gets a new one when it next needs one.
// It stores when each sandbox was last used and when it was paused: the deadlines the
// SandboxJanitor enforces. It counts the tool calls running in this process per session,
// and the janitor leaves a sandbox with one running alone. It removes the workspaces of
// sandboxes no session uses any more: a deleted session's (RemoveDeleted), and, through
// the janitor, those whose retention has passed.
type Sandboxes struct {
	provider sandbox.Provider
	store    SandboxStore
	clock    clockwork.Clock
	metrics  *Metrics

	mu      sync.Mutex
	locks   map[uuid.UUID]*sessionLock
	running map[uuid.UUID]int // tool calls running, per session
	// gets counts Get calls per session while calls run, so a call's end records use
	// only when the call used the sandbox: a tool that needs none (current_time) costs
	// no statement.
	gets map[uuid.UUID]uint64
}

// sessionLock serializes the sandbox operations of one session: two tool calls of one
// step must not both find "no sandbox yet" and create two.
type sessionLock struct {
	mu   sync.Mutex
	refs int
}

func (s *Sandboxes) lock(sessionID uuid.UUID) (unlock func()) {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = make(map[uuid.UUID]*sessionLock)
	}
	l := s.locks[sessionID]
	if l == nil {
		l = &sessionLock{}
		s.locks[sessionID] = l
	}
	l.refs++
	s.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		s.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(s.locks, sessionID)
		}
		s.mu.Unlock()
	}
}

// SandboxesOption configures Sandboxes.
type SandboxesOption func(*Sandboxes)

// WithMetrics makes the sandboxes count the workspaces they remove in m. Without it they
// count nowhere.
func WithMetrics(m *Metrics) SandboxesOption {
	return func(s *Sandboxes) { s.metrics = m }
}

// NewSandboxes returns session sandboxes from provider, their ids and deadlines kept in
// store, timed by clock (nil for the real one).
func NewSandboxes(provider sandbox.Provider, store SandboxStore, clock clockwork.Clock, opts ...SandboxesOption) *Sandboxes {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	s := &Sandboxes{provider: provider, store: store, clock: clock, metrics: discardMetrics(), running: map[uuid.UUID]int{}, gets: map[uuid.UUID]uint64{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Replacement says why Get made a new sandbox where the session had one.
type Replacement int

const (
	// NotReplaced: the sandbox is the session's existing one, or its first.
	NotReplaced Replacement = iota
	// ReplacedIdle: the janitor killed the session's sandbox after it sat paused.
	ReplacedIdle
	// ReplacedLost: the stored sandbox was gone (killed, or lost with its machine).
	ReplacedLost
)

// Notice is what the transcript says of the replacement, "" for NotReplaced.
func (r Replacement) Notice() string { return r.NoticeWith(nil, false) }

// NoticeWith is Notice naming the files the old sandbox had (lost: the new one has none
// of them), more when the list was cut.
func (r Replacement) NoticeWith(lost []File, more bool) string {
	n := r.notice()
	if n == "" || len(lost) == 0 {
		return n
	}
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(n, "."))
	b.WriteString(". They were:")
	for _, f := range lost {
		fmt.Fprintf(&b, " %s (%s),", f.Path, humanSize(f.Size))
	}
	out := strings.TrimSuffix(b.String(), ",")
	if more {
		out += ", and more"
	}
	return out + "."
}

func (r Replacement) notice() string {
	switch r {
	case ReplacedIdle:
		return "The previous sandbox was stopped after it sat idle; this is a new one: files from before are gone."
	case ReplacedLost:
		return "The previous sandbox was lost; this is a new one: files from before are gone."
	}
	return ""
}

// Get returns the session's sandbox, resumed if it was paused, or a new one; the
// Replacement says whether the new one replaces one the session had. Using it counts
// as using the sandbox: its idle time starts again.
func (s *Sandboxes) Get(ctx context.Context, sessionID uuid.UUID) (sandbox.Sandbox, Replacement, error) {
	sb, r, _, err := s.get(ctx, sessionID)
	return sb, r, err
}

// Acquire is Get for a tool call: with the notice the transcript gets when the sandbox
// replaces one the session had ("" otherwise), which names the files the old one had
// when its workspace is still on this node (the seed's files summary: the model must
// not expect them, and knows what to ask for or make again).
func (s *Sandboxes) Acquire(ctx context.Context, sessionID uuid.UUID) (sandbox.Sandbox, string, error) {
	sb, r, prev, err := s.get(ctx, sessionID)
	if err != nil || r == NotReplaced {
		return sb, "", err
	}
	var lost []File
	more := false
	if prev != "" {
		lost, more, _ = s.listWorkspace(prev, maxLostFiles)
	}
	return sb, r.NoticeWith(lost, more), nil
}

// maxLostFiles bounds the files a replacement's notice names.
const maxLostFiles = 50

// get is Get, with the sandbox whose workspace the session had last when that is on
// this node ("" otherwise): what a replacement lost.
func (s *Sandboxes) get(ctx context.Context, sessionID uuid.UUID) (sandbox.Sandbox, Replacement, string, error) {
	defer s.lock(sessionID)()
	s.mu.Lock()
	if s.running[sessionID] > 0 {
		s.gets[sessionID]++
	}
	s.mu.Unlock()
	id, err := s.store.SessionSandbox(ctx, sessionID)
	if err != nil {
		return nil, NotReplaced, "", fmt.Errorf("look up the session's sandbox: %w", err)
	}
	// What the session's last sandbox had, in case this one replaces it.
	prev, prevHere, err := s.store.SessionWorkspace(ctx, sessionID)
	if err != nil {
		return nil, NotReplaced, "", fmt.Errorf("look up the session's workspace: %w", err)
	}
	replaced := NotReplaced
	if id != "" {
		sb, err := s.provider.Connect(ctx, id)
		if err == nil {
			if err := s.store.SessionSandboxUsed(ctx, sessionID, s.clock.Now()); err != nil {
				return nil, NotReplaced, "", fmt.Errorf("mark the session's sandbox used: %w", err)
			}
			return sb, NotReplaced, "", nil
		}
		if !errors.Is(err, sandbox.ErrGone) {
			return nil, NotReplaced, "", fmt.Errorf("connect to sandbox %s: %w", id, err)
		}
		replaced = ReplacedLost
	} else {
		killed, err := s.store.SessionSandboxKilledAt(ctx, sessionID)
		if err != nil {
			return nil, NotReplaced, "", fmt.Errorf("look up the session's sandbox: %w", err)
		}
		if killed != nil {
			replaced = ReplacedIdle
		}
	}
	sb, err := s.provider.Create(ctx)
	if err != nil {
		return nil, NotReplaced, "", fmt.Errorf("create a sandbox: %w", err)
	}
	if err := s.store.SessionSetSandbox(ctx, sessionID, sb.ID(), s.clock.Now()); err != nil {
		// Not recorded (the session was deleted meanwhile, say): nothing else knows the
		// sandbox, so it goes whole, workspace and all.
		_ = s.provider.Remove(context.WithoutCancel(ctx), sb.ID())
		return nil, NotReplaced, "", fmt.Errorf("store the session's sandbox: %w", err)
	}
	if !prevHere {
		prev = ""
	}
	return sb, replaced, prev, nil
}

// Begin counts a tool call running for the session until the returned end is called:
// the janitor never pauses a sandbox with a call running. end records the sandbox as
// used then, when the call used it, so its idle time counts from the end of the call.
func (s *Sandboxes) Begin(sessionID uuid.UUID) (end func(context.Context) error) {
	s.mu.Lock()
	s.running[sessionID]++
	start := s.gets[sessionID]
	s.mu.Unlock()
	var once sync.Once
	return func(ctx context.Context) error {
		var err error
		once.Do(func() {
			s.mu.Lock()
			used := s.gets[sessionID] != start
			if s.running[sessionID]--; s.running[sessionID] <= 0 {
				delete(s.running, sessionID)
				delete(s.gets, sessionID)
			}
			s.mu.Unlock()
			if used {
				err = s.store.SessionSandboxUsed(ctx, sessionID, s.clock.Now())
			}
		})
		return err
	}
}

// busy reports whether a tool call of the session runs in this process.
func (s *Sandboxes) busy(sessionID uuid.UUID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[sessionID] > 0
}

// Pause pauses the session's sandbox, if it has a live one, and records when: the
// janitor kills it SandboxKillAfter later unless something resumes it.
func (s *Sandboxes) Pause(ctx context.Context, sessionID uuid.UUID) error {
	return s.each(ctx, sessionID, func(ctx context.Context, id string) error {
		if err := s.provider.Pause(ctx, id); err != nil {
			return err
		}
		return s.store.SessionSandboxPaused(ctx, sessionID, id, s.clock.Now())
	})
}

// Resume resumes the session's sandbox, if it has a live one: it runs, and its idle
// time starts again.
func (s *Sandboxes) Resume(ctx context.Context, sessionID uuid.UUID) error {
	return s.each(ctx, sessionID, func(ctx context.Context, id string) error {
		if _, err := s.provider.Connect(ctx, id); err != nil {
			return err
		}
		return s.store.SessionSandboxUsed(ctx, sessionID, s.clock.Now())
	})
}

// Kill kills the session's sandbox. Its next use creates a new one. Its workspace stays
// (a deleted session's goes with RemoveDeleted).
func (s *Sandboxes) Kill(ctx context.Context, sessionID uuid.UUID) error {
	return s.each(ctx, sessionID, s.provider.Kill)
}

// RemoveDeleted removes the workspaces of the deleted session sessionID that this node
// holds, killing what still runs in them first, and returns how many it removed. It is
// for right after the deletion (store.SessionDelete): a session that is not deleted has
// none to remove. The janitors remove the rest: other nodes' (sandboxes are per node),
// and any that fails here.
func (s *Sandboxes) RemoveDeleted(ctx context.Context, sessionID uuid.UUID) (int, error) {
	ids, err := s.store.SessionDeletedWorkspaces(ctx, sessionID)
	if err != nil {
		return 0, fmt.Errorf("list the deleted session's workspaces: %w", err)
	}
	removed := 0
	var errs []error
	for _, id := range ids {
		ok, err := s.removeWorkspace(ctx, chat.Workspace{SessionID: sessionID, SandboxID: id, SessionDeleted: true})
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// removeWorkspace removes the workspace of w's sandbox, which is no longer its session's
// (WorkspacesDue or SessionDeletedWorkspaces said so), and forgets it; it reports
// whether it did. It does nothing, and reports false, while a tool call of the session
// runs in this process: it might still be using that sandbox (a call that began before
// the sandbox was replaced).
func (s *Sandboxes) removeWorkspace(ctx context.Context, w chat.Workspace) (bool, error) {
	defer s.lock(w.SessionID)()
	if s.busy(w.SessionID) {
		return false, nil
	}
	// Removed first, then forgotten: a removal that fails, or a process that dies in
	// between, leaves the record for a later pass to try again.
	if err := s.provider.Remove(ctx, w.SandboxID); err != nil {
		return false, fmt.Errorf("remove the workspace of sandbox %s: %w", w.SandboxID, err)
	}
	forgot, err := s.store.WorkspaceRemoved(ctx, w.SandboxID)
	if err != nil {
		return false, fmt.Errorf("forget the workspace of sandbox %s: %w", w.SandboxID, err)
	}
	if !forgot {
		return false, nil // another removal (the janitor's, or a deletion's) counted it
	}
	reason := removedRetention
	if w.SessionDeleted {
		reason = removedDeleted
	}
	s.metrics.workspacesRemoved.WithLabelValues(reason).Inc()
	return true, nil
}

func (s *Sandboxes) each(ctx context.Context, sessionID uuid.UUID, do func(context.Context, string) error) error {
	defer s.lock(sessionID)()
	id, err := s.store.SessionSandbox(ctx, sessionID)
	if err != nil || id == "" {
		return err
	}
	if err := do(ctx, id); err != nil && !errors.Is(err, sandbox.ErrGone) {
		return err
	}
	return nil
}

// pauseIdle is the janitor's pause of sandboxID, unused since idleBefore. It does
// nothing, and reports false, when a tool call of the session runs in this process or
// the stored sandbox changed or was used since.
func (s *Sandboxes) pauseIdle(ctx context.Context, sessionID uuid.UUID, sandboxID string, idleBefore time.Time) (bool, error) {
	defer s.lock(sessionID)()
	if s.busy(sessionID) {
		return false, nil
	}
	// Recorded first: a sandbox whose record says running is never frozen.
	ok, err := s.store.SessionSandboxPauseIdle(ctx, sessionID, sandboxID, idleBefore, s.clock.Now())
	if err != nil || !ok {
		return false, err
	}
	if err := s.provider.Pause(ctx, sandboxID); err != nil && !errors.Is(err, sandbox.ErrGone) {
		// Not paused: a provider that cannot stop every process leaves them running. The
		// record says so again, as if used now, so that it is not killed as paused
		// KillAfter from now and a later pass tries again once it sat idle IdlePause.
		if uerr := s.store.SessionSandboxUsed(ctx, sessionID, s.clock.Now()); uerr != nil {
			err = errors.Join(err, uerr)
		}
		return false, fmt.Errorf("pause sandbox %s: %w", sandboxID, err)
	}
	return true, nil
}

// killPaused is the janitor's kill of sandboxID, paused since pausedBefore: the sandbox
// ends and the session forgets it. It does nothing, and reports false, when a tool call
// of the session runs in this process or the stored sandbox changed or was resumed.
func (s *Sandboxes) killPaused(ctx context.Context, sessionID uuid.UUID, sandboxID string, pausedBefore time.Time) (bool, error) {
	defer s.lock(sessionID)()
	if s.busy(sessionID) {
		return false, nil
	}
	// Forgotten first: a session never names a sandbox that is gone because of us; a
	// kill that fails leaves a process the next start-up's sweep ends.
	ok, err := s.store.SessionSandboxKilled(ctx, sessionID, sandboxID, pausedBefore, s.clock.Now())
	if err != nil || !ok {
		return false, err
	}
	if err := s.provider.Kill(ctx, sandboxID); err != nil && !errors.Is(err, sandbox.ErrGone) {
		return true, fmt.Errorf("kill sandbox %s: %w", sandboxID, err)
	}
	return true, nil
}
