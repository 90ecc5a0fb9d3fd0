package natsbus

import "time"

// The defaults of the gate's NATS settings, in one place: Options and
// ConsumeOptions fall back to them, and gate serve's settings table, gate
// publish and the benchmark name them instead of writing the values again.
const (
	// DefaultInSubject is the subject producers publish to, captured by
	// the GATE_IN stream.
	DefaultInSubject = "gate.in"
	// DefaultOutSubject is the subject forwarded messages are published to.
	DefaultOutSubject = "gate.out"
	// DefaultDeadSubject is the subject undecidable messages are parked on.
	DefaultDeadSubject = "gate.dead"
	// DefaultEmbeddedAddr is where the embedded nats-server listens, the
	// address a client finds a NATS server at by default.
	DefaultEmbeddedAddr = "127.0.0.1:4222"
	// DefaultBatch is the most messages decided together.
	DefaultBatch = 256
	// DefaultAckWait is the gate consumer's JetStream AckWait.
	DefaultAckWait = 5 * time.Second
	// DefaultMaxAckPending is the gate consumer's JetStream MaxAckPending.
	DefaultMaxAckPending = 1000
	// DefaultOutDuplicates is GATE_OUT's duplicate window.
	DefaultOutDuplicates = 2 * time.Hour
)
