// Package conversation is the ConversationModel: one actor goroutine per session that owns
// everything live about it. Between runs, the actor gives its goroutine back once it has
// nothing to do (Actor.park), and whatever reaches it next starts the loop again.
//
// The actor serializes intents (hello, send, cancel, decide, history, unsubscribe, and
// what a run goroutine emits) through its inbox. It drives an Agent in a goroutine per
// run, numbers every event with a seq within the actor's epoch, keeps recent events in a
// bounded replay ring, and fans each event out to subscribers without ever blocking on
// one. A hello registers the subscriber and queues its catch-up (a replay from the ring,
// or a snapshot) in one actor step, so nothing is missed or sent twice.
//
// Files, by responsibility:
//
//	actor.go      the actor: its state, loop, timers, stop
//	api.go        the methods other goroutines call (Hello, Send, Cancel, History, Stop,
//	              Flush, Delete)
//	subscribe.go  hello, snapshot, history and publishing events to subscribers
//	run.go        a run's life: send, begin, cancel, finish
//	emitter.go    the run goroutine and the Emitter it gives the agent
//	segment.go    assistant segments (text and reasoning) and their live text
//	coalesce.go   merging deltas within a window
//	tools.go      tool calls; approval.go: approvals, pauses and usage
//	journal.go    every database read and write of the actor, by durability class; the
//	              writes go through the session's queue of the journal service (package
//	              journal: order, fences, retries, failures, the stream log)
//	writebehind.go the overlay of queued writes on reads, what the actor does with the
//	              writes the database refused (onWrites), and waiting for a step's writes
//	runcount.go   what a start must know before its model is called early
//	recent.go     the session's newest messages and latest run, in memory: snapshots
//	              and a run's history for its model without a database read
//	ring.go       the replay ring of events; event.go: events, formats, subscribers
//	deadlines.go  the eviction and abandonment deadlines of all actors, as services
//
// The package does not know any wire format: a Subscriber encodes events with its own
// Format (Event.Encode caches one encoding per format), and its journal is its only way
// to the database (the Store interface, and the journal package's queue). It does not know about other sessions either;
// the hub starts, finds and evicts actors. convtest is a recording Subscriber for tests.
package conversation
