package pipeline

import (
	"fmt"
	"strconv"

	"github.com/antifatigue/gate/internal/gate"
)

// state is where one message stands on its way through the core. Every
// stage reads it to know whether the message is its to handle, and moves
// it on; each word means one thing (see the glossary in doc.go).
//
//	parse:   toDecide | invalid | twin; the ledger lookup: -> prior |
//	         invalid (a reused id); after decide, twin -> invalid (a
//	         reused id)
//	wait:    toDecide -> decided (held behind its queue) | failed (a
//	         check whose queue the store refused or could not look at)
//	admit:   toDecide -> invalid (a message or held one the store
//	         refused) | failed (a check it refused, or a store down and
//	         no fail open: a held one never fails open) | decided (failed
//	         open)
//	resolve: toDecide -> decided
//	commit:  decided | invalid -> committed (decided only) | invalid
//	         (parked; a message whose key the ledger held for another
//	         scene or recipient: a reused id) | failed | prior (a message
//	         whose key the ledger held) | conflict (such a check)
//	forward: committed | prior -> failed (the publish failed)
type state uint8

const (
	// toDecide: this batch decides it, and has not yet; plan (then res)
	// hold what the stages found so far.
	toDecide state = iota
	// decided: dec holds this batch's decision, not yet durable.
	decided
	// committed: dec is durable in the ledger and the audit log.
	committed
	// invalid: it can never be decided; err holds its *gate.InvalidError.
	// A message is recorded as invalid and parked (the dead letter).
	invalid
	// twin: an earlier message of the same batch has its key; that one
	// decides both.
	twin
	// prior: decided before this batch; prior holds the ledger's outcome,
	// which it keeps (err keeps an invalid message's verdict).
	prior
	// conflict: the commit found its key in the ledger already, claimed
	// by another message or check; it takes the first claim's outcome.
	conflict
	// failed: err holds its verdict, a store failure; no later stage
	// touches it (a message is retried, a check answers the error).
	failed
)

// slot is what the window store recorded for a message in this batch.
type slot uint8

const (
	noSlot    slot = iota // nothing: not asked, refused, a dry run, or taken back
	duplicate             // admitted as an id the window holds already: counted nothing
	counted               // admitted and counted: it fills a place in its windows
)

// item is one message (or check) on its way through the core.
type item struct {
	state state
	slot  slot
	// dryRun: a check that records nothing (not in the windows, not in
	// the ledger).
	dryRun bool
	key    string // idempotency key
	msg    gate.Message
	d      gate.Delivery // zero for a check
	twin   int           // with state twin, the index of the item deciding it
	plan   gate.Plan
	dec    gate.Decision
	res    gate.AdmitResult
	prior  gate.Prior // with state prior: what the ledger holds
	err    error      // with state invalid or failed: its verdict
	// answer is a check's answer, committed with its record when the audit
	// log keeps answers (gate.AnswersWithClaims).
	answer *gate.CheckAnswer
}

// moves are the moves between states a stage may make (see state): a
// state's set of the states it may become.
var moves = [...]uint16{
	toDecide:  1<<decided | 1<<invalid | 1<<twin | 1<<prior | 1<<failed,
	decided:   1<<committed | 1<<invalid | 1<<prior | 1<<conflict | 1<<failed,
	committed: 1 << failed,
	invalid:   1<<invalid | 1<<twin | 1<<prior | 1<<failed,
	twin:      1 << invalid,
	prior:     1 << failed,
	conflict:  0,
	failed:    0,
}

// to moves it to s. A move the table does not allow is a bug in a stage:
// it panics, which the front end recovers, logs and counts (the batch
// fails, to be retried or answered), rather than send a message on a way
// it must not take.
func (it *item) to(s state) {
	if moves[it.state]&(1<<s) == 0 {
		panic(fmt.Sprintf("pipeline: an item %s cannot become %s", it.state, s))
	}
	it.state = s
}

// fail moves it to failed with err.
func (it *item) fail(err error) { it.to(failed); it.err = err }

// decide moves it to decided with d.
func (it *item) decide(d gate.Decision) { it.to(decided); it.dec = d }

// park moves it to invalid with err, and drops what this batch decided.
func (it *item) park(err *gate.InvalidError) {
	it.to(invalid)
	it.err, it.dec = err, gate.Decision{}
}

// takePrior moves it to prior: the ledger decided its key before, as pr.
func (it *item) takePrior(pr gate.Prior) { it.to(prior); it.prior = pr }

// twinOf moves it to twin of item j, the first of the batch with its key.
func (it *item) twinOf(j int) { it.to(twin); it.twin = j }

var stateNames = [...]string{toDecide: "to decide", decided: "decided", committed: "committed",
	invalid: "invalid", twin: "twin", prior: "prior", conflict: "conflict", failed: "failed"}

func (s state) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// admission is the request it was admitted under, when the window store
// recorded it (as a duplicate or not), for taking it back.
func (it *item) admission() *gate.AdmitRequest {
	if it.slot == noSlot {
		return nil
	}
	return it.plan.Request
}

// seqKey is the idempotency key of a message known by its stream sequence
// alone.
func seqKey(seq uint64) string { return "seq:" + strconv.FormatUint(seq, 10) }
