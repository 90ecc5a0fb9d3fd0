// Package pipeline decides batches of messages: parse, take one rules
// snapshot, skip ids already decided, hold a message behind the held
// messages of its queue, admit through the window store, forward, then make
// the outcome durable in the audit log. It returns one error per message
// and leaves acknowledgement to the transport. Its Releaser settles held
// messages (on_exceed defer or digest, quiet hours) as they come due:
// released, digested, or given their fallback, through the same window
// store and forwarder.
//
// One message can neither crash nor stall it: a record the audit log
// refuses for good (gate.ErrPermanent) is isolated from the rest of its
// batch, which commits, and its message gets an *gate.InvalidError (the
// dead letter); a panic while parsing a message or recording its metrics is
// recovered, logged with the message and counted; metric labels name only
// the scenes that have a rule. A panic in a round of releases rolls the
// round back.
//
// It may import the standard library, internal/gate and internal/metrics;
// it sees every dependency through a gate interface, never an adapter.
package pipeline
