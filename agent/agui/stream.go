package agui

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chatd/chatd/conversation"
)

// item is what the goroutine that does one HTTP request hands the run: the response
// opened, one event's data, the stream's end, or a failure.
type item struct {
	open bool
	data []byte
	end  bool
	// err ends the attempt: a failure before the stream opened, or how it ended (nil:
	// at the end of the body).
	err error
	// retry marks err as transient (connection failures, 5xx, 429), after is the wait
	// the server asked for with Retry-After (0: none).
	retry bool
	after time.Duration
}

// maxEvent bounds one server-sent event's line.
const maxEvent = 16 << 20

// stream does req and sends what comes back on items, until the body ends or stop is
// closed. It closes the body.
func stream(client *http.Client, req *http.Request, items chan<- item, stop <-chan struct{}) {
	send := func(it item) bool {
		select {
		case items <- it:
			return true
		case <-stop:
			return false
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		send(item{err: unreachable("could not reach the agent: %v", err), retry: true})
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		send(item{err: unreachable("the agent answered %s%s", resp.Status, snippet(resp.Body)), retry: true, after: retryAfter(resp.Header.Get("Retry-After"))})
		return
	}
	if resp.StatusCode/100 != 2 {
		send(item{err: badResponse("the agent answered %s%s", resp.Status, snippet(resp.Body))})
		return
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		send(item{err: badResponse("the agent answered with %q, not text/event-stream (AG-UI over SSE)%s", resp.Header.Get("Content-Type"), snippet(resp.Body))})
		return
	}
	if !send(item{open: true}) {
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEvent)
	var data []byte
	has := false
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(line) == 0 { // the end of an event
			if has && !send(item{data: data}) {
				return
			}
			data, has = nil, false
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // comments, event:, id:, retry: carry nothing AG-UI needs
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if has {
			data = append(data, '\n')
		}
		data, has = append(data, value...), true
	}
	// An event cut off by the end of the body is dropped, as the SSE spec says.
	send(item{end: true, err: sc.Err()})
}

func snippet(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 300))
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
	if s == "" {
		return ""
	}
	return ": " + s
}

func retryAfter(v string) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s > 0 {
		return min(time.Duration(s)*time.Second, maxBackoff)
	}
	return 0
}

// The codes of the errors a run ends with when the agent fails to answer as AG-UI says.
const (
	// CodeUnreachable: the agent could not be reached (connection refused, DNS, TLS), or
	// answered 5xx or 429, after the retries.
	CodeUnreachable = "agent_unreachable"
	// CodeBadResponse: the agent answered with something that is not an AG-UI event
	// stream: another content type, a 4xx, an event that is not AG-UI JSON, a stream
	// that ends without RUN_FINISHED or RUN_ERROR.
	CodeBadResponse = "agent_bad_response"
	// CodeTimeout: no event came for Config.Timeout.
	CodeTimeout = "agent_timeout"
)

func unreachable(format string, args ...any) *conversation.Error {
	return &conversation.Error{Code: CodeUnreachable, Message: fmt.Sprintf(format, args...)}
}

func badResponse(format string, args ...any) *conversation.Error {
	return &conversation.Error{Code: CodeBadResponse, Message: fmt.Sprintf(format, args...)}
}

// isEmitErr tells an Emitter's refusal of one report (a progress it will not take) from
// the end of the run.
func isEmitErr(err error) bool {
	var ce *conversation.Error
	return errors.As(err, &ce) && ce.Code == conversation.CodeBadRequest
}
