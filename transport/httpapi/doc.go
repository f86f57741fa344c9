// Package httpapi is chatd's HTTP JSON API beside the WebSocket: the conversation list,
// GET /v1/sessions, PATCH /v1/sessions/{id} and DELETE /v1/sessions/{id}
// (docs/http.md).
//
// It owns:
//   - api.go: Config, the routes, the bearer token passed to the transport.Authenticator
//     the WebSocket uses, bounded request bodies, and the errors: JSON
//     {"error":{"code","message"}} with the protocol's codes, mapped to HTTP statuses in
//     one table
//   - sessions.go: the handlers, their wire types and the list's opaque cursor
//
// It calls a narrow Sessions interface (hub.Sessions implements it) and never touches
// the database or an actor itself.
package httpapi
