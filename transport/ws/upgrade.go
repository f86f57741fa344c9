package ws

import (
	"crypto/tls"
	"net/http"
	"net/url"
)

// upgrade is what a connection keeps of its upgrade request, for its logs and the
// Authenticator (hello, auth.refresh): not the request, which would keep its context,
// and not a copy of it, whose header map and URL cost more than these strings. request
// rebuilds an *http.Request from it.
type upgrade struct {
	method, proto, host, remoteAddr string
	protoMajor, protoMinor          int
	// uri is the request line's target; net/http parsed the URL from it.
	uri string
	tls *tls.ConnectionState
	// header is the request's headers, without the WebSocket handshake's own (which
	// nothing reads after the upgrade), as name, value, name, value...
	header []string
}

func newUpgrade(r *http.Request) upgrade {
	n := 0
	for k, vs := range r.Header {
		if !handshakeHeader(k) {
			n += 2 * len(vs)
		}
	}
	h := make([]string, 0, n)
	for k, vs := range r.Header {
		if handshakeHeader(k) {
			continue
		}
		for _, v := range vs {
			h = append(h, k, v)
		}
	}
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI() // a request that did not come from net/http's server
	}
	return upgrade{
		method: r.Method, proto: r.Proto, host: r.Host, remoteAddr: r.RemoteAddr,
		protoMajor: r.ProtoMajor, protoMinor: r.ProtoMinor,
		uri: uri, tls: r.TLS, header: h,
	}
}

// handshakeHeader reports whether k (canonical) is one of the headers of the WebSocket
// handshake itself.
func handshakeHeader(k string) bool {
	switch k {
	case "Connection", "Upgrade", "Sec-Websocket-Key", "Sec-Websocket-Version", "Sec-Websocket-Extensions", "Sec-Websocket-Protocol":
		return true
	}
	return false
}

// get returns the first value of the header name, "" when there is none.
func (u *upgrade) get(name string) string {
	name = http.CanonicalHeaderKey(name)
	for i := 0; i < len(u.header); i += 2 {
		if u.header[i] == name {
			return u.header[i+1]
		}
	}
	return ""
}

// request rebuilds the upgrade request (transport.Authenticator says what it holds): a
// new one at each call, with a context that is never done.
func (u *upgrade) request() *http.Request {
	h := make(http.Header, len(u.header)/2)
	for i := 0; i < len(u.header); i += 2 {
		h[u.header[i]] = append(h[u.header[i]], u.header[i+1])
	}
	target, err := url.ParseRequestURI(u.uri)
	if err != nil {
		target = &url.URL{} // not expected: net/http parsed the same string
	}
	return &http.Request{
		Method:     u.method,
		URL:        target,
		Proto:      u.proto,
		ProtoMajor: u.protoMajor,
		ProtoMinor: u.protoMinor,
		Header:     h,
		Host:       u.host,
		RemoteAddr: u.remoteAddr,
		RequestURI: u.uri,
		TLS:        u.tls,
	}
}
