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
	Settled         *prometheus.CounterVec   // scene (a rule's, or OtherScenes), settled: released|fell_back|digested|moved|rescheduled
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
	// Checks counts synchronous checks (POST /v1/check, gate.check) by
	// decision (forward|suppress|drop|defer|digest, or invalid|error when
	// not answered) and dry_run.
	Checks *prometheus.CounterVec
}

// New registers the gate's collectors, plus the Go and process collectors,
// on reg.
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		Registry: reg,
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_decisions_total", Help: "Messages decided, by scene and outcome (forward, suppress, drop, defer, digest, invalid); shadow marks shadow-mode would-be suppressions. Scenes without a rule share the scene \"" + OtherScenes + "\".",
		}, []string{"scene", "outcome", "shadow"}),
		DecisionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gate_decision_latency_seconds", Help: "Time from a message's receipt by the gate to its effect being durable.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}),
		BatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gate_batch_size", Help: "Messages decided together in one batch.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_store_errors_total", Help: "Failed calls to a dependency, by store (window, audit, nats) and operation.",
		}, []string{"store", "op"}),
		StoreLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gate_store_call_seconds", Help: "Duration of one batch's call to a dependency, by store (window, audit, nats) and operation (admit, decided, commit, forward), failed calls included.",
			Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .02, .03, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"store", "op"}),
		Invalid: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_invalid_messages_total", Help: "Messages that could not be decided, or that the audit store refused, and went to the dead-letter subject; by scene, those without a rule as \"" + OtherScenes + "\".",
		}, []string{"scene"}),
		Unchecked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_unchecked_forwards_total", Help: "Messages forwarded without a window check because the window store was unavailable and the scene fails open (on_store_error: forward).",
		}, []string{"scene"}),
		Settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_held_settled_total", Help: "Held messages settled by the releaser, by scene and what became of them: released (forwarded with Gate-Deferred-From), fell_back (past max_defer, or rejected under a scene that no longer defers), digested (carried by a digest), moved (to the digest queue), rescheduled (still held).",
		}, []string{"scene", "settled"}),
		Digests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_digests_total", Help: "Digests forwarded, each summarising held messages of one recipient.",
		}),
		Recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_recovered_panics_total", Help: "Panics recovered while handling one message, by stage (parse: the message was sent to the dead letter; metrics: its metrics were not recorded; release: a round of releases was rolled back, to be tried again). Each is a bug, logged with the message id.",
		}, []string{"stage"}),
		Redeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_retries_total", Help: "Messages handed back to JetStream for a delayed retry after a transient failure.",
		}),
		Parked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_parked_messages_total", Help: "Messages parked on the dead-letter subject because they exhausted GATE_MAX_DELIVER deliveries.",
		}),
		Panicked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gate_panicked_messages_total", Help: "Messages parked on the dead-letter subject because deciding them made the gate panic; the gate recovered and decided the rest of their batch.",
		}),
		ConsumerPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gate_consumer_pending_messages", Help: "Consumer lag: messages in GATE_IN not yet delivered to the gate consumer.",
		}),
		ConsumerAckPend: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gate_consumer_ack_pending_messages", Help: "Messages delivered to the gate consumer and not yet acknowledged.",
		}),
		RulesReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_rules_reloads_total", Help: "Rule documents loaded and put in force.",
		}, []string{"source"}),
		RulesReloadErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_rules_reload_errors_total", Help: "Rule documents rejected; the last good rules stayed in force.",
		}, []string{"source"}),
		RulesInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gate_rules_info", Help: "The rules in force: 1 for the current version.",
		}, []string{"version", "source"}),
		DependencyUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gate_dependency_up", Help: "1 when the last readiness check of a dependency succeeded.",
		}, []string{"dependency"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gate_http_requests_total", Help: "HTTP requests served, by route and status code.",
		}, []string{"route", "code"}),
	}
	reg.MustRegister(m.Decisions, m.DecisionLatency, m.BatchSize, m.StoreErrors, m.StoreLatency, m.Invalid, m.Unchecked, m.Settled, m.Digests,
		m.Recovered, m.Redeliveries, m.Parked, m.Panicked, m.ConsumerPending, m.ConsumerAckPend, m.RulesReloads, m.RulesReloadErrs,
		m.RulesInfo, m.DependencyUp, m.HTTPRequests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gate_checks_total", Help: "Synchronous checks (POST /v1/check, gate.check), by decision (forward, suppress, drop, defer, digest; invalid for a bad body, error when a store did not answer) and dry_run.",
	}, []string{"decision", "dry_run"})
	reg.MustRegister(m.Checks)
	m.Refunds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gate_refunds_total", Help: "Refund requests (POST /v1/refund, gate.refund), by result: refunded (taken out of its windows), already_refunded (nothing changed), never_decided, not_forwarded and ledger_incomplete (refused), invalid (unreadable body), failed (a store was down; the request is retried).",
	}, []string{"result"})
	reg.MustRegister(m.Refunds)
	return m
}
