// Package faulttest proves, on real services, that the gate loses nothing
// and doubles nothing when things break: the gate killed with SIGKILL and
// restarted, Redis cut, hung (toxiproxy) and restarted, Postgres and NATS
// restarted mid-stream, three gates sharing one consumer while being
// killed, a Redis Cluster, a three-node JetStream cluster losing its stream
// leaders, and hostile input.
//
// Every scenario runs the gate as a separate OS process, built once per run
// without the race detector, with a nats-server process (built from the
// nats-server module; three for the cluster) and redis-server instances of
// its own, so a kill never touches the services other tests share. Each scenario ends with
// one ledger check: every message id has exactly one outcome (forwarded
// once on GATE_OUT, one suppression row, parked on GATE_DEAD, or counted as
// dropped), the report counters agree, and no recipient got more than the
// rules allow.
//
// Under `make test` (GATE_TEST_REQUIRE_SERVICES=1) a missing service or
// binary fails the tests; under a plain `go test` they skip. Counts default
// to the (20,000 messages, 2,000 recipients, 3 kills) and can be
// bounded with GATE_FAULT_MESSAGES, GATE_FAULT_RECIPIENTS, GATE_FAULT_KILLS;
// GATE_FAULT_SEED replays the random kill points of a run.
//
// The package holds only tests. They import the gate's domain and adapter
// packages for types and names (internal/gate, internal/natsbus,
// internal/httpapi), internal/testing/testenv, internal/testing/gateproc
// (which builds and runs the processes), nats.go, go-redis, pgx and
// toxiproxy.
package faulttest
