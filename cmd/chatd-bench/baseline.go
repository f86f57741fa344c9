package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/chatd/chatd/agent/synth"
)

// The baseline is the physical limit chatd is measured against: a minimal coder/websocket
// server that pushes the same frames, at the same pace, to the same connections, with no
// actor, ring, queue or database. A session's tabs are a list; one goroutine per run
// makes each token's frame once and writes it to every tab in turn.

type baselineGroup struct {
	mu      sync.Mutex
	conns   map[*websocket.Conn]struct{}
	seq     int64
	running bool
}

type baseline struct {
	mu     sync.Mutex
	groups map[string]*baselineGroup
}

func serveBaseline(addr string) error {
	b := &baseline{groups: map[string]*baselineGroup{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /v1/ws", b.serveWS)
	// Profiled like chatd with -profile-dir, so the two profiles can be set side by side.
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

func (b *baseline) group(id string) *baselineGroup {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, ok := b.groups[id]
	if !ok {
		g = &baselineGroup{conns: map[*websocket.Conn]struct{}{}}
		b.groups[id] = g
	}
	return g
}

func (b *baseline) serveWS(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ctx := context.Background()
	var g *baselineGroup
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			break
		}
		var f struct {
			Type      string `json:"type"`
			SessionID string `json:"sessionId"`
			Content   string `json:"content"`
			RequestID string `json:"requestId"`
		}
		if json.Unmarshal(data, &f) != nil {
			continue
		}
		switch {
		case f.Type == "hello" && g == nil:
			if f.SessionID == "" { // a new session: the server names it, as chatd does
				f.SessionID = uuid.NewString()
			}
			g = b.group(f.SessionID)
			g.mu.Lock()
			g.conns[ws] = struct{}{}
			snap := fmt.Sprintf(`{"type":"snapshot","sessionId":%q,"epoch":"baseline","lastSeq":%d,"messages":[]}`, f.SessionID, g.seq)
			err = ws.Write(ctx, websocket.MessageText, []byte(snap))
			g.mu.Unlock()
		case f.Type == "chat.send" && g != nil:
			g.mu.Lock()
			start := !g.running
			g.running = true
			g.mu.Unlock()
			if start {
				go g.stream(synth.ParseSpec(f.Content), f.RequestID)
			}
		}
		if err != nil {
			break
		}
	}
	if g != nil {
		g.mu.Lock()
		delete(g.conns, ws)
		g.mu.Unlock()
	}
}

// stream writes the run's tokens on the synthetic model's schedule.
func (g *baselineGroup) stream(spec synth.Spec, requestID string) {
	runID, msgID := uuid.New(), uuid.New()
	prefix := `,"runId":"` + runID.String() + `","requestId":"` + requestID + `","messageId":"` + msgID.String() + `","text":"`
	start := time.Now()
	timer := time.NewTimer(0)
	<-timer.C
	buf := make([]byte, 0, 256)
	for i := range spec.Tokens {
		stamp := time.Now()
		if spec.Rate > 0 {
			stamp = start.Add(time.Duration(i) * time.Second / time.Duration(spec.Rate)) // as synth does
			if wait := time.Until(stamp); wait > 0 {
				timer.Reset(wait)
				<-timer.C
			}
		}
		g.mu.Lock()
		if len(g.conns) == 0 {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.seq++
		buf = append(buf[:0], `{"type":"chat.delta","seq":`...)
		buf = strconv.AppendInt(buf, g.seq, 10)
		buf = append(buf, prefix...)
		buf = append(buf, synth.Token(i, stamp)...)
		buf = append(buf, `"}`...)
		g.writeAll(buf)
		g.mu.Unlock()
	}
	g.mu.Lock()
	g.seq++
	g.writeAll([]byte(fmt.Sprintf(`{"type":"chat.done","seq":%d,"runId":%q,"requestId":%q}`, g.seq, runID, requestID)))
	g.running = false
	g.mu.Unlock()
}

func (g *baselineGroup) writeAll(frame []byte) {
	for ws := range g.conns {
		// No deadline: a cancellable context costs coder/websocket an AfterFunc per
		// frame, which chatd does not pay either. The bench's clients always read.
		if err := ws.Write(context.Background(), websocket.MessageText, frame); err != nil {
			delete(g.conns, ws)
			ws.CloseNow()
		}
	}
}
