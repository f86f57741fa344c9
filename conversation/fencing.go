package conversation

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// fencing is the journal's Store: every write of the actor passes through it, and the
// first one the lease's fence refuses (store.ErrFenced: another node took the session
// over) marks the journal fenced out. From then on writes fail at once, without asking
// the database, and the actor stops at the end of the step it is in.
type fencing struct {
	Store
	j *journal
}

// write makes one write of the actor, unless the journal is fenced out (then it fails at
// once, without asking the database), and marks the journal fenced out when the
// database refuses it for the fence.
func (f fencing) write(w func() error) error {
	if f.j.fencedOut.Load() {
		return store.ErrFenced
	}
	err := w()
	if errors.Is(err, store.ErrFenced) && f.j.fencedOut.CompareAndSwap(false, true) {
		f.j.metrics.fencedWrites.Inc()
		f.j.log().Warn().Err(err).Msg("a write was refused by the lease's fence: another node holds the session")
	}
	return err
}

func (f fencing) MessageInsert(ctx context.Context, m chat.Message) error {
	return f.write(func() error { return f.Store.MessageInsert(ctx, m) })
}

func (f fencing) MessageUpdate(ctx context.Context, m chat.Message, from ...chat.MessageStatus) error {
	return f.write(func() error { return f.Store.MessageUpdate(ctx, m, from...) })
}

func (f fencing) MessagesSettleRun(ctx context.Context, runID uuid.UUID, status chat.MessageStatus, now time.Time, except ...uuid.UUID) (n int64, err error) {
	err = f.write(func() (err error) {
		n, err = f.Store.MessagesSettleRun(ctx, runID, status, now, except...)
		return err
	})
	return n, err
}

func (f fencing) RunStart(ctx context.Context, run chat.Run, user chat.Message, maxActive int) error {
	return f.write(func() error { return f.Store.RunStart(ctx, run, user, maxActive) })
}

func (f fencing) RunStartRetry(ctx context.Context, run chat.Run, maxActive int) error {
	return f.write(func() error { return f.Store.RunStartRetry(ctx, run, maxActive) })
}

func (f fencing) MessageDeleteEmpty(ctx context.Context, id uuid.UUID) (deleted bool, err error) {
	err = f.write(func() (err error) {
		deleted, err = f.Store.MessageDeleteEmpty(ctx, id)
		return err
	})
	return deleted, err
}

func (f fencing) RunUpdate(ctx context.Context, run chat.Run, from ...chat.RunStatus) error {
	return f.write(func() error { return f.Store.RunUpdate(ctx, run, from...) })
}

func (f fencing) RunContinue(ctx context.Context, run chat.Run, maxActive int, from ...chat.RunStatus) error {
	return f.write(func() error { return f.Store.RunContinue(ctx, run, maxActive, from...) })
}
