// Package transport is what chatd's transports share, and its HTTP surface.
//
// It owns:
//   - Outbox, the transport-neutral conversation.Subscriber: one connection's bounded
//     outbound queue with its two byte budgets (live events, replies; catch-ups outside
//     both), its close request and the slow-consumer rule (DisconnectSlow, 4008). A
//     transport gives it the Format it encodes events in and a catch-up encoder, and a
//     Writer that takes batches of frames from it without blocking.
//   - Disconnect, the close codes every transport shares.
//   - Authenticator and Anonymous, and ExpiringAuthenticator for tokens that expire
//     (package auth implements it with JWTs).
//   - Metrics: connections, frames sent, slow-consumer drops, for every transport.
//   - Server: /healthz, /readyz, the mounting of the WebSocket endpoint at GET /v1/ws,
//     of the HTTP JSON API (transport/httpapi) under /v1/sessions, and of the app
//     (Config.App, package web) at every other path, so cmd/chatd serves one Handler
//     and shuts one Server down.
//
// It must not know any transport's wire: no WebSocket, no frame types, no JSON of the
// protocol (those are transport/ws's, and later transport/aisdk's). It never touches the
// database; the conversation package decides what is stored.
package transport
