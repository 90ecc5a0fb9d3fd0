package pipeline

import (
	"context"
	"sync"

	"github.com/antifatigue/gate/internal/gate"
)

// Pipeline decides batches of deliveries from gate.in: the message front
// end of the core. It is safe for concurrent use.
type Pipeline struct {
	o    Options
	core core

	mu sync.Mutex
	// inFlight maps the keys of every batch started and not yet finished
	// to a channel closed when that batch finishes.
	inFlight map[string]chan struct{}
	// forwarded is closed once the batch started last has published its
	// forwards: the next batch publishes after it, in order.
	forwarded chan struct{}
	// held counts, for each queue of held messages, the batches in flight
	// that hold messages in it: until they commit, the hold store does not
	// know them, and a later message of the queue must not overtake them.
	held map[gate.Queue]int
}

// Start decides batch in two steps, a gate.BatchStarter, so that a
// transport can decide the next batch while this one commits. Start parses
// the batch, looks up the redelivered ids in the ledger and runs the core's
// decide on the rest; it returns once every decision is made. finish runs
// the core's commit, then publishes the forwards, after those of every
// batch started earlier, and returns one error per delivery: nil when its
// outcome is durable (ack), an *gate.InvalidError when it can never be
// decided or the audit store refuses its record for good (dead letter), or
// a transient error wrapping gate.ErrUnavailable (retry later). Every step
// is idempotent on the message id, so a retried message is never
// forwarded, audited or counted twice.
//
// Only redelivered messages are looked up before deciding (priors): a
// first delivery was decided before only if its producer published the id
// again (after GATE_IN's own duplicate window), and the commit finds those,
// since it claims every id in the ledger. Such an id keeps its first
// outcome: what this batch decided for it is not forwarded, audited or
// counted, and is taken out of the window again. A forward is published
// after its commit, so a message that comes back after a crash in between
// finds its forward in the ledger and publishes it again; the outbound
// stream's duplicate window absorbs the copy when the first publish did
// land.
//
// Two safeguards keep the guarantees of one batch at a time:
//   - a batch holding an id that a batch in flight holds too starts only
//     once that batch has finished, so its lookup or its claim meets that
//     batch's outcome;
//   - forwards are published in the order the batches started, so a
//     recipient's messages reach the outbound stream in the order decided.
//
// Held messages keep their order too: before the window store is asked,
// one call to the hold store finds the queues of the batch's messages that
// hold messages already, and a message of such a queue is held behind them
// (core.wait); within the batch, a message never overtakes an earlier one
// held in its queue (keepOrder); and the queues that batches in flight hold
// messages in count as holding (busy), until those batches commit.
//
// Called one batch at a time, in arrival order, Start therefore decides
// every recipient's messages in order.
func (p *Pipeline) Start(ctx context.Context, batch []gate.Delivery) (finish func() []error) {
	items, keys := p.parse(batch)
	if p.o.Metrics != nil {
		p.o.Metrics.BatchSize.Observe(float64(len(batch)))
	}
	p.awaitInFlight(ctx, keys)
	if err := p.priors(ctx, items); err != nil {
		return failAll(items, err)
	}
	rules := p.o.Rules.Current()
	if err := p.core.decide(ctx, messagePolicy, rules, items, p.busy); err != nil {
		return failAll(items, messagePolicy.unavailable("audit", "waiting", err))
	}
	reusedTwins(items, p.o.Now())
	p.core.twinBodies(items)
	unadmit := p.core.keepOrder(items)
	queues := heldQueues(items)
	done, turn, forwarded := p.track(keys, queues)
	awaitTurn := func() {
		select {
		case <-turn:
		case <-ctx.Done(): // the forwards fail on ctx at once
		}
	}
	return func() []error {
		defer p.untrack(keys, queues, done)
		// Should commit or forward panic, the next batch still gets its
		// turn once this one's has come, not only at its own deadline.
		defer func() { awaitTurn(); close(forwarded) }()
		p.core.forgetLogged(ctx, unadmit, "admissions taken back stay counted in their windows")
		p.core.commit(ctx, messagePolicy, rules, items)
		p.resolve(ctx, rules, items)
		awaitTurn()
		p.forward(ctx, rules, items)
		return p.verdicts(rules, items)
	}
}

// failAll is a finish that fails every delivery of the batch with err.
func failAll(items []item, err error) func() []error {
	errs := make([]error, len(items))
	for i := range errs {
		errs[i] = err
	}
	return func() []error { return errs }
}

// priors looks the redelivered messages up in the ledger: one decided
// before keeps its outcome (state prior), unless the ledger's use of its id
// was for another scene or recipient: then it is parked as a reused id. A key the audit log refuses for
// good is one it could never have committed: taken as never decided, its
// message is decided, and the commit refuses it again and parks it. Any
// other error fails the lookup, and the batch.
func (p *Pipeline) priors(ctx context.Context, items []item) error {
	var again []string
	for i := range items {
		if it := &items[i]; it.state != twin && it.d.NumDelivered > 1 {
			again = append(again, it.key)
		}
	}
	if len(again) == 0 {
		return nil
	}
	known := make(map[string]gate.Prior, len(again))
	err := isolate(gate.ErrPermanent, again, func(part []string) error {
		m, err := p.o.Audit.Decided(ctx, part)
		for k, v := range m {
			known[k] = v
		}
		return err
	}, func(string, error) {})
	if err != nil {
		return messagePolicy.unavailable("audit", "decided", err)
	}
	for i := range items {
		it := &items[i]
		// Every outcome in the ledger is non-empty.
		pr, ok := known[it.key]
		if !ok || pr.Outcome == "" || it.state == twin {
			continue
		}
		if e := gate.Reuses(pr.Use(), it.msg); e != nil && it.state == toDecide {
			it.reuse(e)
			continue
		}
		if it.state == toDecide {
			p.core.priorBody(it, pr)
		}
		it.takePrior(pr)
	}
	return nil
}

// busy reports whether a batch in flight holds messages in q.
func (p *Pipeline) busy(q gate.Queue) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[q] > 0
}

// awaitInFlight waits until no batch in flight holds any of keys (or ctx
// ends, when the ledger lookup that follows fails anyway).
func (p *Pipeline) awaitInFlight(ctx context.Context, keys []string) {
	var wait []chan struct{}
	p.mu.Lock()
	for _, k := range keys {
		if c, ok := p.inFlight[k]; ok {
			wait = append(wait, c)
		}
	}
	p.mu.Unlock()
	for _, c := range wait {
		select {
		case <-c:
		case <-ctx.Done():
			return
		}
	}
}

// track records a started batch: its keys are in flight until done is
// closed, and so are its holds in queues; it may forward once turn is
// closed, and closes forwarded when it has.
func (p *Pipeline) track(keys []string, queues []gate.Queue) (done, turn, forwarded chan struct{}) {
	done, forwarded = make(chan struct{}), make(chan struct{})
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		p.inFlight[k] = done
	}
	for _, q := range queues {
		p.held[q]++
	}
	turn, p.forwarded = p.forwarded, forwarded
	return done, turn, forwarded
}

func (p *Pipeline) untrack(keys []string, queues []gate.Queue, done chan struct{}) {
	p.mu.Lock()
	for _, k := range keys {
		if p.inFlight[k] == done {
			delete(p.inFlight, k)
		}
	}
	for _, q := range queues {
		if p.held[q]--; p.held[q] <= 0 {
			delete(p.held, q)
		}
	}
	p.mu.Unlock()
	close(done)
}

// verdicts returns the error of every item, and counts the ones decided in
// this batch.
func (p *Pipeline) verdicts(rules *gate.RuleSet, items []item) []error {
	errs := make([]error, len(items))
	for i := range items {
		it := &items[i]
		switch it.state {
		case twin:
			errs[i] = errs[it.twin]
		case committed:
			errs[i] = nil
		default:
			errs[i] = it.err
		}
		if it.state == committed || it.state == invalid {
			p.observe(rules, it)
		}
		if e := it.reusedError(); e != nil {
			p.o.Log.Warn("a message reuses an id first used for another scene or recipient: sent to the dead letter",
				"id", e.ID, "seq", it.d.Seq, "scene", it.msg.Scene, "first_scene", e.First.Scene, "first_at", e.First.At)
		}
	}
	return errs
}

// parseDelivery is gate.ParseDelivery; a test makes it panic.
var parseDelivery = gate.ParseDelivery

// parseOne parses d. A panic while parsing is a bug that this message's
// bytes trigger, and would again on every redelivery: the message is
// invalid, and the others of the batch go on.
func (p *Pipeline) parseOne(d gate.Delivery) (m gate.Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			p.recovered("parse", d.HeaderID, d.Seq, v)
			m, err = gate.Message{}, &gate.InvalidError{Reason: "the gate failed to parse it (a bug, logged with the message's sequence)"}
		}
	}()
	return parseDelivery(d, p.o.MaxMessageBytes)
}

// parse translates the batch into the core's items (to decide, invalid,
// or the twin of an earlier delivery of its key) and returns them with the
// distinct idempotency keys of the batch.
func (p *Pipeline) parse(batch []gate.Delivery) ([]item, []string) {
	items := make([]item, len(batch))
	keys := make([]string, 0, len(batch))
	first := make(map[string]int, len(batch))
	for i, d := range batch {
		it := &items[i]
		it.d = d
		var err error
		it.msg, err = p.parseOne(d)
		switch {
		case err == nil:
			it.key = it.msg.ID
		case gate.CheckName(gate.MsgIDHeader, d.HeaderID, gate.MaxIDBytes) == nil:
			// An invalid message is known by its Nats-Msg-Id, so that a
			// retry GATE_IN stored twice (its de-duplication forgets
			// removed messages when nats-server restarts) counts once;
			// prefixed, so that a corrected message may reuse the id.
			it.key = "invalid:" + d.HeaderID
		default:
			// Without an id, or with one no store could hold, its stream
			// sequence identifies it.
			it.key = seqKey(d.Seq)
		}
		it.err = err
		if j, ok := first[it.key]; ok {
			it.twinOf(j)
			continue
		}
		if err != nil {
			it.to(invalid)
		}
		first[it.key] = i
		keys = append(keys, it.key)
	}
	return items, keys
}
