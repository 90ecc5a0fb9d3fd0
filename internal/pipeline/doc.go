// Package pipeline decides batches of messages: parse, take one rules
// snapshot, skip ids already decided, admit through the window store,
// forward, then make the outcome durable in the audit log. It returns one
// error per message and leaves acknowledgement to the transport.
//
// It may import the standard library, internal/gate and internal/metrics;
// it sees every dependency through a gate interface, never an adapter.
package pipeline
