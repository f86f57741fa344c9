package agent_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
)

func TestStatusErrorClassification(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status    int
		kind, msg string
		code      string
		transient bool
	}{
		{429, "rate_limit_error", "slow down", agent.CodeRateLimited, true},
		{200, "rate_limit_exceeded", "", agent.CodeRateLimited, true}, // a type, no status
		{429, "insufficient_quota insufficient_quota", "You exceeded your current quota", agent.CodeModelQuota, false},
		{402, "", "Insufficient credits", agent.CodeModelQuota, false},
		{529, "overloaded_error", "Overloaded", agent.CodeModelUnavailable, true},
		{500, "", "", agent.CodeModelUnavailable, true},
		{502, "", "", agent.CodeModelUnavailable, true},
		{503, "", "", agent.CodeModelUnavailable, true},
		{408, "", "", agent.CodeModelUnavailable, true},
		{400, "invalid_request_error", "messages: field required", agent.CodeModelRejected, false},
		{400, "invalid_request_error", "This model's maximum context length is 8192 tokens", agent.CodeContextTooLong, false},
		{413, "request_too_large", "", agent.CodeContextTooLong, false},
		{400, "content_policy_violation", "refused", agent.CodeContentFilter, false},
		{401, "authentication_error", "invalid x-api-key", agent.CodeModelAuth, false},
		{403, "permission_error", "", agent.CodeModelAuth, false},
		{404, "not_found_error", "model: nope", agent.CodeModelNotFound, false},
		{422, "", "", agent.CodeModelRejected, false},
		// The words win over a 5xx: servers report these as their own failure too.
		{500, "server_error", "This model's maximum context length is 8192 tokens", agent.CodeContextTooLong, false},
		{500, "invalid_request_error context_length_exceeded", "prompt is too large", agent.CodeContextTooLong, false},
		{500, "content_filter", "The response was filtered", agent.CodeContentFilter, false},
		// ...but not the loose ones: a gateway's timeout is not a long conversation.
		{504, "", "upstream request took too long", agent.CodeModelUnavailable, true},
		{503, "", "safety checks unavailable", agent.CodeModelUnavailable, true},
		{400, "", "prompt too long", agent.CodeContextTooLong, false},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d %s", c.status, c.kind), func(t *testing.T) {
			cause := errors.New("sdk text")
			e := agent.StatusError(c.status, nil, c.kind, c.msg, cause)
			require.Equal(t, c.code, e.Code)
			require.Equal(t, c.transient, e.Transient)
			require.ErrorIs(t, e, cause)
			require.NotContains(t, e.Message, "sdk text", "the SDK's text is for logs, not users")
			if c.msg != "" {
				require.True(t, strings.HasSuffix(e.Message, ": "+c.msg), "the provider's explanation is shown: %q", e.Message)
			}
		})
	}
}

func TestStatusErrorShortensTheProviderMessage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 300) // two bytes a rune: the cut must not split one
	e := agent.StatusError(400, nil, "", "line one\n\n  "+long, nil)
	require.NotContains(t, e.Message, "\n")
	require.Less(t, len(e.Message), 300)
	require.True(t, strings.HasSuffix(e.Message, "…"))
	require.True(t, strings.Contains(e.Message, "line one é"))
	require.True(t, isValidUTF8(e.Message))
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	require.Equal(t, time.Duration(0), agent.RetryAfter(nil))
	require.Equal(t, time.Duration(0), agent.RetryAfter(h()))
	require.Equal(t, 7*time.Second, agent.RetryAfter(h("Retry-After", "7")))
	require.Equal(t, 1500*time.Millisecond, agent.RetryAfter(h("Retry-After", "1.5")))
	require.Equal(t, 250*time.Millisecond, agent.RetryAfter(h("Retry-After-Ms", "250", "Retry-After", "9")), "the finer hint wins")
	require.Equal(t, time.Duration(0), agent.RetryAfter(h("Retry-After", "soon")))
	require.Equal(t, time.Duration(0), agent.RetryAfter(h("Retry-After", "-3")))
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	require.Equal(t, time.Duration(0), agent.RetryAfter(h("Retry-After", past)))
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	d := agent.RetryAfter(h("Retry-After", future))
	require.Greater(t, d, 58*time.Minute)
	require.LessOrEqual(t, d, time.Hour)

	e := agent.StatusError(429, h("Retry-After", "3"), "", "", nil)
	require.Equal(t, 3*time.Second, e.RetryAfter)
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestTransportErrorClassification(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		err  error
		code string
	}{
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), agent.CodeStreamCut},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), agent.CodeStreamCut},
		{refused, agent.CodeModelUnreachable},
		{&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, agent.CodeModelUnreachable},
		{fmt.Errorf("post: %w", context.DeadlineExceeded), agent.CodeModelUnreachable},
	}
	for _, c := range cases {
		e := agent.TransportError(ctx, c.err)
		require.NotNil(t, e, "%v", c.err)
		require.Equal(t, c.code, e.Code, "%v", c.err)
		require.True(t, e.Transient, "%v", c.err)
	}
	require.Nil(t, agent.TransportError(ctx, errors.New("something else")))

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.Nil(t, agent.TransportError(cancelled, refused), "a cancelled call is not the model's failure")
}

// A refused certificate or a base URL net/http cannot use fails the same way every
// time: permanent, though *url.Error is a net.Error. The errors are net/http's own.
func TestTransportErrorsThatNoRetryFixes(t *testing.T) {
	t.Parallel()
	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	defer tlsServer.Close()
	plainServer := httptest.NewServer(http.NotFoundHandler())
	defer plainServer.Close()
	cases := []struct {
		name, url, message string
	}{
		{"untrusted certificate", tlsServer.URL, "the model provider's TLS certificate was refused: check the base URL"},
		{"no scheme", "localhost:11434/v1/chat/completions", "the model provider's base URL is not usable: check its scheme (http:// or https://) and host"},
		{"empty base URL", "/chat/completions", "the model provider's base URL is not usable: check its scheme (http:// or https://) and host"},
		{"https to a plain port", strings.Replace(plainServer.URL, "http:", "https:", 1), "the model provider's base URL is not usable: check its scheme (http:// or https://) and host"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, c.url, nil)
			require.NoError(t, err)
			resp, err := (&http.Client{}).Do(req)
			if resp != nil {
				_ = resp.Body.Close()
			}
			require.Error(t, err)
			e := agent.TransportError(t.Context(), err)
			require.NotNil(t, e, "%v", err)
			require.Equal(t, agent.CodeModelUnreachable, e.Code, "%v", err)
			require.False(t, e.Transient, "%v", err)
			require.Equal(t, c.message, e.Message)
		})
	}
	// A custom transport may return the x509 error itself.
	e := agent.TransportError(context.Background(), &url.Error{Op: "Post", URL: "https://x", Err: x509.UnknownAuthorityError{}})
	require.NotNil(t, e)
	require.False(t, e.Transient)

}
