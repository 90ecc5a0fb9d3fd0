package pipeline

import (
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
	p.o.Log.Error("recovered from a panic while handling a message", "stage", stage, "id", id, "seq", seq,
		"panic", v, "stack", string(debug.Stack()))
	if p.o.Metrics != nil {
		p.o.Metrics.Recovered.WithLabelValues(stage).Inc()
	}
}

// timer starts timing one call to a dependency; calling what it returns
// records the call's duration.
func (p *Pipeline) timer(store, op string) (done func()) { return startTimer(p.o.Metrics, store, op) }

// failedCall counts a call to a dependency that failed, transiently or not.
func (p *Pipeline) failedCall(store, op string) { countFailure(p.o.Metrics, store, op) }

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
