package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Run error codes providers report with ModelError.
const (
	CodeRateLimited      = "rate_limited"      // 429: retried
	CodeModelUnavailable = "model_unavailable" // 5xx, overloaded: retried
	CodeModelUnreachable = "model_unreachable" // no connection, timeouts: retried
	CodeStreamCut        = "model_stream_cut"  // the answer stopped half way: retried if nothing streamed
	CodeModelAuth        = "model_auth"        // 401, 403
	CodeModelQuota       = "model_quota"       // 402, or a 429 for a used-up quota: billing, not retried
	CodeModelNotFound    = "model_not_found"   // 404
	CodeModelRejected    = "model_rejected"    // 400 and other 4xx: the request was refused
	CodeContentFilter    = "content_filter"    // the provider's content policy
	CodeContextTooLong   = "context_too_long"  // 413, or a 400 saying so
	CodeBadResponse      = "model_bad_response"
)

// StatusError classifies an HTTP error answer from a model provider. providerMessage is
// the provider's own explanation (from its JSON error body), shown to the user trimmed;
// kind is the provider's error type when it has one ("overloaded_error").
func StatusError(status int, header http.Header, kind, providerMessage string, err error) *ModelError {
	e := &ModelError{Err: err, RetryAfter: RetryAfter(header)}
	detail := shorten(providerMessage)
	lower := strings.ToLower(kind + " " + providerMessage)
	// Servers report a context overflow or a policy refusal with a 5xx too (or an error
	// event, which has no status): the words win over the status. The loose ones ("too
	// long", "safety") only count below 500, where a gateway's "upstream took too long"
	// cannot be meant.
	loose := status < 500
	tooLong := status == http.StatusRequestEntityTooLarge ||
		containsAny(lower, "context length", "context_length", "maximum context") ||
		(loose && strings.Contains(lower, "too long"))
	refused := containsAny(lower, "content_policy", "content_filter") || (loose && strings.Contains(lower, "safety"))
	switch {
	case status == http.StatusPaymentRequired || strings.Contains(lower, "insufficient_quota"):
		// OpenAI answers 429 when the account's quota is spent: waiting does not help.
		e.Code, e.Message = CodeModelQuota, "the model provider's quota or credit is used up: check the plan and billing"
	case status == http.StatusTooManyRequests || strings.Contains(lower, "rate_limit"):
		e.Code, e.Message, e.Transient = CodeRateLimited, "the model provider is rate limiting requests", true
	case status == 529 || strings.Contains(lower, "overloaded"):
		e.Code, e.Message, e.Transient = CodeModelUnavailable, "the model provider is overloaded", true
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Code, e.Message = CodeModelAuth, "the model provider refused the credentials: check the API key"
	case status == http.StatusNotFound:
		e.Code, e.Message = CodeModelNotFound, "the model or endpoint was not found: check CHATD_MODEL and the base URL"
	case tooLong:
		e.Code, e.Message = CodeContextTooLong, "the conversation is too long for the model: lower CHATD_CONTEXT_TOKENS"
	case refused:
		e.Code, e.Message = CodeContentFilter, "the model provider refused the request under its content policy"
	case status >= 500 || status == http.StatusRequestTimeout || status == http.StatusTooEarly:
		e.Code, e.Message, e.Transient = CodeModelUnavailable, fmt.Sprintf("the model provider failed (HTTP %d)", status), true
	default:
		e.Code, e.Message = CodeModelRejected, fmt.Sprintf("the model provider rejected the request (HTTP %d)", status)
	}
	if detail != "" {
		e.Message += ": " + detail
	}
	return e
}

// TransportError classifies an error that is not an HTTP answer: no connection, a reset,
// a timeout, a stream that broke off. It returns nil for a cancelled ctx, which is not
// the model's failure.
func TransportError(ctx context.Context, err error) *ModelError {
	if ctx.Err() != nil {
		return nil
	}
	var (
		netErr     net.Error
		verifyErr  *tls.CertificateVerificationError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
	)
	switch {
	// A refused certificate or an unusable base URL fails the same way on every retry
	// (and *url.Error, which wraps them, is a net.Error): check these first.
	case errors.As(err, &verifyErr), errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return &ModelError{Code: CodeModelUnreachable, Message: "the model provider's TLS certificate was refused: check the base URL", Err: err}
	case badURL(err):
		return &ModelError{Code: CodeModelUnreachable, Message: "the model provider's base URL is not usable: check its scheme (http:// or https://) and host", Err: err}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF):
		return &ModelError{Code: CodeStreamCut, Message: "the connection to the model provider broke off", Transient: true, Err: err}
	case errors.As(err, &netErr) && netErr.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return &ModelError{Code: CodeModelUnreachable, Message: "the model provider did not answer in time", Transient: true, Err: err}
	case errors.As(err, &netErr), errors.Is(err, syscall.ECONNREFUSED):
		return &ModelError{Code: CodeModelUnreachable, Message: "the model provider could not be reached", Transient: true, Err: err}
	}
	return nil
}

// badURL reports net/http's errors for a request it cannot send anywhere: no or an
// unknown scheme ("localhost:11434/v1"), no host, or plain HTTP sent to an HTTPS port.
// net/http has no types for them, only messages.
func badURL(err error) bool {
	var urlErr *url.Error
	if !errors.As(err, &urlErr) || urlErr.Err == nil {
		return false
	}
	return containsAny(urlErr.Err.Error(), "unsupported protocol scheme", "no Host in request URL", "server gave HTTP response to HTTPS client")
}

// RetryAfter reads a provider's retry hint: retry-after-ms, or retry-after in seconds or
// as an HTTP date. 0 when there is none.
func RetryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// shorten keeps a provider's explanation to one short line.
func shorten(s string) string {
	s = strings.TrimSpace(strings.Join(strings.Fields(s), " "))
	if len(s) <= 200 {
		return s
	}
	cut := 200
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
