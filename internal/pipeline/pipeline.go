package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// Options are the pipeline's dependencies. Rules, Store, Audit and
// Forwarder are required.
type Options struct {
	Rules     gate.RuleSource
	Store     gate.WindowStore
	Audit     gate.AuditLog
	Forwarder gate.Forwarder
	// Holds keeps held messages (on_exceed defer or digest, quiet hours
	// with action defer). Optional: without it, such messages are
	// suppressed instead, and New logs so.
	Holds gate.HoldStore
	// Preferences are the recipients' preferences (muted scenes,
	// digest_only), looked up once per batch; a cache in front of the
	// audit store. Optional: without it no preferences apply.
	Preferences gate.PreferenceStore
	Metrics     *metrics.Metrics // optional
	Log         *slog.Logger     // optional
	// MaxMessageBytes bounds an envelope; 0 means gate.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Now is the clock for messages no window store decides (unknown scenes,
	// invalid messages); time.Now by default.
	Now func() time.Time
	// ReplayWithin bounds the replay of a forward for a first delivery whose
	// id the commit found decided as a forward: within it, the delivery is
	// taken for the same message come back (a nats-server restarted
	// uncleanly can deliver a message again as if for the first time), and
	// the forward is published again; beyond it, for a producer's second
	// publish of the id, which gets no second forward. A redelivered message
	// always gets its committed forward published again. It should be
	// shorter than the outbound stream's duplicate window, which absorbs the
	// copies; 0 means DefaultReplayWithin.
	ReplayWithin time.Duration
}

// DefaultReplayWithin is half of GATE_OUT's default duplicate window.
const DefaultReplayWithin = time.Hour

// Pipeline decides batches of deliveries. It is safe for concurrent use.
type Pipeline struct {
	o Options

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
	// prefsLogged is when a failed preference lookup was last logged.
	prefsLogged time.Time
}

// New checks the options and returns a pipeline.
func New(o Options) (*Pipeline, error) {
	if o.Rules == nil || o.Store == nil || o.Audit == nil || o.Forwarder == nil {
		return nil, errors.New("pipeline: rules, store, audit and forwarder are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReplayWithin <= 0 {
		o.ReplayWithin = DefaultReplayWithin
	}
	if o.Holds == nil {
		o.Log.Warn("no hold store: messages that on_exceed defer or digest, or quiet hours with action defer, would hold are suppressed instead")
	}
	done := make(chan struct{})
	close(done)
	return &Pipeline{o: o, inFlight: make(map[string]chan struct{}), forwarded: done, held: make(map[gate.Queue]int)}, nil
}

// item is one delivery on its way through a batch.
type item struct {
	d        gate.Delivery
	msg      gate.Message
	key      string     // idempotency key
	invalid  error      // *gate.InvalidError when the message cannot be decided
	prior    gate.Prior // what was decided before this batch; zero when nothing was
	counted  bool       // the window store counted it in this batch (not as a duplicate)
	admitted bool       // the window store admitted it in this batch, as a duplicate or not
	twin     int        // index of an earlier delivery of the same id in this batch, or -1
	plan     gate.Plan
	dec      gate.Decision
	decided  bool
	err      error // the verdict handed back to the transport
}

// Start decides batch in two steps, a gate.BatchStarter, so that a
// transport can decide the next batch while this one commits. Start parses the batch,
// looks up the redelivered ids in the ledger and asks the window store about
// the rest; it returns once every decision is made. finish commits, then
// publishes the forwards, after those of every batch started earlier, and
// returns one error per delivery: nil when its outcome is durable (ack), an
// *gate.InvalidError when it can never be decided or the audit store
// refuses its record for good (dead letter), or a transient error wrapping
// gate.ErrUnavailable (retry later). Every step is idempotent on the
// message id, so a retried message is never forwarded, audited or counted
// twice.
//
// Only redelivered messages are looked up before deciding: a first delivery
// was decided before only if its producer published the id again (after
// GATE_IN's own duplicate window), and the commit finds those, since it
// claims every id in the ledger. Such an id keeps its first outcome: what
// this batch decided for it is not forwarded, audited or counted, and is
// taken out of the window again. A forward is published after its commit, so
// a message that comes back after a crash in between finds its forward in the
// ledger and publishes it again; the outbound stream's duplicate window
// absorbs the copy when the first publish did land.
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
// (holdBehind); within the batch, a message never overtakes an earlier one
// held in its queue (keepOrder); and the queues that batches in flight hold
// messages in count as holding, until those batches commit.
//
// Called one batch at a time, in arrival order, Start therefore decides every
// recipient's messages in order.
func (p *Pipeline) Start(ctx context.Context, batch []gate.Delivery) (finish func() []error) {
	items, keys := p.parse(batch)
	if p.o.Metrics != nil {
		p.o.Metrics.BatchSize.Observe(float64(len(batch)))
	}
	p.awaitInFlight(ctx, keys)

	var again []string
	for i := range items {
		if it := &items[i]; it.twin < 0 && it.d.NumDelivered > 1 {
			again = append(again, it.key)
		}
	}
	if len(again) > 0 {
		known, err := p.decided(ctx, again)
		if err != nil {
			errs := p.failAll(items, "audit", "decided", err)
			return func() []error { return errs }
		}
		for i := range items {
			items[i].prior = known[items[i].key]
		}
	}

	rules := p.o.Rules.Current()
	now := p.o.Now()
	p.plan(rules, items, p.preferences(ctx, items), now)
	if err := p.holdBehind(ctx, items, now); err != nil {
		errs := p.failAll(items, "audit", "waiting", err)
		return func() []error { return errs }
	}
	if err := p.decide(ctx, rules, items); err != nil {
		p.storeDown(items, err)
	}
	unadmit := p.keepOrder(items, now)
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
		p.forget(ctx, unadmit)
		p.commit(ctx, rules, items)
		awaitTurn()
		p.forward(ctx, rules, items)
		return p.verdicts(rules, items)
	}
}

// known reports whether the message was decided before this batch: every
// outcome in the ledger is non-empty.
func (it *item) known() bool { return it.prior.Outcome != "" }

// seqKey is the idempotency key of a message known by its stream sequence
// alone.
func seqKey(seq uint64) string { return "seq:" + strconv.FormatUint(seq, 10) }

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

// parse parses every delivery and returns the items and the distinct
// idempotency keys of the batch.
func (p *Pipeline) parse(batch []gate.Delivery) ([]item, []string) {
	items := make([]item, len(batch))
	keys := make([]string, 0, len(batch))
	first := make(map[string]int, len(batch))
	for i, d := range batch {
		it := &items[i]
		it.d, it.twin = d, -1
		it.msg, it.invalid = p.parseOne(d)
		switch {
		case it.invalid == nil:
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
		if j, ok := first[it.key]; ok {
			it.twin = j
			continue
		}
		first[it.key] = i
		keys = append(keys, it.key)
	}
	return items, keys
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

// verdicts returns the error of every item, and counts the decided ones.
func (p *Pipeline) verdicts(rules *gate.RuleSet, items []item) []error {
	errs := make([]error, len(items))
	for i := range items {
		it := &items[i]
		switch {
		case it.err != nil:
		case it.twin >= 0:
			it.err = items[it.twin].err
		case it.invalid != nil:
			it.err = it.invalid
		}
		errs[i] = it.err
		if it.err == nil || gate.IsInvalid(it.err) {
			p.observe(rules, it)
		}
	}
	return errs
}

// undecided reports whether the message is this batch's to decide and not
// decided yet.
func (it *item) undecided() bool {
	return it.invalid == nil && it.twin < 0 && !it.known() && !it.decided
}

// decide asks the window store about every message that needs it, in one
// call, and resolves each outcome. When the store fails, the messages that
// need no window (unknown scenes) are still decided: they must not wait for
// a store they never use. Should the store refuse the call for a request it
// can never decide (gate.ErrInvalidRequest, which records nothing), halves
// of it are asked in turn, and the messages of the requests refused on
// their own are invalid: retried, they would hold back their batch forever.
func (p *Pipeline) decide(ctx context.Context, rules *gate.RuleSet, items []item) error {
	var asks []admission
	for i := range items {
		if it := &items[i]; it.undecided() && it.plan.Request != nil {
			asks = append(asks, admission{*it.plan.Request, i})
		}
	}
	results := make([]gate.AdmitResult, len(items))
	answered := make([]bool, len(items))
	storeErr := isolate(p, "window", "admit", gate.ErrInvalidRequest, asks, func(part []admission) error {
		reqs := make([]gate.AdmitRequest, len(part))
		for k, a := range part {
			reqs[k] = a.req
		}
		res, err := admit(ctx, p.o.Store, reqs)
		if err != nil {
			return err
		}
		for k, a := range part {
			results[a.i], answered[a.i] = res[k], true
			items[a.i].counted = res[k].Admitted && !res[k].Duplicate
			items[a.i].admitted = res[k].Admitted
		}
		return nil
	}, func(a admission, why error) {
		items[a.i].invalid = refusedBy("window", why)
	})
	now := p.o.Now()
	for i := range items {
		it := &items[i]
		if !it.undecided() || (it.plan.Request != nil && !answered[i]) {
			continue
		}
		it.dec = gate.Resolve(rules, it.plan, results[i], now)
		it.decided = true
	}
	return storeErr
}

// admission is a request to the window store, with the index of the item
// it is for.
type admission struct {
	req gate.AdmitRequest
	i   int
}

// storeDown handles a window store that could not answer: messages of
// scenes that fail open are forwarded unchecked; every other message waits
// for a retry.
func (p *Pipeline) storeDown(items []item, err error) {
	err = p.transient("window", "admit", err)
	now := p.o.Now()
	for i := range items {
		it := &items[i]
		if !it.undecided() {
			continue
		}
		if d, ok := gate.FailOpen(it.plan, now); ok {
			it.dec, it.decided = d, true
			continue
		}
		it.err = err
	}
}

// forward publishes every message whose committed outcome is a forward and
// waits for the stream to store them: those this batch decided, and those
// decided before whose publish may have been lost in a crash between commit
// and publish: every redelivered one, and a first delivery decided within
// ReplayWithin. A forward is lost only if it is never published; one
// published twice more than GATE_OUT's duplicate window apart (all gates down
// that long) reaches downstream twice.
func (p *Pipeline) forward(ctx context.Context, rules *gate.RuleSet, items []item) {
	var fs []gate.Forward
	var idx []int
	replayAfter := p.o.Now().Add(-p.o.ReplayWithin)
	for i := range items {
		it := &items[i]
		f := gate.Forward{MessageID: it.msg.ID, Scene: it.msg.Scene, RulesVersion: rules.Version, Data: it.msg.Raw}
		switch {
		case it.err != nil || it.twin >= 0 || it.invalid != nil:
			continue
		case it.known():
			// A replay: the ledger keeps the outcome, not how it was reached.
			if it.prior.Outcome != gate.OutcomeForward || (it.d.NumDelivered <= 1 && it.prior.At.Before(replayAfter)) {
				continue
			}
		case it.decided && it.dec.Outcome == gate.OutcomeForward:
			f.Bypass, f.Unchecked = it.dec.Bypass, it.dec.Unchecked
			if it.dec.Shadow {
				f.ShadowOf = it.dec.ShadowOf
			}
		default:
			continue
		}
		fs = append(fs, f)
		idx = append(idx, i)
	}
	if len(fs) == 0 {
		return
	}
	done := p.timer("nats", "forward")
	errs := p.o.Forwarder.Forward(ctx, fs)
	done()
	for k, err := range errs {
		if err != nil {
			items[idx[k]].err = p.transient("nats", "forward", err)
		}
	}
}

// transient counts a failed call to a dependency and returns its error,
// wrapping gate.ErrUnavailable: the message is retried.
func (p *Pipeline) transient(store, op string, err error) error {
	p.failedCall(store, op)
	if !errors.Is(err, gate.ErrUnavailable) {
		err = fmt.Errorf("%s %s: %w: %w", store, op, gate.ErrUnavailable, err)
	}
	return err
}

func (p *Pipeline) failAll(items []item, store, op string, err error) []error {
	err = p.transient(store, op, err)
	errs := make([]error, len(items))
	for i := range errs {
		errs[i] = err
	}
	return errs
}
