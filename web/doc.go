// Package web serves chatd's browser app: the chat PWA built into dist/ by
// `node build.mjs` (make web) from app/ and the client library in client/, embedded here
// so that a chatd binary needs nothing else to serve it.
//
// It owns the HTTP side of the app's files only: which path serves which file, with
// which Content-Type and caching. It must not know the protocol, the sessions API or the
// database: the app talks to chatd over /v1/ like any other client, and transport mounts
// this package's Handler for every path that is not its own.
package web
