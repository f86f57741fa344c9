package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
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

// streamLogSync is one interval of a node's stream log, in one statement: the chunks of
// text its sessions streamed since the last one ($2), and the removal of the chunks of
// messages whose final text is stored now ($1). Each chunk is fenced like every write of
// its session's actor (a fence of 0 is none, and the lock is that of every fenced write,
// see leases.sql): a node that lost a session's lease adds nothing to its log. A chunk
// already there (a retry of an interval whose answer was lost) is left as it is.
//
// Written here rather than in queries/ (sqlc): the store encodes its parameters itself.
const streamLogSync = `-- name: StreamLogSync :exec
WITH done AS (
    DELETE FROM stream_log WHERE stream_log.message_id = ANY($1::uuid[])
)
INSERT INTO stream_log (message_id, start_offset, text)
SELECT c.message_id, c.start_offset, c.text
FROM unnest($2::stream_log_chunk[]) AS c
WHERE c.fence = 0 OR EXISTS (SELECT 1 FROM session_leases f WHERE f.session_id = c.session_id AND f.token = c.fence FOR KEY SHARE)
ON CONFLICT (message_id, start_offset) DO NOTHING`

// StreamLogSync stores one interval of a node's stream log in one statement: chunks (a
// chunk whose fence is no longer its session's lease token is left out; one stored
// already is left as it is) and the removal of the chunks of the messages in done.
//
// It is the one statement whose size grows with the load: at thousands of streaming
// sessions an interval is hundreds of kilobytes of parameters. pgx would encode arrays
// element by element, boxing each, into a buffer it starts again at 256 bytes for every
// statement, then regrow the message it sends by a quarter for each parameter: at 3,000
// sessions, a quarter of what chatd allocated per token. So the store encodes the chunks
// itself, in PostgreSQL's binary format, as one array of stream_log_chunk (the removals,
// small, go first: the message then grows once, to its size), into a buffer kept from
// one interval to the next, and sends the statement with pgconn.
func (s *Store) StreamLogSync(ctx context.Context, chunks []StreamChunk, done []uuid.UUID) error {
	p := s.streamLog
	if p == nil || !p.mu.TryLock() {
		// Another statement has the buffer (a node has one stream log, so this is
		// rare): this one gets its own rather than wait for a round trip, or, in a
		// transaction, for a connection that the other may be waiting for.
		p = new(streamLogParams)
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	defer func() {
		if cap(p.buf) > maxKeptParams {
			p.buf = nil // a burst's buffer is not kept for ever
		}
		clear(p.values[:])
	}()
	if p.chunkOID == 0 {
		if err := p.lookUp(ctx, s.db); err != nil {
			return fmt.Errorf("sync the stream log: look up its chunk type: %w", mapErr(err))
		}
	}
	for attempt := 0; ; attempt++ {
		values := p.encode(chunks, done)
		err := s.execParams(ctx, streamLogSync, values, []uint32{oidUUIDArray, p.chunkArrayOID})
		if err == nil {
			return nil
		}
		// The type may have been made again (a migration run down and up), with another
		// id: if so, the interval is sent again at once.
		known := p.chunkOID
		p.chunkOID, p.chunkArrayOID = 0, 0
		if attempt == 0 && p.lookUp(ctx, s.db) == nil && p.chunkOID != known {
			continue
		}
		return fmt.Errorf("sync the stream log: %w", mapErr(err))
	}
}

// lookUp reads the ids of the stream_log_chunk type and of its array type.
func (p *streamLogParams) lookUp(ctx context.Context, db queries.DBTX) error {
	// By name at each execution: a 'stream_log_chunk'::regtype would be resolved once,
	// when the statement is prepared, and pgx keeps it prepared.
	return db.QueryRow(ctx, `SELECT t.oid, t.typarray FROM pg_type t WHERE t.typname = 'stream_log_chunk' AND pg_type_is_visible(t.oid)`).Scan(&p.chunkOID, &p.chunkArrayOID)
}

// maxKeptParams bounds the parameter buffer StreamLogSync keeps for the next interval:
// 10,000 streaming sessions take about 1 MiB.
const maxKeptParams = 4 << 20

// PostgreSQL's type OIDs (pg_type.dat).
const (
	oidInt4      = 23
	oidText      = 25
	oidInt8      = 20
	oidUUID      = 2950
	oidUUIDArray = 2951
)

// streamLogParams is the stream log statement's parameters, encoded into one buffer
// that the next interval reuses, and the ids of the chunk's type in the database.
type streamLogParams struct {
	mu                      sync.Mutex
	buf                     []byte
	values                  [2][]byte
	chunkOID, chunkArrayOID uint32
}

// The binary format's sizes: a one-dimensional array's header, an element's length,
// and a stream_log_chunk without its text (its number of fields, then each field's
// type, length and bytes).
const (
	arrayHeader = 20
	elemHeader  = 4
	chunkFixed  = 4 + (8 + 16) + (8 + 4) + 8 + (8 + 16) + (8 + 8)
)

// encode returns the statement's parameters, done and chunks, in the binary format of
// arrays (array_recv: the number of dimensions, a flag for NULLs, the element type,
// then for the one dimension its length and lower bound, then each element as its
// length and its bytes) and of composite values (record_recv: the number of fields,
// then each field as its type, its length and its bytes). The slices are p's buffer's,
// valid until the next encode.
func (p *streamLogParams) encode(chunks []StreamChunk, done []uuid.UUID) [][]byte {
	size := 2*arrayHeader + len(done)*(elemHeader+16) + len(chunks)*(elemHeader+chunkFixed)
	for _, c := range chunks {
		size += len(c.Text)
	}
	if cap(p.buf) < size {
		p.buf = make([]byte, 0, size)
	}
	b := appendArrayHeader(p.buf[:0], oidUUID, len(done))
	for _, id := range done {
		b = appendUUID(b, id)
	}
	p.values[0] = b[:len(b):len(b)]

	start := len(b)
	b = appendArrayHeader(b, p.chunkOID, len(chunks))
	for _, c := range chunks {
		b = binary.BigEndian.AppendUint32(b, uint32(chunkFixed+len(c.Text)))
		b = binary.BigEndian.AppendUint32(b, 5) // fields
		b = binary.BigEndian.AppendUint32(b, oidUUID)
		b = appendUUID(b, c.MessageID)
		b = binary.BigEndian.AppendUint32(b, oidInt4)
		b = binary.BigEndian.AppendUint32(b, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(c.Offset)))
		b = binary.BigEndian.AppendUint32(b, oidText)
		b = binary.BigEndian.AppendUint32(b, uint32(len(c.Text)))
		b = append(b, c.Text...)
		b = binary.BigEndian.AppendUint32(b, oidUUID)
		b = appendUUID(b, c.SessionID)
		b = binary.BigEndian.AppendUint32(b, oidInt8)
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(c.Fence))
	}
	p.values[1] = b[start:len(b):len(b)]
	p.buf = b
	return p.values[:]
}

// appendArrayHeader appends the header of a one-dimensional array of n elements of
// type elem, none NULL. An empty array has no dimensions.
func appendArrayHeader(b []byte, elem uint32, n int) []byte {
	if n == 0 {
		b = binary.BigEndian.AppendUint32(b, 0) // dimensions
		b = binary.BigEndian.AppendUint32(b, 0) // no NULLs
		return binary.BigEndian.AppendUint32(b, elem)
	}
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return binary.BigEndian.AppendUint32(b, 1) // lower bound
}

// appendUUID appends a uuid's length and bytes.
func appendUUID(b []byte, id uuid.UUID) []byte {
	b = binary.BigEndian.AppendUint32(b, 16)
	return append(b, id[:]...)
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
