package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
	"unicode/utf8"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// observe counts a message decided (or found invalid) in this batch. A
// panic while recording it (a bug: Prometheus panics on a label value it
// cannot take) is recovered: a message's metrics are not worth the process.
func (p *Pipeline) observe(rules *gate.RuleSet, it *item) {
	m := p.o.Metrics
	if m == nil || it.known() || it.twin >= 0 {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			p.recovered("metrics", it.key, it.d.Seq, v)
		}
	}()
	scene := sceneLabel(rules, it.msg.Scene)
	outcome, shadow := gate.OutcomeInvalid, "false"
	if it.invalid == nil {
		outcome = it.dec.Outcome
		if it.dec.Shadow {
			shadow = "true"
		}
		if it.dec.Unchecked {
			m.Unchecked.WithLabelValues(scene).Inc()
		}
	} else {
		m.Invalid.WithLabelValues(scene).Inc()
	}
	m.Decisions.WithLabelValues(scene, string(outcome), shadow).Inc()
	m.DecisionLatency.Observe(time.Since(it.d.ReceivedAt).Seconds())
}

// sceneLabel is the metric label of scene: itself when the rules in force
// have a rule for it, else metrics.OtherScenes. A producer names its
// scenes, so only the operator's rules may add series; a rule's name is
// valid UTF-8 once loaded, and checked here again because Prometheus panics
// on a label that is not.
func sceneLabel(rules *gate.RuleSet, scene string) string {
	if rules != nil {
		if _, ok := rules.Scenes[scene]; ok && utf8.ValidString(scene) {
			return scene
		}
	}
	return metrics.OtherScenes
}

// recovered logs and counts a panic recovered while handling one message
// at stage. It is a bug that the message named may trigger again, hence its
// id (as received; the log handler quotes what is not text) and sequence,
// and the stack.
func (p *Pipeline) recovered(stage, id string, seq uint64, v any) {
	recovered(p.o.Log, p.o.Metrics, stage, "recovered from a panic while handling a message", v, "id", id, "seq", seq)
}

// timer starts timing one call to a dependency; calling what it returns
// records the call's duration.
func (p *Pipeline) timer(store, op string) (done func()) { return startTimer(p.o.Metrics, store, op) }

// failedCall counts a call to a dependency that failed, transiently or not.
func (p *Pipeline) failedCall(store, op string) { countFailure(p.o.Metrics, store, op) }

// admit asks store about reqs, in one call. An answer that does not hold
// one result per request is a store failure like any other, retried: the
// pipeline and the releaser read the results by index.
func admit(ctx context.Context, store gate.WindowStore, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	res, err := store.Admit(ctx, reqs)
	if err == nil && len(res) != len(reqs) {
		err = fmt.Errorf("admit: %w: store answered %d of %d requests", gate.ErrUnavailable, len(res), len(reqs))
	}
	return res, err
}

// forget takes the admissions of reqs back out of their windows for the
// pipeline and the releaser; a failure is counted and logged as what, since
// a retry would not help. The ids then fill places in their windows until
// they slide out, which holds back more, never less.
func forget(ctx context.Context, store gate.WindowStore, m *metrics.Metrics, log *slog.Logger, reqs []gate.AdmitRequest, what string) {
	if len(reqs) == 0 {
		return
	}
	if err := store.Forget(ctx, reqs); err != nil {
		countFailure(m, "window", "forget")
		log.Warn(what, "ids", len(reqs), "err", err)
	}
}

// recovered logs and counts a panic recovered at stage (a bug), with what
// identifies the work it hit.
func recovered(log *slog.Logger, m *metrics.Metrics, stage, msg string, v any, attrs ...any) {
	log.Error(msg, append(append([]any{"stage", stage}, attrs...), "panic", v, "stack", string(debug.Stack()))...)
	if m != nil {
		m.Recovered.WithLabelValues(stage).Inc()
	}
}

// startTimer is Pipeline.timer for any holder of m, which may be nil.
func startTimer(m *metrics.Metrics, store, op string) (done func()) {
	if m == nil {
		return func() {}
	}
	start := time.Now()
	return func() { m.StoreLatency.WithLabelValues(store, op).Observe(time.Since(start).Seconds()) }
}

// countFailure is Pipeline.failedCall for any holder of m, which may be nil.
func countFailure(m *metrics.Metrics, store, op string) {
	if m != nil {
		m.StoreErrors.WithLabelValues(store, op).Inc()
	}
}
