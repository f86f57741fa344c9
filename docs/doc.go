// Package docs holds chatd's documentation. Its Go side is only the protocol's JSON
// Schema, embedded so that tests validate frames against the very file clients read,
// whatever directory they run in. Nothing in the server imports it.
package docs

import _ "embed"

// ProtocolSchema is protocol.schema.json: every client and server frame of protocol v1
// as a JSON Schema (draft 2020-12).
//
//go:embed protocol.schema.json
var ProtocolSchema []byte
