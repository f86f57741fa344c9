package hub

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store"
)

// RunStore is what Sessions needs of the database for runs. *store.Store implements it.
type RunStore interface {
	RunsPage(ctx context.Context, sessionID uuid.UUID, statuses []chat.RunStatus, after *store.RunCursor, limit int) ([]chat.Run, error)
	RunLatest(ctx context.Context, sessionID uuid.UUID) (chat.Run, error)
	SessionForClientID(ctx context.Context, owner, clientID string, now time.Time, max int) (uuid.UUID, bool, error)
	OwnerLiveSessions(ctx context.Context, owner string) ([]uuid.UUID, error)
	EraseOwner(ctx context.Context, owner string) (store.Erased, error)
}

// SendResult is what a message sent over HTTP did: the run it started (or, for a
// requestId the session has seen, the run it started then), or, for a message queued
// behind the active run (whileRunning queue), Queued.
type SendResult struct {
	Run    *chat.Run
	Queued bool
	// Steering: the message steers the active run, Run (whileRunning steer).
	Steering bool
}

// Run returns run runID of owner's session id as the session's actor knows it now
// (conversation.Actor.Run): the active run live, an ended one as stored.
func (s *Sessions) Run(ctx context.Context, owner string, id, runID uuid.UUID) (chat.Run, error) {
	if err := s.owned(ctx, owner, id); err != nil {
		return chat.Run{}, err
	}
	var run chat.Run
	err := s.hub.Do(ctx, id, func(a *conversation.Actor) (err error) {
		run, err = a.Run(ctx, runID)
		return err
	})
	return run, err
}

// Runs returns up to limit of the runs of owner's session id, newest first, of
// statuses (none: all), after the cursor (nil: from the newest). It reads the database
// once this node's writes for the session are stored: a run active on another node may
// trail its live state by that node's writes in flight. The session's latest run is
// Resumable when chat.resume would continue it.
func (s *Sessions) Runs(ctx context.Context, owner string, id uuid.UUID, statuses []chat.RunStatus, after *store.RunCursor, limit int) ([]chat.Run, error) {
	if err := s.owned(ctx, owner, id); err != nil {
		return nil, err
	}
	if a, ok := s.hub.Lookup(id); ok {
		_ = a.Flush(ctx) // an error: a write waits for its retry; read what there is
	}
	runs, err := s.runs.RunsPage(ctx, id, statuses, after, limit)
	if err != nil {
		return nil, s.fail(ctx, "list the runs", err)
	}
	if len(runs) == 0 {
		return runs, nil
	}
	latest, err := s.runs.RunLatest(ctx, id)
	if err != nil {
		return nil, s.fail(ctx, "read the latest run", err)
	}
	for i := range runs {
		if runs[i].ID == latest.ID {
			runs[i] = conversation.WithResumable(runs[i])
		}
	}
	return runs, nil
}

// Send sends a message to owner's session id as chat.send does: the same idempotency
// (requestId), policy while a run is active (whileRunning), limits and checks.
func (s *Sessions) Send(ctx context.Context, owner string, id uuid.UUID, req conversation.SendRequest) (SendResult, error) {
	if err := conversation.ValidateSend(req, s.maxContent()); err != nil {
		return SendResult{}, err
	}
	if err := s.owned(ctx, owner, id); err != nil {
		return SendResult{}, err
	}
	return s.send(ctx, id, req)
}

// Create returns the session a message sent without one (POST /v1/sessions) goes to:
// created for owner at the first request with req's requestId, found again at a
// repeated one, so retrying a request whose answer was lost creates nothing more. A
// message that would be refused creates no session; one more session than
// MaxSessionsPerUser is CodeTooManySessions. Send then sends req to it.
func (s *Sessions) Create(ctx context.Context, owner string, req conversation.SendRequest) (uuid.UUID, error) {
	if err := conversation.ValidateSend(req, s.maxContent()); err != nil {
		return uuid.Nil, err
	}
	id, deleted, err := s.runs.SessionForClientID(ctx, owner, startClientID(req.RequestID), s.hub.now(), s.hub.cfg.MaxSessionsPerUser)
	switch {
	case errors.Is(err, store.ErrSessionLimit):
		return uuid.Nil, &conversation.Error{Code: conversation.CodeTooManySessions, Message: "too many sessions for this user: delete one to start another"}
	case err != nil:
		return uuid.Nil, s.fail(ctx, "create the session", err)
	case deleted:
		return uuid.Nil, &conversation.Error{Code: conversation.CodeConflict, Message: "the session this requestId created was deleted: send with a new requestId"}
	}
	return id, nil
}

// startClientID is the client id (store.SessionForClientID) of the session a Start
// with requestID creates: its own namespace beside the AI SDK's chat ids.
func startClientID(requestID string) string { return "chatd.start:" + requestID }

func (s *Sessions) send(ctx context.Context, id uuid.UUID, req conversation.SendRequest) (SendResult, error) {
	var out SendResult
	err := s.hub.Do(ctx, id, func(a *conversation.Actor) error {
		res, err := a.Send(ctx, req)
		if err != nil {
			return err
		}
		if res.Status == conversation.StatusQueued {
			out = SendResult{Queued: true}
			return nil
		}
		run, err := a.Run(ctx, res.RunID)
		if err != nil {
			return err
		}
		out = SendResult{Run: &run, Steering: res.Status == conversation.StatusSteering || res.Status == conversation.StatusSteered}
		return nil
	})
	return out, err
}

// maxContent is the largest message the conversations take.
func (s *Sessions) maxContent() int {
	if n := s.hub.cfg.MaxContentBytes; n > 0 {
		return n
	}
	return conversation.DefaultMaxContentBytes
}

// Erasure is what erasing a user removed: their live sessions, deleted as Delete does,
// then every row left of them.
type Erasure struct {
	LiveSessions int `json:"liveSessions"`
	store.Erased
}

// Erase removes everything of owner (DELETE /v1/users/me, and the admin listener's
// DELETE /users/{id}): each live session is deleted as Delete deletes it (its run
// cancelled, its connections closed with 4004, its sandbox killed, its workspaces
// removed), then every row left of the user goes in one transaction (the deleted
// sessions' tombstones, runs, the stream log's chunks, webhook events). A second call
// finds nothing and removes nothing.
func (s *Sessions) Erase(ctx context.Context, owner string) (Erasure, error) {
	var e Erasure
	ids, err := s.runs.OwnerLiveSessions(ctx, owner)
	if err != nil {
		return e, s.fail(ctx, "list the user's sessions", err)
	}
	for _, id := range ids {
		if err := s.Delete(ctx, owner, id); err != nil && !errors.Is(err, ErrNotFound) {
			return e, err
		}
		e.LiveSessions++
	}
	if e.Erased, err = s.runs.EraseOwner(ctx, owner); err != nil {
		return e, s.fail(ctx, "erase the user", err)
	}
	s.log.Info().Int("live_sessions", e.LiveSessions).Int64("sessions", e.Sessions).Int64("runs", e.Runs).
		Int64("webhook_events", e.WebhookEvents).Msg("erased a user")
	return e, nil
}

// Files lists the workspace of owner's session id (sandbox.File, more when cut): its
// sandbox's, or the last one it had until the retention removes it; none when it has
// none. A workspace on another node's machine is CodeNotFound, saying so.
func (s *Sessions) Files(ctx context.Context, owner string, id uuid.UUID) ([]sandbox.File, bool, error) {
	if err := s.owned(ctx, owner, id); err != nil {
		return nil, false, err
	}
	if s.sandboxes == nil {
		return []sandbox.File{}, false, nil
	}
	files, more, err := s.sandboxes.Files(ctx, id)
	if errors.Is(err, sandbox.ErrNoWorkspace) {
		return []sandbox.File{}, false, nil
	}
	return files, more, s.fileError(ctx, err)
}

// OpenFile opens a file of the workspace of owner's session id: CodeBadRequest for a path
// outside it, CodeNotFound for none.
func (s *Sessions) OpenFile(ctx context.Context, owner string, id uuid.UUID, name string) (*os.File, fs.FileInfo, error) {
	if err := s.owned(ctx, owner, id); err != nil {
		return nil, nil, err
	}
	if s.sandboxes == nil {
		return nil, nil, &conversation.Error{Code: conversation.CodeNotFound, Message: "no such file: the session has no workspace"}
	}
	f, info, err := s.sandboxes.OpenFile(ctx, id, name)
	return f, info, s.fileError(ctx, err)
}

func (s *Sessions) fileError(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandbox.ErrBadPath):
		return &conversation.Error{Code: conversation.CodeBadRequest, Message: err.Error()}
	case errors.Is(err, sandbox.ErrNoWorkspace):
		return &conversation.Error{Code: conversation.CodeNotFound, Message: "no such file: the session has no workspace"}
	case errors.Is(err, sandbox.ErrWorkspaceElsewhere):
		return &conversation.Error{Code: conversation.CodeNotFound, Message: "the session's workspace is on the chatd node that made its sandbox, not this one"}
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission), strings.Contains(err.Error(), "path escapes from parent"):
		return &conversation.Error{Code: conversation.CodeNotFound, Message: "no such file in the workspace"}
	case ctx.Err() != nil:
		return ctx.Err()
	}
	s.log.Error().Err(err).Msg("read a session's workspace")
	return &conversation.Error{Code: conversation.CodeInternal, Message: "could not read the workspace"}
}
