package aisdk_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/aisdk"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// spoiled is the real store, on a real PostgreSQL, with a byte that is not UTF-8 added
// to every chat id it is asked for: what an id that got past the transport's check would
// do to the database.
type spoiled struct{ *store.Store }

func (s spoiled) SessionByClientID(ctx context.Context, owner, clientID string) (uuid.UUID, bool, error) {
	return s.Store.SessionByClientID(ctx, owner, clientID+"\xff")
}

func (s spoiled) SessionForClientID(ctx context.Context, owner, clientID string, now time.Time, max int) (uuid.UUID, bool, error) {
	return s.Store.SessionForClientID(ctx, owner, clientID+"\xff", now, max)
}

// A statement PostgreSQL refuses for good is not an outage: its data exception (SQLSTATE
// class 22, here 22021: the bytes are not UTF-8) is answered 400 bad_request with its
// SQLSTATE, never 503 "the database is unavailable", which stays for a database that
// does not answer.
func TestRefusedStatementIsNoOutage(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	get := func(s aisdk.Store, method, path string) (int, string, string) {
		t.Helper()
		h := aisdk.New(aisdk.Config{Store: s})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), method, path, nil))
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), "%s", rec.Body)
		return rec.Code, e.Error.Code, e.Error.Message
	}

	_, _, err := spoiled{st}.SessionByClientID(t.Context(), "alice", "chat-1")
	require.ErrorIs(t, err, store.ErrInvalid)
	require.Equal(t, "22021", store.SQLState(err), "PostgreSQL's own error: %v", err)

	for _, path := range []string{"/v1/aisdk/chat/chat-1", "/v1/aisdk/chat/chat-1/stop"} {
		method := http.MethodGet
		if path != "/v1/aisdk/chat/chat-1" {
			method = http.MethodPost
		}
		status, code, msg := get(spoiled{st}, method, path)
		require.Equal(t, http.StatusBadRequest, status, "%s %s", method, path)
		require.Equal(t, "bad_request", code)
		require.Contains(t, msg, "SQLSTATE 22021")
		require.NotContains(t, msg, "unavailable")
	}

	// A database that does not answer is still one.
	closed := storetest.New(t)
	closed.Pool().Close()
	status, code, msg := get(closed, http.MethodGet, "/v1/aisdk/chat/chat-1")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "storage", code)
	require.Contains(t, msg, "unavailable")
}
