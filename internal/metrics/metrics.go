// Package metrics holds the gate's Prometheus collectors, all named gate_*.
// Components take a *Metrics (nil-safe helpers are not provided: pass
// metrics.New(prometheus.NewRegistry()) in tests). It imports only the
// Prometheus client and the standard library.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// OtherScenes is the scene label of every message whose scene has no rule
// in the rules in force (scenes decided by unknown_scene, invalid messages
// of such scenes): a producer chooses its scenes, and one inventing
// thousands must not make thousands of series. It holds a space, which no
// rule's scene name may, so it never stands for one scene.
const OtherScenes = "(no rule)"

// Metrics are the gate's collectors.
type Metrics struct {
	Registry *prometheus.Registry

	Decisions       *prometheus.CounterVec   // scene (a rule's, or OtherScenes), outcome, shadow
	DecisionLatency prometheus.Histogram     // seconds, from receipt to effect durable
	BatchSize       prometheus.Histogram     // messages per decided batch
	StoreErrors     *prometheus.CounterVec   // store: window|audit|nats, op
	StoreLatency    *prometheus.HistogramVec // store: window|audit|nats, op; seconds per call
	Invalid         *prometheus.CounterVec   // scene (a rule's, or OtherScenes)
	Unchecked       *prometheus.CounterVec   // scene (a rule's, or OtherScenes): forwarded without a window check (fail open)
	Settled         *prometheus.CounterVec   // scene (a rule's, or OtherScenes), settled: released|fell_back|digested|moved|rescheduled|cancelled
	Digests         prometheus.Counter       // digests forwarded
	Recovered       *prometheus.CounterVec   // stage: parse|metrics|release; panics recovered while handling one message (or one round of releases)
	Redeliveries    prometheus.Counter       // messages retried after a transient failure
	Parked          prometheus.Counter       // messages parked on the dead letter after exhausting MaxDeliver
	Panicked        prometheus.Counter       // messages parked on the dead letter because the gate panicked on them
	ConsumerPending prometheus.Gauge         // messages in GATE_IN not yet delivered to the consumer
	ConsumerAckPend prometheus.Gauge         // delivered, not yet acked
	RulesReloads    *prometheus.CounterVec   // source
	RulesReloadErrs *prometheus.CounterVec   // source
	RulesInfo       *prometheus.GaugeVec     // version, source = 1
	DependencyUp    *prometheus.GaugeVec     // dependency
	HTTPRequests    *prometheus.CounterVec   // route, code
	// Refunds counts refund requests (POST /v1/refund, gate.refund) by
	// result: refunded|already_refunded|never_decided|not_forwarded|
	// ledger_incomplete|invalid|failed.
	Refunds *prometheus.CounterVec
	// Cancels counts cancels of held messages by source (api|nats|
	// resolves) and result: cancelled|none|invalid|failed.
	Cancels *prometheus.CounterVec
	// Checks counts synchronous checks (POST /v1/check, gate.check) by
	// decision (forward|suppress|drop|defer|digest, or invalid|reused|error
	// when not answered) and dry_run.
	Checks *prometheus.CounterVec
	// ReusedIDs counts ids used again for another scene or recipient than
	// their first use, by source: message (parked on the dead letter) or
	// check (answered 409).
	ReusedIDs *prometheus.CounterVec
	// CheckRepliesRefused counts gate.check requests refused for their
	// reply subject (the gate's own, JetStream's, a refused one).
	CheckRepliesRefused prometheus.Counter
	// StreamFull counts publishes a stream refused for want of room (its
	// MaxBytes, or the account's or server's storage), by stream: each was
	// retried, never dropped.
	StreamFull *prometheus.CounterVec
	// DuplicateBodyMismatch counts messages whose id the gate had decided
	// before for another body: the later one took the first's outcome.
	DuplicateBodyMismatch prometheus.Counter
	// OutboxLeft is how many forwards of settled held messages this gate's
	// last release round left in the outbox unpublished.
	OutboxLeft prometheus.Gauge
}

// New registers the gate's collectors, plus the Go and process collectors,
// on reg.
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		Registry:        reg,
		Decisions:       counterVec("gate_decisions_total", "Messages decided, by scene and outcome (forward, suppress, drop, defer, digest, invalid); shadow marks shadow-mode would-be suppressions. Scenes without a rule share the scene \""+OtherScenes+"\".", "scene", "outcome", "shadow"),
		DecisionLatency: histogram("gate_decision_latency_seconds", "Time from a message's receipt by the gate to its effect being durable.", []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}),
		BatchSize:       histogram("gate_batch_size", "Messages decided together in one batch.", []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}),
		StoreErrors:     counterVec("gate_store_errors_total", "Failed calls to a dependency, by store (window, audit, nats) and operation.", "store", "op"),
		StoreLatency:    histogramVec("gate_store_call_seconds", "Duration of one batch's call to a dependency, by store (window, audit, nats) and operation (admit, decided, commit, forward), failed calls included.", []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .02, .03, .05, .1, .2, .5, 1, 2, 5}, "store", "op"),
		Invalid:         counterVec("gate_invalid_messages_total", "Messages that could not be decided, or that the audit store refused, and went to the dead-letter subject; by scene, those without a rule as \""+OtherScenes+"\".", "scene"),
		Unchecked:       counterVec("gate_unchecked_forwards_total", "Messages forwarded without a window check because the window store was unavailable and the scene fails open (on_store_error: forward).", "scene"),
		Settled:         counterVec("gate_held_settled_total", "Held messages settled by the releaser, by scene and what became of them: released (forwarded with Gate-Deferred-From), fell_back (past max_defer, or rejected under a scene that no longer defers), digested (carried by a digest), moved (to the digest queue), rescheduled (still held), cancelled (taken back by a cancel of its cancel_key).", "scene", "settled"),
		Digests:         counter("gate_digests_total", "Digests forwarded, each summarising held messages of one recipient."),
		Recovered:       counterVec("gate_recovered_panics_total", "Panics recovered while handling one message, by stage (parse: the message was sent to the dead letter; metrics: its metrics were not recorded; release: a round of releases was rolled back, to be tried again). Each is a bug, logged with the message id.", "stage"),
		Redeliveries:    counter("gate_retries_total", "Messages handed back to JetStream for a delayed retry after a transient failure."),
		Parked:          counter("gate_parked_messages_total", "Messages parked on the dead-letter subject because they exhausted GATE_MAX_DELIVER deliveries."),
		Panicked:        counter("gate_panicked_messages_total", "Messages parked on the dead-letter subject because deciding them made the gate panic; the gate recovered and decided the rest of their batch."),
		ConsumerPending: gauge("gate_consumer_pending_messages", "Consumer lag: messages in GATE_IN not yet delivered to the gate consumer."),
		ConsumerAckPend: gauge("gate_consumer_ack_pending_messages", "Messages delivered to the gate consumer and not yet acknowledged."),
		RulesReloads:    counterVec("gate_rules_reloads_total", "Rule documents loaded and put in force.", "source"),
		RulesReloadErrs: counterVec("gate_rules_reload_errors_total", "Rule documents rejected; the last good rules stayed in force.", "source"),
		RulesInfo:       gaugeVec("gate_rules_info", "The rules in force: 1 for the current version.", "version", "source"),
		DependencyUp:    gaugeVec("gate_dependency_up", "1 when the last readiness check of a dependency succeeded.", "dependency"),
		HTTPRequests:    counterVec("gate_http_requests_total", "HTTP requests served, by route and status code.", "route", "code"),
	}
	reg.MustRegister(m.Decisions, m.DecisionLatency, m.BatchSize, m.StoreErrors, m.StoreLatency, m.Invalid, m.Unchecked, m.Settled, m.Digests,
		m.Recovered, m.Redeliveries, m.Parked, m.Panicked, m.ConsumerPending, m.ConsumerAckPend, m.RulesReloads, m.RulesReloadErrs,
		m.RulesInfo, m.DependencyUp, m.HTTPRequests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Checks = counterVec("gate_checks_total", "Synchronous checks (POST /v1/check, gate.check), by decision (forward, suppress, drop, defer, digest; invalid for a bad body, reused for an id first used for another scene or recipient, error when a store did not answer) and dry_run.", "decision", "dry_run")
	reg.MustRegister(m.Checks)
	m.Refunds = counterVec("gate_refunds_total", "Refund requests (POST /v1/refund, gate.refund), by result: refunded (taken out of its windows), already_refunded (nothing changed), never_decided, not_forwarded and ledger_incomplete (refused), invalid (unreadable body), failed (a store was down; the request is retried).", "result")
	reg.MustRegister(m.Refunds)
	m.Cancels = counterVec("gate_cancels_total", "Cancels of held messages by their cancel_key, by source (api: POST /v1/cancel; nats: gate.cancel; resolves: a message's resolves field) and result: cancelled (took back at least one held message), none (matched none), invalid (unreadable request), failed (the audit store did not answer; asked again, or the message retried).", "source", "result")
	reg.MustRegister(m.Cancels)
	m.ReusedIDs = counterVec("gate_reused_ids_total", "Ids used again for another scene or recipient than their first use, by source: message (sent to the dead letter with a Gate-Error naming the first use, counted invalid) or check (answered 409).", "source")
	reg.MustRegister(m.ReusedIDs)
	m.CheckRepliesRefused = counter("gate_check_replies_refused_total", "gate.check requests neither decided nor answered because their reply subject is one the gate must not publish to: its own subjects and what its streams capture, any subject starting with $, GATE_CHECK_REFUSED_REPLIES.")
	reg.MustRegister(m.CheckRepliesRefused)
	m.StreamFull = counterVec("gate_stream_full_total", "Publishes by the gate that a stream refused for want of room (its GATE_STREAM_MAX_BYTES, or the NATS account's or server's storage), by stream (GATE_OUT: a forward; GATE_DEAD: a dead letter). Nothing is dropped: the message is retried until the stream has room.", "stream")
	reg.MustRegister(m.StreamFull)
	m.DuplicateBodyMismatch = counter("gate_duplicate_body_mismatch_total", "Messages on gate.in whose id the gate had already decided for a different body (same scene and recipient): the later message took the first's outcome and was not forwarded. A producer reusing an id for new content, or one publishing another's id.")
	reg.MustRegister(m.DuplicateBodyMismatch)
	m.OutboxLeft = gauge("gate_release_outbox_left", "Forwards of held messages settled released or digested that this gate's last release round left in the outbox (released_forwards) unpublished, at most a page (500): 0 but while publishing to gate.out fails. The next round of any gate publishes them, in order.")
	reg.MustRegister(m.OutboxLeft)
	return m
}

// The constructors New builds every collector with: one line a metric, so
// the name, help and labels read together.
func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}
