package pipeline

import (
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
	if m == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			p.recovered("metrics", it.key, it.d.Seq, v)
		}
	}()
	scene := sceneLabel(rules, it.msg.Scene)
	outcome, shadow := gate.OutcomeInvalid, "false"
	if it.state == invalid {
		m.Invalid.WithLabelValues(scene).Inc()
		if it.reusedError() != nil {
			m.ReusedIDs.WithLabelValues("message").Inc()
		}
	} else {
		outcome = it.dec.Outcome
		if it.dec.Shadow {
			shadow = "true"
		}
		if it.dec.Unchecked {
			m.Unchecked.WithLabelValues(scene).Inc()
		}
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

// recovered logs and counts a panic recovered at stage (a bug), with what
// identifies the work it hit. Every recover() of the package ends here.
func recovered(log *slog.Logger, m *metrics.Metrics, stage, msg string, v any, attrs ...any) {
	log.Error(msg, append(append([]any{"stage", stage}, attrs...), "panic", v, "stack", string(debug.Stack()))...)
	if m != nil {
		m.Recovered.WithLabelValues(stage).Inc()
	}
}
