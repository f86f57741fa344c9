package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/google/uuid"
)

// relayed sends a request about one session on to the node holding it (Config.Relay),
// and serves it here otherwise: when no other live node holds it, when it was relayed
// already (the holder does not relay again), or when the holder cannot be reached. The
// holder authenticates the request again. Listing stays local: it reads the database
// only.
func (a *API) relayed(h func(w http.ResponseWriter, r *http.Request, owner string)) func(w http.ResponseWriter, r *http.Request, owner string) {
	return a.relayedLimit(MaxBodyBytes, h)
}

// relayedLimit is relayed for a route whose bodies may be up to limit bytes.
func (a *API) relayedLimit(limit int64, h func(w http.ResponseWriter, r *http.Request, owner string)) func(w http.ResponseWriter, r *http.Request, owner string) {
	return func(w http.ResponseWriter, r *http.Request, owner string) {
		id, err := uuid.Parse(r.PathValue("id"))
		if a.cfg.Relay == nil || err != nil {
			h(w, r, owner)
			return
		}
		addr, ok := a.cfg.Relay.Owner(r, id)
		if !ok {
			h(w, r, owner)
			return
		}
		// Read the body first, so that it is still there when the holder cannot be
		// reached and the request is served here.
		reset, err := bufferBody(w, r, limit)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		a.cfg.Relay.Proxy(w, r, addr, func(*http.Response) {
			a.cfg.Relay.Metrics.RequestRelayed()
		}, func(w http.ResponseWriter, r *http.Request) {
			reset(r)
			h(w, r, owner)
		})
	}
}

// bufferBody reads r's body (at most limit bytes: bad_request past it) and makes it
// readable again from the start, now and whenever reset is called: for a request that
// may be sent on to another node and served here after all.
func bufferBody(w http.ResponseWriter, r *http.Request, limit int64) (reset func(*http.Request), err error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if maxErr := (*http.MaxBytesError)(nil); errors.As(err, &maxErr) {
		return nil, badRequest(fmt.Sprintf("the body is larger than %d bytes", limit))
	}
	if err != nil {
		return nil, badRequest("could not read the body")
	}
	reset = func(r *http.Request) {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	reset(r)
	return reset, nil
}
