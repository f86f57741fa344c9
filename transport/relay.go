package transport

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
)

// RelayHeader marks a request that one node relays to another; its value is the relaying
// node's id. A node never relays such a request again: when it does not hold the session
// either (the holder changed meanwhile), it answers as a lone node would (a hello gets
// moved and 4010), and the client reconnects.
const RelayHeader = "Chatd-Relay"

// relayDialTimeout bounds connecting to another node.
const relayDialTimeout = 5 * time.Second

// Relay lets any node take any request: one for a session another live node holds is
// sent on to that node (the session's actor runs there), so clients and load balancers
// need no knowledge of which node holds what. A nil *Relay relays nothing (one node).
type Relay struct {
	// OwnerOf returns where the other node that holds session id's lease live is reached
	// (host:port), and true; false when no other node does (this one holds it, none
	// does, its lease expired, or the session does not exist). Required.
	OwnerOf func(ctx context.Context, id uuid.UUID) (addr string, ok bool, err error)
	// Node returns this node's id, sent in RelayHeader. Required.
	Node func() string
	// Metrics counts relayed connections and requests; nil counts nothing.
	Metrics *Metrics
	// Logger logs lookups and relays that fail.
	Logger zerolog.Logger

	transport *http.Transport
}

// NewRelay returns r ready to use. Node-to-node traffic ignores HTTP_PROXY and the like:
// the nodes reach each other directly.
func NewRelay(r Relay) *Relay {
	r.transport = &http.Transport{
		DialContext:           (&net.Dialer{Timeout: relayDialTimeout}).DialContext,
		ResponseHeaderTimeout: relayDialTimeout,
		MaxIdleConnsPerHost:   16,
		// Under the nodes' own idle timeout (CHATD_HTTP_IDLE_TIMEOUT, 60 s by default),
		// so a request is not sent on a connection the other node is closing.
		IdleConnTimeout: 30 * time.Second,
	}
	r.Logger = r.Logger.With().Str("component", "relay").Logger()
	return &r
}

// Relayed returns the id of the node that relayed req, "" when a client sent it.
func Relayed(req *http.Request) string { return req.Header.Get(RelayHeader) }

// Owner returns the address of the other node that holds session id, when req should be
// sent on to it: not when req was relayed already (loop prevention), nor when the lookup
// fails (this node then serves it, and acquires the session or answers as it can).
func (r *Relay) Owner(req *http.Request, id uuid.UUID) (string, bool) {
	if r == nil || Relayed(req) != "" {
		return "", false
	}
	addr, ok, err := r.OwnerOf(req.Context(), id)
	if err != nil {
		if req.Context().Err() == nil {
			r.Logger.Warn().Err(err).Str("session_id", id.String()).Msg("look up a session's node; serving it here")
		}
		return "", false
	}
	return addr, ok && addr != ""
}

// HTTPClient is the client that dials other nodes' WebSockets.
func (r *Relay) HTTPClient() *http.Client { return &http.Client{Transport: r.transport} }

// Header returns the headers of a request this node relays.
func (r *Relay) Header() http.Header {
	return http.Header{RelayHeader: []string{r.Node()}}
}

// Proxy sends req on to the node at addr and copies its answer back, a WebSocket upgrade
// included (the bytes of the upgraded connection are copied both ways until either side
// ends). The Host header is kept, so the owner checks a browser's Origin as this node
// would. answered, if not nil, is called once the node has answered (before its answer
// is copied back); when the node cannot be reached, fallback serves the request instead.
func (r *Relay) Proxy(w http.ResponseWriter, req *http.Request, addr string, answered func(*http.Response), fallback http.HandlerFunc) {
	// The answer may be a stream or an upgraded connection, as long as the node's: that
	// node's timeouts bound the request (it reads the body under its own), not this one's.
	Unbounded(w)
	target := &url.URL{Scheme: "http", Host: addr}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			pr.Out.Header.Set(RelayHeader, r.Node())
		},
		Transport: r.transport,
		ModifyResponse: func(resp *http.Response) error {
			if answered != nil {
				answered(resp)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return
			}
			r.Logger.Info().Err(err).Str("node_addr", addr).Str("path", req.URL.Path).Msg("could not relay a request to the session's node; serving it here")
			fallback(w, req)
		},
	}
	p.ServeHTTP(w, req)
}
