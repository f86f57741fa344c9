// Package agent is the agent loop and what it drives: a conversation.Agent that turns a
// user's message into model calls, streamed text and reasoning, and tool calls (with
// approvals, retries and a context budget), reporting everything through the
// conversation.Emitter it is given. It defines the Model and Tool interfaces that
// providers and tools implement, and gives each session one sandbox through Sandboxes.
//
// Subpackages:
//
//	agent/agenttest      a test server speaking a vendor's streaming format; a recording Emitter
//	agent/agui           a conversation.Agent in front of an agent served over AG-UI (HTTP, SSE)
//	agent/anthropic      a Model for Anthropic's Messages API, streaming, through its SDK
//	agent/demo           the default Model (it needs no network) and its demo_sandbox tool
//	agent/modeltest      a scripted Model for tests that records every request
//	agent/openai         a Model for Chat Completions (OpenAI, Ollama, vLLM, llama.cpp, …)
//	agent/sandbox        the Provider and Sandbox interfaces: where tools run commands
//	agent/sandbox/local  a Provider of child processes on this machine, a directory each
//	agent/script         a deterministic conversation.Agent for tests, without the loop
//	agent/synth          the benchmarks' Model: numbered, time-stamped tokens at a set rate
//	agent/tools          the built-in tools: current_time, and shell (sandboxed, approved)
//
// A run can be continued, by any process, from what it stored (Request.Checkpoint),
// after a crash, a restart or a deploy. The loop then rebuilds the model's view of the
// run from the checkpoint and never redoes what it holds: settled tool calls are
// results (an interrupted one is reported as cut off, effects unknown), a call still
// awaiting approval waits for its decision again, a call still running is run again
// when its tool is Idempotent and ended interrupted otherwise, and an answer cut off
// mid-text is continued from where it stopped (ModelRequest.Continue: Anthropic prefills
// it, OpenAI-compatible servers are asked to go on or, with ContinueFinalMessage,
// continue it themselves; the demo model picks up its deterministic reply). resume.go
// has the details.
//
// What agents may import of chatd: conversation, for the Agent and Emitter contract they
// implement and call, and chat, for the domain types (messages, runs, tool calls, usage,
// their statuses). Nothing of store, queries, hub or transport: an agent never sees the
// database, an actor's registry or the wire. What it needs kept, it asks for through an
// interface of its own that the wiring fills (SandboxStore, which store implements).
package agent
