// Command chatd-peer is the Centrifuge peer of chatd's benchmark (cmd/chatd-bench,
// docs/benchmarks.md): a real-time server built on github.com/centrifugal/centrifuge, the
// engine inside Centrifugo, that streams the same frames as chatd and the harness's
// baseline, on the same schedule, to the same load generator.
//
// It is its own Go module so that chatd's go.mod does not carry Centrifuge.
//
//	chatd-peer -addr 127.0.0.1:8000
//
// Clients speak Centrifuge's JSON protocol on /connection/websocket: connect, subscribe
// to a session's channel (any name; the harness uses "chat:<uuid>"), with recovery, and
// ask for a run with the RPC "send", whose data is {"channel", "content", "requestId"}.
// The content is read like chatd's synthetic model reads a user message ("tokens=N
// rate=R"). One goroutine per run publishes each token to the channel with node.Publish,
// with history, so that a client that resubscribes with its offset and epoch recovers
// what it missed. Broker, history and presence are Centrifuge's in-memory ones.
//
// Beside the WebSocket the same listener serves /healthz, /metrics (Prometheus: the Go
// runtime's goroutines and memory statistics, and Centrifuge's own metrics) and
// /debug/pprof/ (heap?gc=1 forces a collection), which the harness reads as it reads
// chatd's admin listener.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8000", "address to serve on")
	historySize := flag.Int("history-size", 4096, "publications kept per channel for recovery (chatd's ring keeps 4096 events per session)")
	historyTTL := flag.Duration("history-ttl", 5*time.Minute, "how long a channel's publications are kept")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "chatd-peer: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if err := serve(*addr, history{size: *historySize, ttl: *historyTTL}); err != nil {
		fmt.Fprintln(os.Stderr, "chatd-peer:", err)
		os.Exit(1)
	}
}

// history is what every publication is kept with.
type history struct {
	size int
	ttl  time.Duration
}

func serve(addr string, h history) error {
	p, err := newPeer(h)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/connection/websocket", centrifuge.NewWebsocketHandler(p.node, centrifuge.WebsocketConfig{
		// The harness's clients send no Origin; any other would be a browser on another
		// site, which a benchmark on loopback does not have.
		CheckOrigin: func(*http.Request) bool { return true },
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("GET /metrics", promhttp.Handler())
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.node.Shutdown(sctx)
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// peer is the Centrifuge node and the runs it streams.
type peer struct {
	node    *centrifuge.Node
	history history

	mu      sync.Mutex
	running map[string]bool // channels with a run streaming
}

func newPeer(h history) (*peer, error) {
	node, err := centrifuge.New(centrifuge.Config{
		LogLevel: centrifuge.LogLevelWarn,
		LogHandler: func(e centrifuge.LogEntry) {
			log.Printf("centrifuge: %s %v", e.Message, e.Fields)
		},
	})
	if err != nil {
		return nil, err
	}
	p := &peer{node: node, history: h, running: map[string]bool{}}
	node.OnConnecting(func(context.Context, centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
		// Every connection is the same anonymous user: the harness measures
		// delivery, not authentication. chatd runs with CHATD_AUTH=none likewise.
		return centrifuge.ConnectReply{Credentials: &centrifuge.Credentials{}}, nil
	})
	node.OnConnect(func(c *centrifuge.Client) {
		c.OnSubscribe(func(e centrifuge.SubscribeEvent, cb centrifuge.SubscribeCallback) {
			cb(centrifuge.SubscribeReply{Options: centrifuge.SubscribeOptions{EnableRecovery: true}}, nil)
		})
		c.OnRPC(func(e centrifuge.RPCEvent, cb centrifuge.RPCCallback) {
			if e.Method != "send" {
				cb(centrifuge.RPCReply{}, centrifuge.ErrorMethodNotFound)
				return
			}
			var req struct {
				Channel   string `json:"channel"`
				Content   string `json:"content"`
				RequestID string `json:"requestId"`
			}
			if json.Unmarshal(e.Data, &req) != nil || req.Channel == "" {
				cb(centrifuge.RPCReply{}, centrifuge.ErrorBadRequest)
				return
			}
			p.start(req.Channel, parseSpec(req.Content), req.RequestID)
			cb(centrifuge.RPCReply{Data: []byte(`{}`)}, nil)
		})
	})
	if err := node.Run(); err != nil {
		return nil, err
	}
	return p, nil
}

// start streams a run on channel unless one is streaming there already (as chatd and the
// baseline do: a session has one run at a time).
func (p *peer) start(channel string, s spec, requestID string) (done <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running[channel] {
		return nil
	}
	p.running[channel] = true
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		p.stream(channel, s, requestID)
		p.mu.Lock()
		delete(p.running, channel)
		p.mu.Unlock()
	}()
	return ended
}

// stream publishes the run's tokens on the synthetic model's schedule, each in the same
// frame as the baseline's chat.delta, then a chat.done. It goes on whether anyone is
// subscribed or not: a client that comes back recovers what it missed from history.
func (p *peer) stream(channel string, s spec, requestID string) {
	runID, msgID := uuid.New(), uuid.New()
	prefix := `,"runId":"` + runID.String() + `","requestId":"` + requestID + `","messageId":"` + msgID.String() + `","text":"`
	opt := centrifuge.WithHistory(p.history.size, p.history.ttl)
	start := time.Now()
	timer := time.NewTimer(0)
	<-timer.C
	var seq int64
	for i := range s.tokens {
		stamp := time.Now()
		if s.rate > 0 {
			stamp = start.Add(time.Duration(i) * time.Second / time.Duration(s.rate)) // as synth does
			if wait := time.Until(stamp); wait > 0 {
				timer.Reset(wait)
				<-timer.C
			}
		}
		seq++
		// A new slice every time: the broker keeps it in the channel's history.
		if _, err := p.node.Publish(channel, appendDelta(make([]byte, 0, 192), seq, prefix, i, stamp), opt); err != nil {
			log.Printf("publish: %v", err)
		}
	}
	seq++
	done := fmt.Sprintf(`{"type":"chat.done","seq":%d,"runId":%q,"requestId":%q}`, seq, runID, requestID)
	if _, err := p.node.Publish(channel, []byte(done), opt); err != nil {
		log.Printf("publish: %v", err)
	}
}

// appendDelta appends token i's frame, byte for byte the baseline's (and chatd's)
// chat.delta: {"type":"chat.delta","seq":N,"runId":…,"requestId":…,"messageId":…,"text":" i:t"}.
// prefix runs from the comma after seq to the text's opening quote.
func appendDelta(b []byte, seq int64, prefix string, i int, stamp time.Time) []byte {
	b = append(b, `{"type":"chat.delta","seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, prefix...)
	b = appendToken(b, i, stamp)
	return append(b, `"}`...)
}

// appendToken appends token i due at t as chatd's synthetic model writes it (package
// agent/synth, which this module does not import so as not to carry chatd's
// dependencies): " i:t", t in Unix nanoseconds.
func appendToken(b []byte, i int, t time.Time) []byte {
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, ':')
	return strconv.AppendInt(b, t.UnixNano(), 10)
}

// spec is a run's settings, read like agent/synth's ParseSpec reads a user message.
type spec struct{ tokens, rate int }

func parseSpec(content string) spec {
	s := spec{tokens: 100, rate: 50}
	for _, f := range strings.Fields(content) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			continue
		}
		switch k {
		case "tokens":
			s.tokens = min(n, 10_000_000)
		case "rate":
			s.rate = min(n, 1_000_000)
		}
	}
	return s
}
