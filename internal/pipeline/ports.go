package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// The ports are wrapped at wiring time (New, NewChecker, NewReleaser,
// NewRefunder), in the way of watermill's middleware: every call is timed
// (gate_store_latency_seconds{store,op}) and every failed one counted
// (gate_store_errors_total{store,op}) on the way in and out, so that the
// stages call the ports plainly. store is the label of the dependency:
// "window" (the window store), "audit" (the audit log, hold store,
// preferences and check answers, all in the audit database) or "nats" (the
// forwarder). Forget is counted, not timed, as it always was.

// observed times one call of m's store and op and counts it failed when
// err is not nil.
func observed(m *metrics.Metrics, store, op string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.StoreLatency.WithLabelValues(store, op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.StoreErrors.WithLabelValues(store, op).Inc()
	}
}

// timed calls f as a call of store's op, observed on m.
func timed[T any](m *metrics.Metrics, store, op string, f func() (T, error)) (T, error) {
	start := time.Now()
	v, err := f()
	observed(m, store, op, start, err)
	return v, err
}

// countFailure counts a failure of store's op on m, which may be nil, that
// is no port's call failing (a wait that ended, a row missing).
func countFailure(m *metrics.Metrics, store, op string) {
	if m != nil {
		m.StoreErrors.WithLabelValues(store, op).Inc()
	}
}

func (c *core) failedCall(store, op string) { countFailure(c.m, store, op) }

// windowPort is a gate.WindowStore, observed. An Admit that does not answer
// one result per request is a failure like any other, retried: the core
// reads the results by index.
type windowPort struct {
	gate.WindowStore
	m *metrics.Metrics
}

func (w windowPort) Admit(ctx context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	start := time.Now()
	res, err := w.WindowStore.Admit(ctx, reqs)
	if err == nil && len(res) != len(reqs) {
		err = fmt.Errorf("admit: %w: store answered %d of %d requests", gate.ErrUnavailable, len(res), len(reqs))
	}
	observed(w.m, "window", "admit", start, err)
	return res, err
}

func (w windowPort) Forget(ctx context.Context, reqs []gate.AdmitRequest) error {
	err := w.WindowStore.Forget(ctx, reqs)
	if err != nil {
		countFailure(w.m, "window", "forget")
	}
	return err
}

// auditPort is a gate.AuditLog, observed.
type auditPort struct {
	gate.AuditLog
	m *metrics.Metrics
}

func (a auditPort) Decided(ctx context.Context, keys []string) (map[string]gate.Prior, error) {
	return timed(a.m, "audit", "decided", func() (map[string]gate.Prior, error) { return a.AuditLog.Decided(ctx, keys) })
}

func (a auditPort) Commit(ctx context.Context, recs []gate.Record) ([]string, error) {
	return timed(a.m, "audit", "commit", func() ([]string, error) { return a.AuditLog.Commit(ctx, recs) })
}

// holdPort is a gate.HoldStore, observed. A failed Settle is counted only
// when the store failed it, not the settle callback (which counts its own).
type holdPort struct {
	gate.HoldStore
	m *metrics.Metrics
}

func (h holdPort) Waiting(ctx context.Context, queues []gate.Queue) (map[gate.Queue]bool, error) {
	return timed(h.m, "audit", "waiting", func() (map[gate.Queue]bool, error) { return h.HoldStore.Waiting(ctx, queues) })
}

func (h holdPort) Settle(ctx context.Context, now time.Time, maxQueues, perQueue int,
	settle func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error)) (int, error) {
	start := time.Now()
	var inner error
	n, err := h.HoldStore.Settle(ctx, now, maxQueues, perQueue, func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		out, err := settle(ctx, due)
		inner = err
		return out, err
	})
	if inner != nil {
		observed(h.m, "audit", "settle", start, nil)
	} else {
		observed(h.m, "audit", "settle", start, err)
	}
	return n, err
}

func (h holdPort) Cancel(ctx context.Context, req gate.CancelRequest, now time.Time) ([]gate.Settlement, error) {
	return timed(h.m, "audit", "cancel", func() ([]gate.Settlement, error) { return h.HoldStore.Cancel(ctx, req, now) })
}

func (h holdPort) Outbox(ctx context.Context, limit int) ([]gate.Forward, error) {
	return timed(h.m, "audit", "outbox", func() ([]gate.Forward, error) { return h.HoldStore.Outbox(ctx, limit) })
}

func (h holdPort) Sent(ctx context.Context, ids []string) error {
	_, err := timed(h.m, "audit", "sent", func() (struct{}, error) { return struct{}{}, h.HoldStore.Sent(ctx, ids) })
	return err
}

// prefPort is a gate.PreferenceStore whose lookups are observed.
type prefPort struct {
	gate.PreferenceStore
	m *metrics.Metrics
}

func (p prefPort) Preferences(ctx context.Context, recipients []string) (map[string]gate.Preferences, error) {
	return timed(p.m, "audit", "preferences", func() (map[string]gate.Preferences, error) {
		return p.PreferenceStore.Preferences(ctx, recipients)
	})
}

// forwardPort is a gate.Forwarder, observed: a call counts failed when any
// of its forwards did.
type forwardPort struct {
	gate.Forwarder
	m *metrics.Metrics
}

func (f forwardPort) Forward(ctx context.Context, fs []gate.Forward) []error {
	start := time.Now()
	errs := f.Forwarder.Forward(ctx, fs)
	var failed error
	for _, err := range errs {
		if err != nil {
			failed = err
			break
		}
	}
	observed(f.m, "nats", "forward", start, failed)
	return errs
}

// answerPort is a gate.CheckAnswers, observed.
type answerPort struct {
	gate.CheckAnswers
	m *metrics.Metrics
}

func (a answerPort) Answer(ctx context.Context, id string) (gate.CheckAnswer, bool, gate.Prior, error) {
	start := time.Now()
	ans, found, pr, err := a.CheckAnswers.Answer(ctx, id)
	observed(a.m, "audit", "check_answer", start, err)
	return ans, found, pr, err
}

func (a answerPort) Save(ctx context.Context, id string, ans gate.CheckAnswer) error {
	_, err := timed(a.m, "audit", "save_check", func() (struct{}, error) { return struct{}{}, a.CheckAnswers.Save(ctx, id, ans) })
	return err
}

// answerBatchPort is a gate.CheckAnswersBatch, observed.
type answerBatchPort struct {
	answerPort
	b gate.CheckAnswersBatch
}

func (a answerBatchPort) Answers(ctx context.Context, ids []string) (map[string]gate.StoredAnswer, error) {
	return timed(a.m, "audit", "check_answer", func() (map[string]gate.StoredAnswer, error) { return a.b.Answers(ctx, ids) })
}

func (a answerBatchPort) SaveAll(ctx context.Context, answers map[string]gate.CheckAnswer) error {
	_, err := timed(a.m, "audit", "save_check", func() (struct{}, error) { return struct{}{}, a.b.SaveAll(ctx, answers) })
	return err
}

// instrument wraps each port that is set. The window store is always
// wrapped, for the check of its answers.
func instrument(m *metrics.Metrics, store *gate.WindowStore, audit *gate.AuditLog, holds *gate.HoldStore, prefs *gate.PreferenceStore, fwd *gate.Forwarder) {
	if store != nil && *store != nil {
		*store = windowPort{*store, m}
	}
	if m == nil {
		return
	}
	if audit != nil && *audit != nil {
		*audit = auditPort{*audit, m}
	}
	if holds != nil && *holds != nil {
		*holds = holdPort{*holds, m}
	}
	if prefs != nil && *prefs != nil {
		*prefs = prefPort{*prefs, m}
	}
	if fwd != nil && *fwd != nil {
		*fwd = forwardPort{*fwd, m}
	}
}

// instrumentAnswers wraps a store of check answers, keeping its batch
// calls when it has them.
func instrumentAnswers(m *metrics.Metrics, a gate.CheckAnswers) gate.CheckAnswers {
	if m == nil {
		return a
	}
	p := answerPort{a, m}
	if b, ok := a.(gate.CheckAnswersBatch); ok {
		return answerBatchPort{p, b}
	}
	return p
}
