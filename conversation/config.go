package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/journal"
	"github.com/chatd/chatd/store"
)

// Defaults for Config's zero fields.
const (
	DefaultRingEvents       = 4096
	DefaultRingBytes        = 4 << 20
	DefaultMaxReplayBytes   = 512 << 10
	DefaultSnapshotMessages = 200
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultQuietRelease     = time.Minute
	DefaultAbandonAfter     = 30 * time.Minute
	DefaultMaxContentBytes  = 128 << 10
	DefaultInboxSize        = 16
	DefaultHistoryMessages  = 500
	DefaultMaxRecoveries    = 3
	// DefaultMaxQueued is Config.MaxQueued's default.
	DefaultMaxQueued = 10
	// DefaultProgressStoreInterval is Config.ProgressStoreInterval's default.
	DefaultProgressStoreInterval = 2 * time.Second
	// DefaultMaxRunsPerUser is chatd's default for MaxRunsPerUser (which, left 0, is no
	// limit): a person with a few tabs of agents at work, not a script.
	DefaultMaxRunsPerUser = 8

	// MaxHistoryLimit is the most messages one history page holds.
	MaxHistoryLimit = 200
)

// Store is what an actor needs of the database. *store.Store implements it; tests wrap
// the real one to inject failures.
type Store interface {
	SessionCreateLimited(ctx context.Context, sess chat.Session, max int) (chat.Session, error)
	MessagesByRun(ctx context.Context, runID uuid.UUID) ([]chat.Message, error)
	SessionAgentState(ctx context.Context, sessionID uuid.UUID) (json.RawMessage, error)
	MessagesPath(ctx context.Context, sessionID uuid.UUID, leaf *uuid.UUID, before int64, limit int) ([]chat.Message, bool, error)
	MessageChildren(ctx context.Context, sessionID uuid.UUID, parent *uuid.UUID) ([]uuid.UUID, error)
	MessageNewestBelow(ctx context.Context, sessionID, id uuid.UUID) (uuid.UUID, error)
	MessageGet(ctx context.Context, id uuid.UUID) (chat.Message, error)
	SessionSetLeaf(ctx context.Context, sessionID uuid.UUID, leaf *uuid.UUID) error
	MessageInsert(ctx context.Context, m chat.Message) error
	MessageUpdate(ctx context.Context, m chat.Message, from ...chat.MessageStatus) error
	MessagesSettleRun(ctx context.Context, runID uuid.UUID, status chat.MessageStatus, now time.Time, except ...uuid.UUID) (int64, error)
	RunStartCounted(ctx context.Context, run chat.Run, user chat.Message, maxActive int) (int, error)
	RunStartRetry(ctx context.Context, run chat.Run, user uuid.UUID, maxActive int) error
	RunByRequest(ctx context.Context, sessionID uuid.UUID, requestID string) (chat.Run, error)
	RunGet(ctx context.Context, id uuid.UUID) (chat.Run, error)
	RunLatest(ctx context.Context, sessionID uuid.UUID) (chat.Run, error)
	MessageDeleteEmpty(ctx context.Context, id uuid.UUID) (bool, error)
	RunUpdate(ctx context.Context, run chat.Run, from ...chat.RunStatus) error
	RunContinue(ctx context.Context, run chat.Run, maxActive int, from ...chat.RunStatus) error
	SessionOpen(ctx context.Context, id uuid.UUID, req store.OpenRequest) (store.Opened, error)
	LeaseRelease(ctx context.Context, id uuid.UUID, node string, token int64) error
	StreamLogRead(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]string, error)
	ApprovalRules(ctx context.Context, sessionID uuid.UUID) ([]chat.ApprovalRule, error)
	ApprovalRuleInsert(ctx context.Context, r chat.ApprovalRule) error
	ApprovalRuleDelete(ctx context.Context, sessionID, id uuid.UUID) (bool, error)
	QueuedInsert(ctx context.Context, m chat.Queued) (bool, error)
	QueuedDelete(ctx context.Context, sessionID uuid.UUID, requestID string) (bool, error)
	QueuedList(ctx context.Context, sessionID uuid.UUID) ([]chat.Queued, error)
}

var _ Store = (*store.Store)(nil)

// Config is shared by every actor of a process.
type Config struct {
	// Store persists the transcript. Required.
	Store Store
	// Journal is the node's persistence service (package journal): its sessions' write
	// queues, their retries, the stream log. Share one among the actors of a process
	// and run it as a service. When nil, each actor gets one of its own on Clock, with
	// no stream log.
	Journal *journal.Writer
	// Agent produces replies. Required.
	Agent Agent
	// Clock drives idle eviction and timestamps. Defaults to the real clock.
	Clock clockwork.Clock
	// Logger is the parent logger; each actor adds its session id.
	Logger zerolog.Logger

	// RingEvents and RingBytes bound the replay ring.
	RingEvents int
	RingBytes  int
	// MaxReplayBytes is the largest replay a hello gets; a longer gap is answered with a
	// snapshot. Keep it under the subscribers' queue size, or the replay itself would
	// overflow the queue.
	MaxReplayBytes int
	// SnapshotMessages is how many of the newest messages a snapshot holds.
	SnapshotMessages int
	// IdleTimeout is how long an actor with no subscribers and no active run lives.
	IdleTimeout time.Duration
	// QuietRelease is how long an actor with no active run keeps the newest messages it
	// holds in memory (up to 256 KiB of content, for snapshots and history), and the
	// events of its replay ring, once it is quiet (its last run ended, or it loaded
	// them): an idle tab on a long conversation then costs its connection, not the
	// conversation. The next snapshot, history read or run reads the messages again, in
	// one statement; a tab that comes back behind the last event gets a snapshot instead
	// of a replay. 0 (or negative): kept for the actor's life; chatd's default is
	// DefaultQuietRelease (CHATD_QUIET_RELEASE).
	QuietRelease time.Duration
	// Memory is told what quiet actors drop, to hand it back to the system; nil: no one
	// is told.
	Memory *MemoryReturner
	// AbandonAfter is how long a streaming run may go with no subscriber before it is
	// cancelled as abandoned. A run waiting for an approval is never abandoned.
	AbandonAfter time.Duration
	// MaxContentBytes is the largest user message chat.send accepts.
	MaxContentBytes int
	// InboxSize is the capacity of each actor's inbox.
	InboxSize int
	// HistoryMessages is how many of a session's newest messages a run's agent gets.
	HistoryMessages int
	// SuspendOnStop makes Stop (a server shutdown) leave the active run unfinished for
	// the next process to continue (a rolling restart): its open segment is stored,
	// interrupted, with its text, and the run keeps its status with cancel reason
	// shutdown, which its recovery does not count. Without it Stop ends the run
	// interrupted.
	SuspendOnStop bool
	// Lease, when set, makes this process one node of several on the database: an actor
	// runs only while it holds its session's lease, and its writes are fenced by it
	// (see LeaseConfig). Without it the process must be alone on its database.
	Lease *LeaseConfig
	// MaxRunsPerUser bounds the active runs (running, awaiting approval or paused) one
	// user has at once, across their sessions and every process on the database: a send,
	// retry or continue past it is refused with CodeRateLimited and stores nothing. The
	// anonymous user ("") has no limit. 0 is no limit.
	MaxRunsPerUser int
	// DoubleText is what a chat.send does while a run is active when it names no policy
	// (CHATD_DOUBLE_TEXT). Defaults to chat.DoubleTextReject.
	DoubleText chat.DoubleText
	// MaxQueued is the most messages that may wait behind a session's active run (the
	// queue policy); one more is refused with CodeQueueFull. Defaults to DefaultMaxQueued.
	MaxQueued int
	// MaxSessionsPerUser bounds the live sessions one user has, across every process on
	// the database: a hello that would create one more is refused with CodeTooManySessions
	// and creates nothing. The anonymous user ("") has no limit. 0 is no limit.
	MaxSessionsPerUser int
	// RunCounts keeps the database's count of each user's active runs, so a start that
	// surely is under MaxRunsPerUser calls the model while its row is stored (see
	// runcount.go). Share one among the actors of a process; nil: every limited start
	// waits for the database before its model is called.
	RunCounts *RunCounts
	// MaxRecoveries is how often a run whose process died is continued; the next time it
	// ends interrupted, so a run that crashes its process cannot burn tokens forever.
	MaxRecoveries int
	// ModelName is stored on every run (runs.model); "" when unknown.
	ModelName string
	// Metrics counts events, catch-ups and runs; share one among all actors. nil counts
	// into metrics nobody exposes.
	Metrics *Metrics
	// Evictions, when set, runs the actors' idle-eviction deadlines (IdleTimeout), and
	// Abandonments their abandonment deadlines (AbandonAfter): background services the
	// process starts and stops. When nil, each actor keeps a timer of its own on Clock.
	Evictions    *Deadlines
	Abandonments *Deadlines
	// CoalesceDeltas, when positive, merges the text a segment streams within this long
	// of its first piece into one chat.delta (at most MaxCoalescedDelta bytes), timed on
	// Clock: fewer, larger frames for a little latency. Any other event of the run, the
	// segment's end and a hello publish the held text first. 0 publishes every piece as
	// it comes. CoalesceAdaptive merges only what arrives while the actor is behind:
	// a piece is published as soon as the actor has nothing more queued, so an idle
	// process adds no latency and a busy one sends fewer, larger frames; while Pacer
	// has a window open (the process is behind), text is held for that window.
	CoalesceDeltas time.Duration
	// Pacer, in adaptive mode, opens a window of coalescing while the process is behind;
	// share one among all the actors of a process. nil: the window stays closed.
	Pacer *Pacer
	// ProgressStoreInterval bounds how often a run's progress (Emitter.Progress) is
	// written to the database: a report is stored at once when none was within this long
	// (timed on Clock), and the reports within the window only by the last of them, at
	// its end. Every report is published at once; the latest is stored with the run's
	// end or suspension in any case.
	ProgressStoreInterval time.Duration

	// onParked, when set, is called each time the actor's loop gives its goroutine
	// back (tests).
	onParked func()
}

// withDefaults returns c with its zero fields filled in.
func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Metrics == nil {
		c.Metrics = discardMetrics()
	}
	if c.Journal == nil {
		c.Journal = journal.NewWriter(journal.Config{Clock: c.Clock, Logger: c.Logger, Metrics: c.Metrics.journal})
	}
	setDefault(&c.RingEvents, DefaultRingEvents)
	setDefault(&c.RingBytes, DefaultRingBytes)
	setDefault(&c.MaxReplayBytes, DefaultMaxReplayBytes)
	setDefault(&c.SnapshotMessages, DefaultSnapshotMessages)
	setDefault(&c.IdleTimeout, DefaultIdleTimeout)
	setDefault(&c.AbandonAfter, DefaultAbandonAfter)
	setDefault(&c.MaxContentBytes, DefaultMaxContentBytes)
	setDefault(&c.InboxSize, DefaultInboxSize)
	setDefault(&c.HistoryMessages, DefaultHistoryMessages)
	setDefault(&c.MaxRecoveries, DefaultMaxRecoveries)
	setDefault(&c.ProgressStoreInterval, DefaultProgressStoreInterval)
	setDefault(&c.DoubleText, chat.DoubleTextReject)
	setDefault(&c.MaxQueued, DefaultMaxQueued)
	return c
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Validate reports the first field that is missing or out of range.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Store == nil:
		return errors.New("conversation config: Store is required")
	case c.Agent == nil:
		return errors.New("conversation config: Agent is required")
	case c.RingEvents < 1:
		return fmt.Errorf("conversation config: RingEvents %d is below 1", c.RingEvents)
	case c.RingBytes < 1:
		return fmt.Errorf("conversation config: RingBytes %d is below 1", c.RingBytes)
	case c.MaxReplayBytes < 1:
		return fmt.Errorf("conversation config: MaxReplayBytes %d is below 1", c.MaxReplayBytes)
	case c.SnapshotMessages < 1:
		return fmt.Errorf("conversation config: SnapshotMessages %d is below 1", c.SnapshotMessages)
	case c.IdleTimeout < 0:
		return fmt.Errorf("conversation config: IdleTimeout %s is negative", c.IdleTimeout)
	case c.AbandonAfter < 0:
		return fmt.Errorf("conversation config: AbandonAfter %s is negative", c.AbandonAfter)
	case c.MaxContentBytes < 1:
		return fmt.Errorf("conversation config: MaxContentBytes %d is below 1", c.MaxContentBytes)
	case c.InboxSize < 1:
		return fmt.Errorf("conversation config: InboxSize %d is below 1", c.InboxSize)
	case !c.DoubleText.Valid():
		return fmt.Errorf("conversation config: DoubleText %q is not a policy", c.DoubleText)
	case c.ProgressStoreInterval < 0:
		return fmt.Errorf("conversation config: ProgressStoreInterval %s is negative", c.ProgressStoreInterval)
	case c.CoalesceDeltas < 0 && c.CoalesceDeltas != CoalesceAdaptive:
		return fmt.Errorf("conversation config: CoalesceDeltas %s is negative", c.CoalesceDeltas)
	case c.Lease != nil && (c.Lease.Node == nil || c.Lease.Addr == nil || c.Lease.TTL <= 0):
		return errors.New("conversation config: Lease needs a Node, an Addr and a positive TTL")
	}
	return nil
}
