// Package natsbus is the gate's NATS JetStream adapter: it creates the
// GATE_IN, GATE_OUT, GATE_DEAD and GATE_REFUND streams, reads GATE_IN with
// the shared durable pull consumer "gate" and GATE_REFUND with "gate-refund",
// publishes forwards to gate.out (gate.Forwarder) and answers gate.check.
//
// Both consumers run one work loop (work.go): a handler decides, and the
// loop alone settles each message from its error's class (gate.Classify):
// Ack, dead letter + Term, or NakWithDelay. While a batch is in hand it
// sends InProgress heartbeats, so that AckWait can be short (a dead gate's
// messages come back quickly) without a slow batch losing its messages; and
// it recovers a handler's panic, parking only the message that causes it.
// It can also run an embedded nats-server for the zero-install default.
//
// It may import the standard library, nats.go, nats-server, internal/gate,
// internal/metrics and internal/ratelog (for refused checks' log lines);
// never another adapter.
package natsbus
