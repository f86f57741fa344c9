package conversation

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

type runInfoIntent struct {
	runID uuid.UUID
	reply chan result[chat.Run]
}

// Run returns one of the session's runs as its tabs know it: the active run live (its
// status, pending approval and progress as they are now), an ended one as stored, with
// the writes still queued for it laid over. Resumable is set for the session's latest
// run when chat.resume would continue it. A run of another session, or none, is
// CodeNotFound.
func (a *Actor) Run(ctx context.Context, runID uuid.UUID) (chat.Run, error) {
	return call(ctx, a, func(r chan result[chat.Run]) intent { return &runInfoIntent{runID, r} })
}

func (a *Actor) runInfo(id uuid.UUID) (chat.Run, error) {
	if err := a.load(); err != nil {
		return chat.Run{}, a.loadError(err)
	}
	if a.session == nil {
		return chat.Run{}, errorf(CodeNotFound, "run %s not found", id)
	}
	if a.run != nil && a.run.info.ID == id {
		return *runView(a.run), nil
	}
	latest, err := a.journal.latestRun()
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return chat.Run{}, a.storageError("read the run", err)
	}
	if err == nil && latest.ID == id {
		return withResumable(latest), nil
	}
	r, err := a.journal.runGet(id)
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && r.SessionID != a.id):
		return chat.Run{}, errorf(CodeNotFound, "run %s not found", id)
	case err != nil:
		return chat.Run{}, a.storageError("read the run", err)
	}
	return r, nil
}
