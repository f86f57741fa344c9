// Package conversation is the ConversationModel: one actor goroutine per session that owns
// everything live about it.
//
// The actor serializes intents (hello, send, cancel, history, unsubscribe, and what a run
// goroutine emits) through its inbox. It drives an Agent in a goroutine per run, writes the
// transcript at the points of the storage rule (never per token), numbers every event with
// a seq within the actor's epoch, keeps recent encoded events in a bounded replay ring, and
// fans each event out to subscribers without ever blocking on one. A hello registers the
// subscriber and queues its catch-up (a replay from the ring, or a snapshot) in one actor
// step, so nothing is missed or sent twice.
//
// The package does not know the wire format: an Encoder given by the transport turns
// events into frames, and a Subscriber is anything with a non-blocking Deliver. It does
// not know about other sessions either; the hub starts, finds and evicts actors.
package conversation
