// Package pipeline decides messages. One decision core (core.go) serves
// every front end: core.decide plans each message (rules, the recipient's
// preferences, quiet hours), holds it behind the held messages of its
// queue, admits it through the window store and resolves its outcome;
// core.commit makes the outcomes durable in the ledger and audit log, parks
// (or fails) what a store refuses for good, and takes admissions back when
// the ledger held an id already. The front ends translate their input into
// the core's items and its result into their answer:
//
//   - Pipeline (gate.in): parse, take one rules snapshot, look redelivered
//     ids up in the ledger, decide, commit, then forward what was committed
//     as a forward (and replay forwards the ledger holds), in the order the
//     batches started. It returns one error per message and leaves
//     acknowledgement to the transport.
//   - Checker (POST /v1/check, gate.check): a batch of checks, decided as
//     messages would be, dry or not, each answered alone.
//   - Releaser: settles held messages (on_exceed defer or digest, quiet
//     hours) as they come due: released, digested, or given their
//     fallback. Each round gives every due message a step (settle.go);
//     the messages (and digests) whose windows it asks go through the
//     core's plan, admit (under releasePolicy: a store that fails fails the
//     round, which is rolled back, for a held message never fails open)
//     and resolve, and the admissions of those that stay held behind an
//     earlier one through its forget. Its forwards are its own: a round
//     publishes all or nothing.
//   - Refunder: takes a forwarded message out of its windows again,
//     through the core's forget.
//   - Canceller (POST /v1/cancel, gate.cancel): takes held messages back
//     by their cancel_key, through the core's cancel stage (cancel.go),
//     which the Pipeline runs too, after commit, for a message that
//     resolves a key (committed or prior: a redelivery cancels again).
//
// Read in flow order, the files are one message's path: state.go (the
// per-message state), policy.go, core.go, plan.go, wait.go, admit.go, resolve.go,
// commit.go (with reuse.go), forward.go; then the front ends pipeline.go,
// check.go and checkbatch.go, release.go and settle.go, refund.go, cancel.go; ports.go wraps the
// ports with metrics at wiring time, observe.go counts decisions and
// recovers panics.
//
// The one place each rule is decided: a preference rule in plan
// (gate.PlanWithPreferences), a hold behind a queue in wait (gate.Queued),
// the fail-open rule in admit's failOpen (gate.FailOpen), every other
// outcome in resolve (gate.Resolve); what becomes of a held message past
// its expiry, or whose scene lost its rule, in settle.go.
//
// One message can neither crash nor stall it: a record the audit log
// refuses for good (gate.ErrPermanent) is isolated from the rest of its
// batch, which commits, and its message gets an *gate.InvalidError (the
// dead letter); a panic while parsing a message or recording its metrics is
// recovered, logged with the message and counted; metric labels name only
// the scenes that have a rule. A panic in a round of releases rolls the
// round back.
//
// # Glossary
//
// Each word has one meaning in this package.
//
//   - item: one message or check on its way through the core.
//   - key: an item's idempotency key: its id, "invalid:" and its
//     Nats-Msg-Id, "seq:" and its stream sequence, or, for a message
//     parked as a reused id, "reused:seq:", its sequence, ":" and its id.
//   - plan: what deciding an item takes (gate.Plan): the window request,
//     the queues it may join, whether quiet hours or a bypass apply.
//   - toDecide: the state of an item this batch decides and has not yet.
//   - decided: the state of an item whose decision this batch made, not
//     yet durable.
//   - committed: the state of an item whose decision is durable.
//   - invalid: the state of an item that can never be decided; its message
//     is recorded as invalid and parked.
//   - park: send a message to the dead letter with an *gate.InvalidError,
//     counted once as invalid.
//   - twin: the state of a later delivery of a key in the same batch; the
//     first one decides both.
//   - prior: the state of an item decided before this batch; the outcome
//     the ledger holds, which it keeps.
//   - conflict: the state of an item whose commit found its key in the
//     ledger already; it takes the first claim's outcome.
//   - reused id: a key met again (a twin, a prior, a conflict) for another
//     scene or recipient than its first use (gate.Reuses): never a
//     duplicate. A message is parked naming the first use, a check
//     answers 409; neither keeps a slot (reuse.go).
//   - body mismatch: a key met again (a twin, a prior, a conflict) for the
//     same scene and recipient with another body than its first message
//     (the ledger keeps a hash of it): a duplicate still, which keeps the
//     first outcome, counted and logged (reuse.go).
//   - failed: the state of an item a store failed; its error is its
//     verdict (a message is retried).
//   - slot: what the window store recorded for an item: noSlot, duplicate
//     (the id was there already) or counted.
//   - forget: take admissions back out of their windows (core.forget;
//     forgetLogged where a failure cannot be retried, only logged).
//   - policy: what the front end of a batch asks of the core where front
//     ends differ (policy.go): messagePolicy, checkPolicy, releasePolicy
//     (the held messages a Releaser round asks about). The stages ask the
//     policy, never which front end called them.
//   - wait: hold an item behind the held messages of its queue.
//   - busy: a queue a batch in flight holds messages in, unknown to the
//     hold store until that batch commits.
//   - fail open: forward unchecked, when the window store cannot answer,
//     a message of a scene that says so.
//   - refused: a store's refusal for good (gate.ErrPermanent,
//     gate.ErrInvalidRequest): asked again, it refuses again.
//   - unavailable: a store's transient failure (gate.ErrUnavailable): a
//     retry may succeed.
//   - replay: publish again the forward the ledger holds for a message
//     that came back.
//   - settle: the Releaser's deciding of held messages that came due.
//   - step: what a Releaser round does with one held message: wait, ask
//     its windows, release, fall back or reschedule.
//   - first claim: the message or check whose commit put a key in the
//     ledger; a check in conflict is answered with its answer
//     (Checker.answerFirst).
//
// It may import the standard library, internal/gate, internal/metrics and
// internal/ratelog; it sees every dependency through a gate interface,
// never an adapter.
package pipeline
