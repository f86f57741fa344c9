// Package agent is the home of chatd's agent implementations: the code that turns a
// user's message into streamed text and tool calls through a conversation.Emitter.
//
// Subpackages:
//
//	agent/demo    the embedded default: a deterministic reply streamed word by word,
//	              with a demo tool call when the message says "tool"
//	agent/script  a scripted agent for tests: text, tool events, errors, pauses
//
// Agents depend on the conversation package's Agent and Emitter contract and on nothing
// else of chatd's: they never see the database or the wire.
package agent
