package conversation_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

// Delete cancels the active run (its end reaches the subscribers), lets every subscriber
// go with DropDeleted and stops the actor once its run goroutine has returned.
func TestDeleteCancelsTheRunAndLetsSubscribersGo(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	a := startActor(t, storetest.New(t), script.New(script.Text("partial"), gate.Wait(), script.Text(" never")))
	ctx := testCtx(t)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s.Await(t, convtest.Type(conversation.EventDelta))

	require.NoError(t, a.Delete(ctx))
	end := s.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.cancelled", end.Type)
	require.Equal(t, []conversation.DropReason{conversation.DropDeleted}, s.DropReasons())
	require.NoError(t, a.Wait(ctx), "the run goroutine returned")
	_, err = a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: convtest.New()})
	require.ErrorIs(t, err, conversation.ErrStopped)
	require.NoError(t, a.Delete(ctx), "deleting a stopped actor is a no-op")
}

// A session deleted behind its actor's back (another process deleted it) cannot be
// written to again: the next run start finds the tombstone, the command gets ErrDeleted,
// the subscribers are let go with DropDeleted and the actor stops. A new actor refuses
// every hello on the tombstone.
func TestSessionDeletedElsewhere(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	a := startActor(t, st, script.New(script.Text("hi")))
	ctx := testCtx(t)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Owner: "alice", Subscriber: s})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s.Await(t, convtest.Terminal)

	require.NoError(t, st.SessionDelete(ctx, "alice", a.SessionID(), time.Now()))
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r2", Content: "again"})
	require.ErrorIs(t, err, conversation.ErrDeleted)
	require.Equal(t, []conversation.DropReason{conversation.DropDeleted}, s.DropReasons())
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the actor of a deleted session did not stop")
	}
	var runs int
	require.NoError(t, st.Pool().QueryRow(ctx, "SELECT count(*) FROM runs WHERE session_id = $1", a.SessionID()).Scan(&runs))
	require.Zero(t, runs, "nothing was written after the deletion")

	// A refused hello stops its actor: each is answered by a new one, as the hub does.
	b := startOn(t, st, script.New(), a.SessionID())
	_, err = b.Hello(ctx, conversation.HelloRequest{Create: true, Owner: "alice", Subscriber: convtest.New()})
	require.ErrorIs(t, err, conversation.ErrDeleted)
	requireStopped(t, b)
	c := startOn(t, st, script.New(), a.SessionID())
	_, err = c.Hello(ctx, conversation.HelloRequest{Create: true, Owner: "mallory", Subscriber: convtest.New()})
	require.ErrorIs(t, err, conversation.ErrNotYours, "another user does not learn that it was deleted")
	requireStopped(t, c)
}

// requireStopped checks that a has stopped (a refused hello leaves no actor behind).
func requireStopped(t *testing.T, a *conversation.Actor) {
	t.Helper()
	select {
	case <-a.Done():
	case <-testCtx(t).Done():
		t.Fatal("the actor did not stop")
	}
}

// A hello that may not create the session (its id came from a client) finds no session:
// ErrNoSession, and nothing is stored, so the id stays free and nobody can squat on it.
// The same hello allowed to create it (a server-generated id) makes it.
func TestHelloWithoutCreateRefusesAMissingSession(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	a := startActor(t, st, script.New())
	ctx := testCtx(t)
	_, err := a.Hello(ctx, conversation.HelloRequest{Owner: "alice", Subscriber: convtest.New()})
	require.ErrorIs(t, err, conversation.ErrNoSession)
	requireStopped(t, a) // nothing is left behind
	var n int
	require.NoError(t, st.Pool().QueryRow(ctx, "SELECT count(*) FROM sessions WHERE id = $1", a.SessionID()).Scan(&n))
	require.Zero(t, n, "the refused hello stored no session")

	b := startOn(t, st, script.New(), a.SessionID())
	_, err = b.Hello(ctx, conversation.HelloRequest{Owner: "alice", Create: true, Subscriber: convtest.New()})
	require.NoError(t, err)
	// Once it exists, a hello that may not create finds it; another user still does not,
	// and an actor with a subscriber stays for it.
	_, err = b.Hello(ctx, conversation.HelloRequest{Owner: "alice", Subscriber: convtest.New()})
	require.NoError(t, err)
	_, err = b.Hello(ctx, conversation.HelloRequest{Owner: "mallory", Subscriber: convtest.New()})
	require.ErrorIs(t, err, conversation.ErrNotYours)
	_, err = b.History(ctx, 0, 1)
	require.NoError(t, err, "still there for alice's tabs")
}
