// Package hub is the ConversationHub: the registry of live conversation actors.
//
// It starts an actor the first time a session is asked for, hands the same actor to every
// later caller, forgets an actor when it evicts itself after its idle period (a deadline
// the conversation.Deadlines service fires), and stops all of them on shutdown. An actor
// removes itself from the hub inside its own goroutine before it stops taking intents,
// and a hello that reaches an actor that has just stopped is retried on a new one, so
// eviction can neither lose a subscriber nor leave two actors for one session. The hub
// holds no session state of its own.
//
// Sessions (sessions.go) is a user's conversation list over the store and the hub:
// list, rename, and delete, which ends the session's actor, kills its sandbox and leaves
// a tombstone; while a session is being deleted no actor is started for it.
package hub
