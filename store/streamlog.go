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

// StreamLogSync stores one interval of a node's stream log in one statement: chunks (a
// chunk whose fence is no longer its session's lease token is left out; one stored
// already is left as it is) and the removal of the chunks of the messages in done.
//
// It is the one statement whose size grows with the load: at thousands of streaming
// sessions an interval is hundreds of kilobytes of parameters. pgx would encode the
// arrays element by element, boxing each, into a buffer it starts again at 256 bytes for
// every statement: a quarter of what chatd allocated per token at 3,000 sessions. So the
// store encodes them itself, in PostgreSQL's binary array format, into a buffer kept
// from one interval to the next, and sends the statement with pgconn.
func (s *Store) StreamLogSync(ctx context.Context, chunks []StreamChunk, done []uuid.UUID) error {
	p := s.streamLog
	if p == nil {
		p = new(streamLogParams)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	values := p.encode(chunks, done)
	err := s.execParams(ctx, queries.StreamLogSyncSQL, values, streamLogOIDs[:])
	if cap(p.buf) > maxKeptParams {
		p.buf = nil // a burst's buffer is not kept for ever
	}
	clear(p.values[:])
	if err != nil {
		return fmt.Errorf("sync the stream log: %w", mapErr(err))
	}
	return nil
}

// maxKeptParams bounds the parameter buffer StreamLogSync keeps for the next interval:
// 10,000 streaming sessions take about 1 MiB.
const maxKeptParams = 4 << 20

// PostgreSQL's type OIDs (pg_type.dat), of the arrays and of their elements.
const (
	oidInt4      = 23
	oidText      = 25
	oidInt8      = 20
	oidUUID      = 2950
	oidInt4Array = 1007
	oidTextArray = 1009
	oidInt8Array = 1016
	oidUUIDArray = 2951
)

// The stream log statement's parameters: message ids, offsets, texts, session ids,
// fences, and the messages whose log goes.
var streamLogOIDs = [6]uint32{oidUUIDArray, oidInt4Array, oidTextArray, oidUUIDArray, oidInt8Array, oidUUIDArray}

// streamLogParams is the stream log statement's parameters, encoded into one buffer
// that the next interval reuses.
type streamLogParams struct {
	mu     sync.Mutex
	buf    []byte
	values [6][]byte
}

// arrayHeader is the size of a one-dimensional array's header in the binary format,
// and elemHeader that of each element's.
const (
	arrayHeader = 20
	elemHeader  = 4
)

// encode returns the parameters of chunks and done, in the binary format of arrays
// (array_recv): the number of dimensions, a flag for NULLs, the element type, then for
// the one dimension its length and lower bound, then each element as its length and
// its bytes. The slices are p's buffer's, valid until the next encode.
func (p *streamLogParams) encode(chunks []StreamChunk, done []uuid.UUID) [][]byte {
	n := len(chunks)
	texts := 0
	for _, c := range chunks {
		texts += len(c.Text)
	}
	size := 6*arrayHeader + n*(2*(elemHeader+16)+(elemHeader+4)+elemHeader+(elemHeader+8)) + texts + len(done)*(elemHeader+16)
	if cap(p.buf) < size {
		p.buf = make([]byte, 0, size)
	}
	b := p.buf[:0]
	mark := func(i int, start int) { p.values[i] = b[start:len(b):len(b)] }

	start := len(b)
	b = appendArrayHeader(b, oidUUID, n)
	for _, c := range chunks {
		b = appendUUID(b, c.MessageID)
	}
	mark(0, start)

	start = len(b)
	b = appendArrayHeader(b, oidInt4, n)
	for _, c := range chunks {
		b = binary.BigEndian.AppendUint32(b, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(c.Offset)))
	}
	mark(1, start)

	start = len(b)
	b = appendArrayHeader(b, oidText, n)
	for _, c := range chunks {
		b = binary.BigEndian.AppendUint32(b, uint32(len(c.Text)))
		b = append(b, c.Text...)
	}
	mark(2, start)

	start = len(b)
	b = appendArrayHeader(b, oidUUID, n)
	for _, c := range chunks {
		b = appendUUID(b, c.SessionID)
	}
	mark(3, start)

	start = len(b)
	b = appendArrayHeader(b, oidInt8, n)
	for _, c := range chunks {
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(c.Fence))
	}
	mark(4, start)

	start = len(b)
	b = appendArrayHeader(b, oidUUID, len(done))
	for _, id := range done {
		b = appendUUID(b, id)
	}
	mark(5, start)

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
