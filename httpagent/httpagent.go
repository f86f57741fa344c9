// Package httpagent puts chatd in front of an agent a team already has, served over HTTP:
// an AI SDK route (the UI message stream of `toUIMessageStreamResponse()`) or an AG-UI
// agent. For each model turn of a run chatd POSTs the conversation to the agent and
// stores what its stream says as segments, reasoning, tool messages and approvals, so
// every client sees the run as a built-in one, and runs keep chatd's guarantees: they
// finish with no tab open, stop from anywhere, wait for approvals across restarts and
// continue after a crash (docs/agents.md).
package httpagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/conversation"
)

// Protocols an agent speaks (Config.Protocol).
const (
	ProtocolAISDK = "aisdk"
	ProtocolAGUI  = "agui"
)

// Run error codes of an HTTP agent.
const (
	// CodeUnreachable: no connection, or 5xx/429 answers, after the retries.
	CodeUnreachable = "agent_unreachable"
	// CodeBadResponse: an answer that is not the protocol (not an event stream, not its
	// JSON, a 4xx, a stream that ends without its end).
	CodeBadResponse = "agent_bad_response"
	// CodeTimeout: nothing received for Config.Timeout.
	CodeTimeout = "agent_timeout"
	// CodeAgent: the agent reported an error in its stream.
	CodeAgent = conversation.CodeAgent
)

// The headers of every request chatd makes to an agent (docs/agents.md).
const (
	// HeaderSession is the chat (chatd's session id).
	HeaderSession = "X-Chatd-Session"
	// HeaderRun is the run the turn belongs to.
	HeaderRun = "X-Chatd-Run"
	// HeaderTurn counts the run's turns: 1 for the first request of a run, 2 for the one
	// after an approval, and so on, counted by the process that asks.
	HeaderTurn = "X-Chatd-Turn"
	// HeaderAttempt counts the requests for one turn: 1, then 2 and up when the turn is
	// asked again (a retry after a failure, a cut stream, the run continued after chatd
	// restarted or moved). With HeaderRun and HeaderTurn it lets an agent tell a request
	// it has seen (and its side effects) from a new one.
	HeaderAttempt = "X-Chatd-Attempt"
	// HeaderContinued is "true" when the request continues a run another chatd process
	// started (after a crash, a restart, a takeover): what it stored is in the messages.
	HeaderContinued = "X-Chatd-Continued"
	// HeaderUser is the user whose chat it is (the token's subject with CHATD_AUTH=jwt).
	HeaderUser = "X-Chatd-User"
	// HeaderUserToken is the bearer token the run's message was sent with, with
	// Config.ForwardToken, when chatd has it (not for a run continued after a restart).
	HeaderUserToken = "X-Chatd-User-Token"
)

// Config configures an HTTP agent.
type Config struct {
	// URL is the agent's endpoint; every request is a POST to it.
	URL string
	// Protocol is ProtocolAISDK or ProtocolAGUI.
	Protocol string
	// Headers are sent with every request (the agent's own credentials, say).
	Headers map[string]string
	// ForwardToken sends the bearer token the run's message came with as
	// X-Chatd-User-Token (CHATD_AGENT_FORWARD_TOKEN).
	ForwardToken bool
	// Client makes the requests; nil: one with no overall timeout (a turn lasts as long
	// as the agent streams) and Timeout for silence.
	Client *http.Client
	// Timeout ends a turn that receives nothing for this long (agent_timeout); default 2m.
	Timeout time.Duration
	// ApprovalExpire, when positive, is how long a call waits for its decision before it
	// is denied as expired (CHATD_APPROVAL_EXPIRE), counted from when it was first asked.
	ApprovalExpire time.Duration
	// Retries is how many times a turn is asked again after a transient failure (no
	// connection, 5xx, 429, a stream cut) before the run ends; default 3.
	Retries int
	Clock   clockwork.Clock
	Logger  zerolog.Logger
}

func (c *Config) defaults() error {
	if c.URL == "" {
		return errors.New("CHATD_AGENT_URL is empty: the agent's endpoint is needed")
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Minute
	}
	if c.Retries <= 0 {
		c.Retries = 3
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	return nil
}

// Headers is Headers for c's agent: with ForwardToken, the user's token too.
func (c Config) RequestHeaders(req conversation.Request, turn, attempt int) http.Header {
	h := Headers(req, turn, attempt)
	if c.ForwardToken && req.Token != "" {
		h.Set(HeaderUserToken, req.Token)
	}
	return h
}

// Headers returns the headers chatd sends with a request of turn turn, attempt attempt
// (both from 1) of the run req; turn 0 leaves X-Chatd-Turn out.
func Headers(req conversation.Request, turn, attempt int) http.Header {
	h := http.Header{}
	h.Set(HeaderSession, req.SessionID.String())
	h.Set(HeaderRun, req.RunID.String())
	if turn > 0 {
		h.Set(HeaderTurn, strconv.Itoa(turn))
	}
	h.Set(HeaderAttempt, strconv.Itoa(attempt))
	if req.Checkpoint != nil {
		h.Set(HeaderContinued, "true")
	}
	if req.Owner != "" {
		h.Set(HeaderUser, req.Owner)
	}
	return h
}

func agentErr(code, format string, args ...any) *conversation.Error {
	return &conversation.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// transient reports whether a failed request may go through when asked again.
func transient(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// unreachable describes a request that got no answer.
func unreachable(err error) *conversation.Error {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		return agentErr(CodeUnreachable, "the agent's host is not found: check CHATD_AGENT_URL (%v)", err)
	default:
		return agentErr(CodeUnreachable, "the agent did not answer: %v", err)
	}
}

// backoff is the wait before attempt n (from 1) of a turn asked again.
func backoff(n int) time.Duration {
	return min(250*time.Millisecond<<min(n-1, 6), 10*time.Second)
}

// sleep waits d on clock, or until ctx ends.
func sleep(ctx context.Context, clock clockwork.Clock, d time.Duration) error {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.Chan():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
