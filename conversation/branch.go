package conversation

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// Branches. A session's messages form a tree (each has a parent, chat.Message.ParentID);
// its active path, from the first message to the active leaf, is what its tabs show,
// what snapshots and history carry, and what a new message answers. Only the active
// path is ever sent whole: an event that adds a message under the last one a tab holds
// grows its path, any other belongs to a branch the tab does not show (the rule every
// tab applies, docs/protocol.md). When the path changes otherwise (a branch selected,
// an edit, a regeneration), every tab gets branch.selected with the newest messages of
// the new path, which it shows instead of its own.

// SelectBranch makes the active path the branch through message id: its ancestors,
// itself, and the branch below it that was written last (where a run on it streams).
// Every tab gets branch.selected. A run goes on whichever branch is shown. Errors are
// *Error: CodeNotFound when id is no message of the session, CodeStorage.
func (a *Actor) SelectBranch(ctx context.Context, id uuid.UUID) error {
	_, err := call(ctx, a, func(r chan result[struct{}]) intent { return &branchIntent{id, r} })
	return err
}

// Branch returns up to limit messages before position before (0: the newest) of the
// branch through message id (as SelectBranch would show it), without selecting it.
// Errors are SelectBranch's, and CodeBadRequest for a limit outside 1..MaxHistoryLimit.
func (a *Actor) Branch(ctx context.Context, id uuid.UUID, before int64, limit int) (HistoryPage, error) {
	return call(ctx, a, func(r chan result[HistoryPage]) intent { return &branchReadIntent{id, before, limit, r} })
}

type (
	branchIntent struct {
		id    uuid.UUID
		reply chan result[struct{}]
	}
	branchReadIntent struct {
		id     uuid.UUID
		before int64
		limit  int
		reply  chan result[HistoryPage]
	}
)

func (a *Actor) selectBranch(id uuid.UUID) error {
	if err := a.load(); err != nil {
		return a.loadError(err)
	}
	if err := a.live(); err != nil {
		return err
	}
	leaf, err := a.leafThrough(id)
	if err != nil {
		return err
	}
	if sameID(&leaf, a.journal.leaf) {
		return nil // shown already
	}
	if err := a.journal.selectLeaf(leaf); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return a.gone("select the branch", err)
		}
		return a.storageError("select the branch", err)
	}
	a.publishBranch(&leaf)
	return nil
}

// leafThrough returns the leaf the branch through message id ends at.
func (a *Actor) leafThrough(id uuid.UUID) (uuid.UUID, error) {
	leaf, err := a.journal.newestBelow(id)
	if errors.Is(err, store.ErrNotFound) {
		return uuid.Nil, errorf(CodeNotFound, "message %s does not exist in this session", id)
	}
	if err != nil {
		return uuid.Nil, a.storageError("read the branch", err)
	}
	return leaf, nil
}

func (a *Actor) readBranch(id uuid.UUID, before int64, limit int) (HistoryPage, error) {
	if limit < 1 || limit > MaxHistoryLimit {
		return HistoryPage{}, errorf(CodeBadRequest, "limit must be between 1 and %d", MaxHistoryLimit)
	}
	if before < 0 {
		return HistoryPage{}, errorf(CodeBadRequest, "before must be a message position")
	}
	if err := a.load(); err != nil {
		return HistoryPage{}, a.loadError(err)
	}
	leaf, err := a.leafThrough(id)
	if err != nil {
		return HistoryPage{}, err
	}
	msgs, more, err := a.journal.pathReader(&leaf, before, limit)()
	if err != nil {
		return HistoryPage{}, a.storageError("read the branch", err)
	}
	a.overlayLive(msgs)
	return HistoryPage{Messages: msgs, HasMore: more}, nil
}

// publishBranch tells every tab the active path changed: branch.selected with the
// newest messages (a snapshot's worth) of the path that ends at leaf: the active one, or,
// for an edit, the one its new message is about to grow. They are read from the
// database when memory does not hold them. A read that fails leaves the tabs a snapshot
// behind: they are dropped, so that they reconnect and catch up from a snapshot.
func (a *Actor) publishBranch(leaf *uuid.UUID) {
	// Text held back for coalescing goes out first: a tab that does not hold its
	// message yet ignores it, so branch.selected must already carry it.
	a.flushDelta()
	var msgs []chat.Message
	var more bool
	var err error
	if sameID(leaf, a.journal.leaf) {
		msgs, more, err = a.journal.newest(a.cfg.SnapshotMessages)
	} else {
		msgs, more, err = a.journal.pathReader(leaf, 0, a.cfg.SnapshotMessages)()
	}
	if err != nil {
		a.logger().Error().Err(err).Msg("read the selected branch; dropping the subscribers to resync")
		for sub := range a.subs {
			delete(a.subs, sub)
			sub.Dropped(DropSlow)
		}
		return
	}
	a.overlayLive(msgs)
	a.publish(Event{Type: EventBranch, Messages: msgs, HasMore: more, Leaf: cloneID(leaf)})
}

// publishForked sends every tab the active path again after a run wrote an answer
// beside older ones while another branch was shown (a regeneration, then a branch
// selected through an older answer): that answer, which the path may hold, has a new
// sibling, and tabs ignore the new message. The write is awaited, so the path read from
// the database has it.
func (a *Actor) publishForked() {
	a.forked = false
	a.journal.q.Await()
	a.journal.recent.forget()
	a.publishBranch(a.journal.leaf)
}

// editedMessage returns the user message an edit names, with the children of its parent
// (the new message's siblings-to-be).
func (a *Actor) editedMessage(id uuid.UUID) (chat.Message, []uuid.UUID, error) {
	m, err := a.journal.messageGet(id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (m.SessionID != a.id || m.Role != chat.RoleUser)) {
		return chat.Message{}, nil, errorf(CodeNotFound, "message %s is not a user message of this session", id)
	}
	if err != nil {
		return chat.Message{}, nil, a.storageError("read the edited message", err)
	}
	kids, err := a.journal.children(m.ParentID)
	if err != nil {
		return chat.Message{}, nil, a.storageError("read the edited message", err)
	}
	return m, kids, nil
}
