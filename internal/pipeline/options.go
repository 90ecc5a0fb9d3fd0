package pipeline

import (
	"errors"
	"log/slog"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// The options and constructors of the four front ends, defaulted the one
// way (defaults, orDefault) and wired the one way: each port wrapped with
// its metrics (instrument), the core built over the wrapped ports
// (newCore).

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
	// MaxMessageBytes bounds an envelope; 0 means gate.DefaultMaxMessageBytes.
	MaxMessageBytes int
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
	// Now is the clock for messages no window store decides (unknown scenes,
	// invalid messages); time.Now by default.
	Now     func() time.Time
	Metrics *metrics.Metrics // optional
	Log     *slog.Logger     // optional
}

// DefaultReplayWithin is half of GATE_OUT's default duplicate window.
const DefaultReplayWithin = time.Hour

// New checks the options and returns a pipeline.
func New(o Options) (*Pipeline, error) {
	if o.Rules == nil || o.Store == nil || o.Audit == nil || o.Forwarder == nil {
		return nil, errors.New("pipeline: rules, store, audit and forwarder are required")
	}
	defaults(&o.Log, &o.Now)
	if o.ReplayWithin <= 0 {
		o.ReplayWithin = DefaultReplayWithin
	}
	if o.Holds == nil {
		o.Log.Warn("no hold store: messages that on_exceed defer or digest, or quiet hours with action defer, would hold are suppressed instead")
	}
	instrument(o.Metrics, &o.Store, &o.Audit, &o.Holds, &o.Preferences, &o.Forwarder)
	done := make(chan struct{})
	close(done)
	return &Pipeline{
		o:        o,
		core:     newCore(o.Store, o.Audit, o.Holds, o.Preferences, o.Forwarder, o.Metrics, o.Log, o.Now),
		inFlight: make(map[string]chan struct{}), forwarded: done, held: make(map[gate.Queue]int),
	}, nil
}

// CheckOptions are a Checker's dependencies: the pipeline's rules, window
// store, audit log and hold store, and the store of check answers. Rules,
// Store, Audit and Answers are required. Answers that implement
// gate.CheckAnswersBatch are looked up and saved a batch at a time.
type CheckOptions struct {
	Rules   gate.RuleSource
	Store   gate.WindowStore
	Audit   gate.AuditLog
	Answers gate.CheckAnswers
	// Now is the clock of quiet hours and of decisions no window store
	// takes; time.Now by default.
	Now func() time.Time
	// Holds, when set, lets a check of a scene that holds messages see the
	// queue it would join: with messages held there already, a message sent
	// now would overtake them, so the check answers defer (or digest) with
	// reason queued, as the pipeline decides such a message.
	Holds gate.HoldStore
	// Preferences, when set, are the recipients' preferences (the cache
	// the pipeline reads): a check of a muted scene is suppressed, one of a
	// digest_only scene answers digest, as a message would be.
	Preferences gate.PreferenceStore
	Metrics     *metrics.Metrics // optional
	Log         *slog.Logger     // optional
}

// NewChecker checks the options and returns a Checker.
func NewChecker(o CheckOptions) (*Checker, error) {
	if o.Rules == nil || o.Store == nil || o.Audit == nil || o.Answers == nil {
		return nil, errors.New("checker: rules, store, audit and answers are required")
	}
	defaults(&o.Log, &o.Now)
	// The answers go with the claims when the audit log keeps them itself.
	kept, ok := o.Audit.(gate.AnswersWithClaims)
	withClaims := ok && any(kept) == any(o.Answers)
	instrument(o.Metrics, &o.Store, &o.Audit, &o.Holds, &o.Preferences, nil)
	o.Answers = instrumentAnswers(o.Metrics, o.Answers)
	return &Checker{o: o, withClaims: withClaims, core: newCore(o.Store, o.Audit, o.Holds, o.Preferences, nil, o.Metrics, o.Log, o.Now)}, nil
}

// Defaults of a Releaser.
const (
	DefaultReleaseInterval = 500 * time.Millisecond
	DefaultReleaseQueues   = 100
	DefaultReleasePerQueue = 100
	DefaultReleaseTimeout  = 10 * time.Second
)

// ReleaserOptions are a Releaser's dependencies. Rules, Store, Holds and
// Forwarder are required.
type ReleaserOptions struct {
	Rules     gate.RuleSource
	Store     gate.WindowStore
	Holds     gate.HoldStore
	Forwarder gate.Forwarder
	Metrics   *metrics.Metrics // optional
	// Interval is how often the hold store is asked for due messages;
	// DefaultReleaseInterval when 0. A round that settled a full page goes
	// on at once.
	Interval time.Duration
	// Queues and PerQueue bound one round: how many queues, and how many
	// messages of each, it settles (DefaultReleaseQueues and
	// DefaultReleasePerQueue when 0).
	Queues, PerQueue int
	// Timeout bounds one round; DefaultReleaseTimeout when 0. A round in
	// hand when Run's context ends is finished within it, not cut short.
	Timeout time.Duration
	Log     *slog.Logger // optional
	// Now is the clock of due times, expiries and quiet hours; time.Now by
	// default.
	Now func() time.Time
}

// NewReleaser checks the options and returns a releaser.
func NewReleaser(o ReleaserOptions) (*Releaser, error) {
	if o.Rules == nil || o.Store == nil || o.Holds == nil || o.Forwarder == nil {
		return nil, errors.New("releaser: rules, store, holds and forwarder are required")
	}
	defaults(&o.Log, &o.Now)
	instrument(o.Metrics, &o.Store, nil, &o.Holds, nil, &o.Forwarder)
	orDefault(&o.Interval, DefaultReleaseInterval)
	orDefault(&o.Queues, DefaultReleaseQueues)
	orDefault(&o.PerQueue, DefaultReleasePerQueue)
	orDefault(&o.Timeout, DefaultReleaseTimeout)
	// The core serves the releaser's plan, admit, resolve and forget
	// stages; held messages wait behind nothing (they are the held ones)
	// and have no preferences applied, as when they were held.
	return &Releaser{o: o, core: newCore(o.Store, nil, nil, nil, o.Forwarder, o.Metrics, o.Log, o.Now)}, nil
}

// RefunderOptions are a Refunder's dependencies. Rules, Store, Ledger and
// Log are required.
type RefunderOptions struct {
	Rules  gate.RuleSource
	Store  gate.WindowStore
	Ledger gate.Ledger
	Log    gate.RefundLog
	// Metrics counts refunds by result (gate_refunds_total); optional.
	Metrics *metrics.Metrics
	// Logger is optional.
	Logger *slog.Logger
	// Now stamps refunded_at; time.Now by default.
	Now func() time.Time
}

// NewRefunder checks the options and returns a Refunder.
func NewRefunder(o RefunderOptions) (*Refunder, error) {
	if o.Rules == nil || o.Store == nil || o.Ledger == nil || o.Log == nil {
		return nil, errors.New("refunder: rules, store, ledger and refund log are required")
	}
	defaults(&o.Logger, &o.Now)
	instrument(o.Metrics, &o.Store, nil, nil, nil, nil)
	// The core serves the refunder's forget stage only.
	return &Refunder{o: o, core: newCore(o.Store, nil, nil, nil, nil, o.Metrics, o.Logger, o.Now)}, nil
}

// CancellerOptions are a Canceller's dependencies. Rules and Holds are
// required.
type CancellerOptions struct {
	Rules gate.RuleSource
	Holds gate.HoldStore
	// Metrics counts cancels (gate_cancels_total) and the messages
	// cancelled (gate_held_settled_total); optional.
	Metrics *metrics.Metrics
	Log     *slog.Logger // optional
	// Now stamps the cancelled messages' settled_at; time.Now by default.
	Now func() time.Time
}

// NewCanceller checks the options and returns a Canceller.
func NewCanceller(o CancellerOptions) (*Canceller, error) {
	if o.Rules == nil || o.Holds == nil {
		return nil, errors.New("canceller: rules and holds are required")
	}
	defaults(&o.Log, &o.Now)
	instrument(o.Metrics, nil, nil, &o.Holds, nil, nil)
	// The core serves the canceller's cancel stage only.
	return &Canceller{o: o, core: newCore(nil, nil, o.Holds, nil, nil, o.Metrics, o.Log, o.Now)}, nil
}

// newCore is the core over the ports of a front end, wrapped already
// (instrument); audit, holds, prefs and out may be nil where the front
// end calls no stage that needs them.
func newCore(store gate.WindowStore, audit gate.AuditLog, holds gate.HoldStore, prefs gate.PreferenceStore,
	out gate.Forwarder, m *metrics.Metrics, log *slog.Logger, now func() time.Time) core {
	return core{store: store, audit: audit, holds: holds, prefs: prefs, out: out, m: m, log: log, now: now}
}

// defaults fills what is unset of log and now: a logger that discards, and
// time.Now.
func defaults(log **slog.Logger, now *func() time.Time) {
	if *log == nil {
		*log = slog.New(slog.DiscardHandler)
	}
	if *now == nil {
		*now = time.Now
	}
}

// orDefault sets *v to d when it is not positive.
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
