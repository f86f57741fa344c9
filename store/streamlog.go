package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/queries"
)

// StreamChunk is a piece of the text a message is streaming: its bytes from Offset on.
// Fence is the lease token of the session's actor that streamed it (0: none).
type StreamChunk struct {
	MessageID uuid.UUID
	SessionID uuid.UUID
	Offset    int
	Text      string
	Fence     int64
}

// StreamLogSync stores one interval of a node's stream log in one statement: chunks (a
// chunk whose fence is no longer its session's lease token is left out; one stored
// already is left as it is) and the removal of the chunks of the messages in done.
func (s *Store) StreamLogSync(ctx context.Context, chunks []StreamChunk, done []uuid.UUID) error {
	p := queries.StreamLogSyncParams{
		MessageIds: make([]uuid.UUID, len(chunks)),
		Offsets:    make([]int32, len(chunks)),
		Texts:      make([]string, len(chunks)),
		SessionIds: make([]uuid.UUID, len(chunks)),
		Fences:     make([]int64, len(chunks)),
		Done:       done,
	}
	if p.Done == nil {
		p.Done = []uuid.UUID{}
	}
	for i, c := range chunks {
		p.MessageIds[i], p.Offsets[i], p.Texts[i], p.SessionIds[i], p.Fences[i] = c.MessageID, int32(c.Offset), c.Text, c.SessionID, c.Fence
	}
	if err := s.q.StreamLogSync(ctx, s.db, p); err != nil {
		return fmt.Errorf("sync the stream log: %w", mapErr(err))
	}
	return nil
}

// StreamLogRead returns the logged text of each of the messages that has some: its
// chunks joined from offset 0 for as long as they follow each other.
func (s *Store) StreamLogRead(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]string, error) {
	rows, err := s.q.StreamLogRead(ctx, s.db, ids)
	if err != nil {
		return nil, fmt.Errorf("read the stream log: %w", mapErr(err))
	}
	bufs := make(map[uuid.UUID]*strings.Builder)
	for _, r := range rows {
		b := bufs[r.MessageID]
		if b == nil {
			b = new(strings.Builder)
			bufs[r.MessageID] = b
		}
		// Rows come in offset order; a chunk that does not start where the text ends
		// (one left out by a fence) ends what can be trusted.
		if int(r.StartOffset) == b.Len() {
			b.WriteString(r.Text)
		}
	}
	texts := make(map[uuid.UUID]string, len(bufs))
	for id, b := range bufs {
		if b.Len() > 0 {
			texts[id] = b.String()
		}
	}
	return texts, nil
}

// StreamLogCollect removes the chunks older than olderThan whose message is not
// streaming (or was never stored), and returns how many.
func (s *Store) StreamLogCollect(ctx context.Context, olderThan time.Duration) (int64, error) {
	n, err := s.q.StreamLogCollect(ctx, s.db, olderThan.Seconds())
	if err != nil {
		return 0, fmt.Errorf("collect the stream log: %w", mapErr(err))
	}
	return n, nil
}
