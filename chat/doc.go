// Package chat holds chatd's domain types: sessions, runs, messages, tool calls, usage and
// their status values, and the checks that keep text and JSON storable and well formed.
//
// It is a leaf: it imports nothing of chatd's, so every layer may import it (the store
// maps rows to these types, the conversation actor keeps them in memory, agents read them
// as history, transports encode them). It knows nothing of SQL, actors or wire formats.
package chat
