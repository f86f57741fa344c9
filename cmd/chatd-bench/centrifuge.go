package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// A client of the Centrifuge peer (bench/centrifuge) speaks Centrifuge's JSON protocol
// (github.com/centrifugal/protocol, client.proto), written here by hand so that chatd's
// go.mod does not carry Centrifuge:
//
//   - Commands are {"id":N,"connect":{}}, {"id":N,"subscribe":{"channel":…,"recover":true,
//     "offset":N,"epoch":…}}, {"id":N,"rpc":{"method":"send","data":{…}}}. Several may
//     go in one WebSocket frame, one per line.
//   - The server answers with {"id":N,"connect":{…}}, {"id":N,"subscribe":{"epoch":…,
//     "offset":N,"recovered":true,"was_recovering":true,"publications":[…]}} or
//     {"id":N,"error":{"code":…,"message":…}}, and pushes {"push":{"channel":…,"pub":
//     {"data":{…},"offset":N}}}. It puts several replies and pushes in one frame, one per
//     line (its writer sends what has queued, up to 16 messages by default).
//   - {} from the server is a ping, answered with {} (the connect reply says "pong":true).
//
// Each publication's offset is the channel's stream position: the tab keeps the last one
// in lastSeq, checks every offset as it checks chatd's seq, and resubscribes after a
// reconnect from it and the epoch, which recovers the publications it missed from the
// channel's history (recovered), or says it cannot (then the client would reload the
// conversation from elsewhere: counted like a chatd snapshot).

// cfState is a tab's Centrifuge state; nil for chatd's and the baseline's tabs.
type cfState struct {
	channel string
	nextID  atomic.Uint32 // ids of RPCs; 1 and 2 are each connection's connect and subscribe
}

// peerChannel is the channel of a session of the peer.
func peerChannel(sessionID string) string { return "chat:" + sessionID }

// cfConnect dials the peer, connects and subscribes to the session's channel, with its
// offset and epoch when resuming, then reads in the background. It returns once the
// subscribe is answered.
func (t *tab) cfConnect(ctx context.Context, resume bool) error {
	dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, "ws://"+t.addr+"/connection/websocket", nil)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	ws.SetReadLimit(64 << 20)
	t.ws = ws
	t.expected.Store(false)
	t.ready = make(chan struct{})
	t.readDone = make(chan struct{})
	go t.read(t.cfFrame)
	if err := ws.Write(dctx, websocket.MessageText, cfConnectFrame(t.cf.channel, resume && t.epoch != "", t.lastSeq, t.epoch)); err != nil {
		t.expected.Store(true)
		ws.CloseNow()
		<-t.readDone
		return err
	}
	select {
	case <-t.ready:
		return nil
	case <-t.readDone:
		return fmt.Errorf("%w: connection closed (code %d)", errNotAnswered, t.closeCode.Load())
	case <-dctx.Done():
		ws.CloseNow()
		return fmt.Errorf("%w: %w", errNotAnswered, dctx.Err())
	}
}

// cfConnectFrame is a connect and a subscribe in one frame, the subscribe recovering
// from offset and epoch if recover is set.
func cfConnectFrame(channel string, recover bool, offset int64, epoch string) []byte {
	type subscribe struct {
		Channel string `json:"channel"`
		Recover bool   `json:"recover,omitempty"`
		Offset  int64  `json:"offset,omitempty"`
		Epoch   string `json:"epoch,omitempty"`
	}
	s := subscribe{Channel: channel}
	if recover {
		s.Recover, s.Offset, s.Epoch = true, offset, epoch
	}
	sub, _ := json.Marshal(map[string]any{"id": 2, "subscribe": s})
	return append([]byte(`{"id":1,"connect":{}}`+"\n"), sub...)
}

// cfSend asks the peer for a run on the tab's channel (chatd's chat.send).
func (t *tab) cfSend(ctx context.Context, content, requestID string) error {
	b, err := json.Marshal(map[string]any{
		"id": t.cf.nextID.Add(1) + 2,
		"rpc": map[string]any{"method": "send", "data": map[string]string{
			"channel": t.cf.channel, "content": content, "requestId": requestID,
		}},
	})
	if err != nil {
		return err
	}
	return t.ws.Write(ctx, websocket.MessageText, b)
}

// cfFrame applies each message of a frame in order.
func (t *tab) cfFrame(f []byte, now time.Time) {
	for len(f) > 0 {
		line := f
		if i := bytes.IndexByte(f, '\n'); i >= 0 {
			line, f = f[:i], f[i+1:]
		} else {
			f = nil
		}
		if len(line) > 0 {
			t.cfMessage(line, now)
		}
	}
}

var cfPubPrefix = []byte(`{"push":{"channel":"`)

// cfMessage applies one reply or push. Publications, nearly every message, are parsed by
// hand, as chatd's deltas are (the load generator must not spend its CPU on JSON).
func (t *tab) cfMessage(m []byte, now time.Time) {
	if string(m) == "{}" { // a ping
		if err := t.ws.Write(context.Background(), websocket.MessageText, []byte("{}")); err != nil && !t.expected.Load() {
			t.g.noteErr("pong: %v", err)
		}
		return
	}
	if bytes.HasPrefix(m, cfPubPrefix) {
		if data, offset, ok := cfParsePush(m); ok {
			t.cfPub(data, offset, now)
			return
		}
	}
	var r struct {
		ID    uint32 `json:"id"`
		Error *struct {
			Code    uint32 `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Subscribe *struct {
			Epoch         string `json:"epoch"`
			Offset        int64  `json:"offset"`
			Recovered     bool   `json:"recovered"`
			WasRecovering bool   `json:"was_recovering"`
			Publications  []struct {
				Data   json.RawMessage `json:"data"`
				Offset int64           `json:"offset"`
			} `json:"publications"`
		} `json:"subscribe"`
		Push *struct {
			Disconnect  json.RawMessage `json:"disconnect"`
			Unsubscribe json.RawMessage `json:"unsubscribe"`
		} `json:"push"`
	}
	if err := json.Unmarshal(m, &r); err != nil {
		t.g.noteErr("unparsable message: %.200s", m)
		return
	}
	switch {
	case r.Error != nil:
		t.errors.Add(1)
		t.g.noteErr("error reply to command %d: %d %s", r.ID, r.Error.Code, r.Error.Message)
	case r.Subscribe != nil:
		s := r.Subscribe
		t.epoch = s.Epoch
		if s.Recovered {
			// The offset is the client's own; the publications carry it to the top.
			t.replays.Add(1)
			if s.Offset != t.lastSeq {
				t.g.noteErr("recovered from offset %d, expected %d", s.Offset, t.lastSeq)
			}
			for _, p := range s.Publications {
				t.cfPub(p.Data, p.Offset, now)
			}
		} else {
			// A new subscription, or one the peer could not recover: the client starts
			// at the stream's top and would reload what it has missed from elsewhere.
			t.snapshots.Add(1)
			t.lastSeq = s.Offset
			t.mu.Lock()
			t.nextTok = -1
			t.mu.Unlock()
		}
		t.markReady()
	case r.Push != nil && (r.Push.Disconnect != nil || r.Push.Unsubscribe != nil):
		t.errors.Add(1)
		t.g.noteErr("push: %.200s", m)
	}
}

// cfParsePush finds a publication's data and offset in a push.
func cfParsePush(m []byte) (data []byte, offset int64, ok bool) {
	i := bytes.Index(m, []byte(`"pub":{"data":`))
	j := bytes.LastIndex(m, []byte(`"offset":`))
	if i < 0 || j < i {
		return nil, 0, false
	}
	data = m[i+len(`"pub":{"data":`) : j]
	data = bytes.TrimSuffix(data, []byte(","))
	digits := m[j+len(`"offset":`):]
	k := 0
	for k < len(digits) && digits[k] >= '0' && digits[k] <= '9' {
		k++
	}
	offset, err := strconv.ParseInt(string(digits[:k]), 10, 64)
	return data, offset, err == nil
}

var (
	cfDeltaPrefix = []byte(`{"type":"chat.delta",`)
	cfDonePrefix  = []byte(`{"type":"chat.done",`)
)

// cfPub applies a publication: its offset is checked like chatd's seq, its tokens like
// chatd's.
func (t *tab) cfPub(data []byte, offset int64, now time.Time) {
	t.seq(offset)
	switch {
	case bytes.HasPrefix(data, cfDeltaPrefix):
		i := bytes.Index(data, []byte(`"text":"`))
		if i < 0 {
			t.g.noteErr("unparsable delta: %.200s", data)
			return
		}
		text := data[i+len(`"text":"`):]
		if j := bytes.IndexByte(text, '"'); j >= 0 {
			text = text[:j]
		}
		t.tokens(text, now)
	case bytes.HasPrefix(data, cfDonePrefix):
		t.runsDone.Add(1)
	}
}
