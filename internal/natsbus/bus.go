package natsbus

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/ratelog"
)

// Stream and consumer names are part of the public contract.
const (
	StreamIn     = "GATE_IN"
	StreamOut    = "GATE_OUT"
	StreamDead   = "GATE_DEAD"
	ConsumerName = "gate"
)

// Header names the gate sets on messages it publishes. HeaderScene is the
// header a producer names a message's scene with too (gate.SceneHeader):
// one name, read and written.
const (
	HeaderScene        = gate.SceneHeader
	HeaderDecision     = "Gate-Decision"
	HeaderRulesVersion = "Gate-Rules-Version"
	HeaderShadow       = "Gate-Shadow"
	HeaderBypass       = "Gate-Bypass"
	HeaderUnchecked    = "Gate-Unchecked"
	HeaderError        = "Gate-Error"
	// HeaderStream is set on a dead letter: the stream its message came
	// from (StreamIn, StreamRefund); HeaderStreamSeq is its place there.
	HeaderStream    = "Gate-Stream"
	HeaderStreamSeq = "Gate-Stream-Seq"
	// HeaderTruncated is set on a dead letter cut to fit NATS's max
	// payload: the original size in bytes.
	HeaderTruncated = "Gate-Truncated"
)

// Options configure the bus. Zero values take the defaults shown.
type Options struct {
	InSubject   string // "gate.in"
	OutSubject  string // "gate.out"
	DeadSubject string // "gate.dead"
	// CheckSubject is where ServeChecks answers core NATS requests
	// ("gate.check"); no stream may capture it.
	CheckSubject string
	// RefundSubject is the subject GATE_REFUND captures ("gate.refund").
	RefundSubject string
	// CancelSubject is where ServeCancels answers core NATS requests
	// ("gate.cancel"); no stream may capture it.
	CancelSubject string

	// InMaxAge bounds how long an undecided message waits in GATE_IN (7d).
	InMaxAge time.Duration
	// OutMaxAge bounds how long forwarded messages stay readable (72h).
	OutMaxAge time.Duration
	// OutDuplicates is GATE_OUT's duplicate window (2h), set on an
	// existing GATE_OUT too. It must be longer than the longest span
	// between a message's first forward and its ack, and than
	// pipeline.Options.ReplayWithin. Each id it tracks costs nats-server
	// about 240 bytes and makes every forward a little dearer.
	OutDuplicates time.Duration
	// Replicas is how many copies a JetStream cluster keeps of each of the
	// gate's streams (1 to MaxReplicas); their consumers follow their
	// stream. Set, New scales an existing stream with another count to it.
	// 0 leaves existing streams' replicas alone (a gate that sets none
	// never scales down a stream someone made R3) and creates new ones
	// with 1.
	Replicas int
	// StartWait bounds how long New waits while a JetStream cluster elects
	// its leaders (DefaultStartWait).
	StartWait time.Duration
	// DeadMaxAge bounds how long dead letters are kept (30d).
	DeadMaxAge time.Duration
	// RefundMaxAge bounds how long an unhandled refund waits in
	// GATE_REFUND (7d).
	RefundMaxAge time.Duration
	// MaxMsgBytes is the largest message GATE_IN accepts; the gate's own
	// size limit should be below it so oversize messages get a reason (1 MiB).
	MaxMsgBytes int32

	// AckWait is how long a delivered message waits for its gate's answer
	// before JetStream hands it to another (5s): the stall after a gate
	// dies. A slow batch keeps its messages longer with heartbeats (see
	// ConsumeOptions.HandleTimeout), so it need not exceed the worst
	// decision time, only the longest a heartbeat may be late (a loaded
	// machine, a GC pause) and the time messages wait in the pull buffer
	// before their batch starts.
	AckWait       time.Duration
	MaxAckPending int // 1000
	// MaxDeliver bounds the deliveries of one message; one that exhausts
	// them is parked on the dead letter by ParkExhausted. 0 or -1 means
	// unlimited: a message is retried for as long as its dependencies are
	// down.
	MaxDeliver int

	// MaxBytes are byte limits of the gate's streams, by name (ParseMaxBytes,
	// GATE_STREAM_MAX_BYTES); a stream it does not name takes its default
	// (DefaultInMaxBytes and the like). Each limit comes with discard policy
	// new: a full stream refuses a publish, in its ack (a producer's, or the
	// gate's, which retries), and drops nothing. New gives an existing
	// stream its limit too (see reconcile).
	MaxBytes map[string]int64
	// Metrics, when set, counts publishes a full stream refused
	// (gate_stream_full_total).
	Metrics *metrics.Metrics
}

func (o *Options) setDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defd := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.InSubject, DefaultInSubject)
	def(&o.OutSubject, DefaultOutSubject)
	def(&o.DeadSubject, DefaultDeadSubject)
	def(&o.CheckSubject, DefaultCheckSubject)
	def(&o.RefundSubject, DefaultRefundSubject)
	def(&o.CancelSubject, DefaultCancelSubject)
	defd(&o.InMaxAge, 7*24*time.Hour)
	defd(&o.OutMaxAge, 72*time.Hour)
	defd(&o.OutDuplicates, DefaultOutDuplicates)
	defd(&o.DeadMaxAge, 30*24*time.Hour)
	defd(&o.RefundMaxAge, 7*24*time.Hour)
	defd(&o.AckWait, DefaultAckWait)
	defd(&o.StartWait, DefaultStartWait)
	if o.MaxMsgBytes <= 0 {
		o.MaxMsgBytes = 1 << 20
	}
	if o.MaxAckPending <= 0 {
		o.MaxAckPending = DefaultMaxAckPending
	}
	if o.MaxDeliver <= 0 {
		o.MaxDeliver = -1
	}
}

// checkMaxBytes refuses a byte limit that names no stream of the gate's,
// is below MinMaxBytes, or would not hold one message of GATE_IN or
// GATE_REFUND (MaxMsgBytes).
func (o *Options) checkMaxBytes() error {
	for name, n := range o.MaxBytes {
		switch {
		case !slices.Contains(streamNames, name):
			return fmt.Errorf("byte limit of %q: the gate has no such stream (%v)", name, streamNames)
		case n < MinMaxBytes:
			return fmt.Errorf("byte limit of %s must be at least %d, got %d", name, MinMaxBytes, n)
		case (name == StreamIn || name == StreamRefund) && n < int64(o.MaxMsgBytes):
			return fmt.Errorf("byte limit of %s (%d) is below its largest message (%d): it could never take one", name, n, o.MaxMsgBytes)
		}
	}
	return nil
}

// Bus is a JetStream connection with the gate's streams in place.
type Bus struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	opts Options
	log  *slog.Logger

	// fullOut and fullDead are the runs of publishes refused by a full
	// GATE_OUT and GATE_DEAD, the streams the gate publishes to, for one log
	// line a minute (full).
	fullOut, fullDead ratelog.Run
}

// Connect dials url, one NATS server or a comma-separated list of a
// cluster's, with reconnects that never give up, across every server of the
// list and those the cluster announces, so a NATS outage or a lost node
// pauses the gate instead of ending it. extra add to the options
// (credentials: EmbeddedGate). The logs name the server (its name and
// address), never the URL, which may carry credentials.
func Connect(url, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(500 * time.Millisecond),
		// Spread the gates' reconnects over a second when a node goes, so
		// they do not all land on the next one at once.
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "server", c.ConnectedServerName(), "addr", c.ConnectedAddr())
		}),
		// A permissions violation (a NATS server whose user for the gate
		// may not do all it needs) would otherwise go unsaid.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Warn("nats error", "err", err) }),
	}, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	log.Info("nats connected", "server", nc.ConnectedServerName(), "addr", nc.ConnectedAddr(), "cluster", nc.ConnectedClusterName())
	return nc, nil
}

// New creates the streams that are missing (GATE_IN, GATE_OUT, GATE_DEAD
// and GATE_REFUND), each with its byte limit (Options.MaxBytes). Streams
// that exist keep the operator's settings (age limits; replicas unless
// Options.Replicas is set), except that a missing subject is an error,
// GATE_OUT takes Options.OutDuplicates, and each takes the byte limit and
// discard policy reconcile gives it. On a
// JetStream cluster that is still electing its leaders it waits, up to
// Options.StartWait.
func New(ctx context.Context, nc *nats.Conn, opts Options, log *slog.Logger) (*Bus, error) {
	opts.setDefaults()
	if opts.Replicas < 0 || opts.Replicas > MaxReplicas {
		return nil, fmt.Errorf("stream replicas must be from 1 to %d (0: leave them), got %d", MaxReplicas, opts.Replicas)
	}
	if err := opts.checkMaxBytes(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	b := &Bus{nc: nc, js: js, opts: opts, log: log}
	for _, cfg := range b.streams() {
		err := b.waitCluster(ctx, "stream "+cfg.Name, func(ctx context.Context) error {
			if err := b.ensureStream(ctx, cfg); err != nil {
				return err
			}
			return b.reconcile(ctx, cfg)
		})
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// ensureStream creates the stream cfg when it is missing.
func (b *Bus) ensureStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	created, err := b.createMissing(ctx, cfg)
	if created {
		b.log.Info("created stream", "stream", cfg.Name, "subjects", cfg.Subjects)
	}
	return err
}

// JetStream exposes the JetStream context, for tools and tests.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Options returns the options in force, defaults applied.
func (b *Bus) Options() Options { return b.opts }

// Ping checks that the connection is up and JetStream answers.
func (b *Bus) Ping(ctx context.Context) error {
	if st := b.nc.Status(); st != nats.CONNECTED {
		return fmt.Errorf("nats connection is %s", st)
	}
	if _, err := b.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}
