// Package journal is chatd's persistence service for conversations: every write a
// session's actor makes reaches PostgreSQL through it, and what the database answers
// comes back through it.
//
// It owns what persistence needs beyond a statement:
//
//   - durability classes (Class): a write is stored behind the stream (Behind), before
//     the step that made it is told (BeforeAnnounce), or before the caller is answered
//     (BeforeAck, a statement made at once with Queue.Do after the writes before it);
//     docs/protocol.md, "What is stored when", says what each promises;
//   - order: a session's writes are stored one after the other, in the order they were
//     made, by a writer goroutine that exists only while its queue holds writes;
//   - the fence: every write carries the lease token it was queued under, and a write
//     of a session held under a lease is refused without one; a write the database
//     refuses for its fence stops the queue (another node holds the session);
//   - failures, classified (Failure): a write refused because its row moved on is
//     dropped; one the database will never take (an invalid value, a row it refers to
//     that is gone) is given up at once, logged at error level with its SQLSTATE, and
//     reported to the actor; one that may pass (a lost connection, a deadlock, a
//     shutdown of the server) halts the queue and is retried with bounded backoff, as
//     soon as any write of the node succeeds again, or when a step needs it;
//   - the stream log (Stream): the text a segment is streaming and the output of a
//     running tool, group-committed for every session of the node in one statement per
//     interval and removed once the final text is stored, so a crash loses at most one
//     interval of it;
//   - metrics: queue depth, the oldest queued write's age, failures by kind and
//     SQLSTATE, writes given up, the stream log's bytes and statements.
//
// A Writer is the node's service: it makes the Queues of the sessions, runs the stream
// log and holds the metrics. A Queue belongs to one session's actor; its methods are
// for that actor's goroutine, except where they say otherwise.
package journal
