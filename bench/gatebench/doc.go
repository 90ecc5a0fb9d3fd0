// Command gatebench measures the gate against what this machine can do, and
// against the seed design, in one run (`make bench`).
//
// One run, on real services (a nats-server process with JetStream, Redis,
// PostgreSQL):
//
//   - the gate: the real `gate serve` binary, fed N messages of 1 KB for
//     100,000 recipients under a rule set of several scenes with two windows
//     each and a recipient cap (about 30 % held back); decided messages per
//     second at the publisher's full speed, then the latency from publish to
//     outcome at half that rate (or GATE_BENCH_SECOND_RATE). Envelopes go
//     as bodies alone, as the contract's producers send them;
//     GATE_BENCH_HEADERS=1 (or -headers) adds the headers Nats-Msg-Id,
//     Gate-Scene, Gate-Recipient and Gate-Priority, so the gate decides
//     without decoding the body. The first line and the summary say which;
//   - the gate again, on the same messages for other recipients, every
//     scene deferring what it would suppress or drop (on_exceed: defer), at
//     full speed: the ~30 % held back are held durably to be released later,
//     which costs the audit store a held row and the batch a
//     HoldStore.Waiting lookup; the summary gives its rate over the
//     suppressing gate's (defer_rate_ratio);
//   - the ceilings, on the same services: JetStream consume + ack doing no
//     work, the gate's own Redis script with the gate's pipelining, and the
//     gate's audit commit;
//   - the seed design, as a careful engineer would build it from the seed
//     posts: one message at a time from a Consume callback, one MULTI of
//     ZADD / ZREMRANGEBYSCORE / ZCARD / EXPIRE per limit and recipient cap
//     (a rejected member removed again), a forward published and awaited or
//     a suppression row inserted, then a synchronous ack; its outcomes must
//     equal the simulation's;
//   - Redis memory per tracked (recipient, scene), from INFO memory.
//
// The outcome of a message is its acknowledgement on GATE_IN, which the gate
// sends only once the outcome is durable. gatebench sees every ack on the
// wire (a plain subscription to $JS.ACK.>), and the ack subject carries the
// message's stream sequence and the time the stream stored it: a message is
// decided once its sequence is acked (an ack seen twice counts once), and
// latency is the first ack's time minus the stored time, on one host clock. CPU time of every process (gate, nats-server, redis-server,
// postgres, gatebench itself) is read from /proc around each phase.
//
// It prints a table per run, the medians, and a last line starting with
// BENCH for machines to read. It exits non-zero when, in any run, the gate's
// counters disagree with the simulation, the gate sent a nak, or the seed
// decided otherwise than the simulation: such figures mean nothing. It leaves nothing behind: its keys in the
// shared Redis are deleted (never FLUSHALL), its Postgres schema dropped.
//
// Two more measures run instead of that one: -soak (make soak; soak.go)
// runs the gate for a long time at a fixed rate and judges whether latency,
// memory, tables or held rows grow, and -scale (make bench-scale; scale.go)
// measures the gate's CPU per message with 1, 2 and 3 gates on a
// three-node JetStream cluster and the Redis Cluster (docs/scaling.md).
//
// Being a command, it may import any package of the module and every
// adapter; the packages it measures must not import it.
package main
