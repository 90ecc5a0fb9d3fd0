package pipeline

import (
	"bytes"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// metered is a pipeline with metrics and a log the test reads.
func metered(t *testing.T) (*Pipeline, *outbox, *metrics.Metrics, *bytes.Buffer) {
	t.Helper()
	rs := &gate.RuleSet{UnknownScene: gate.ActionForward, Scenes: map[string]gate.SceneRule{
		"s": {OnExceed: gate.ActionSuppress, Limits: []gate.Limit{{Window: time.Hour, Max: 100}}},
	}}
	out := newOutbox(t)
	m := metrics.New(prometheus.NewRegistry())
	var log bytes.Buffer
	p, err := New(Options{Rules: staticRules{rs}, Store: admitAll{}, Audit: newLedger(t), Forwarder: out, Metrics: m,
		Log: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return p, out, m, &log
}

// sceneLabels returns the scene label values of the metric family name.
func sceneLabels(t *testing.T, m *metrics.Metrics, name string) []string {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var scenes []string
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "scene" && !slices.Contains(scenes, l.GetValue()) {
					scenes = append(scenes, l.GetValue())
				}
			}
		}
	}
	slices.Sort(scenes)
	return scenes
}

// A producer inventing 5,000 scenes, valid or not, adds no series: scenes
// without a rule share one label value.
func TestSceneLabelsBounded(t *testing.T) {
	p, _, m, _ := metered(t)
	const n = 5000
	for start := 0; start < n; start += 500 {
		var ds []gate.Delivery
		for i := start; i < start+500; i++ {
			ds = append(ds, gate.Delivery{NumDelivered: 1, Seq: uint64(i + 1), Data: fmt.Appendf(nil,
				`{"id":"m%d","scene":"invented.%d","receive_id":"ou_1"}`, i, i)})
			// Invalid: no recipient.
			ds = append(ds, gate.Delivery{NumDelivered: 1, Seq: uint64(n + i + 1), Data: fmt.Appendf(nil,
				`{"id":"bad%d","scene":"invented.%d"}`, i, i)})
		}
		ds = append(ds, deliveries(fmt.Sprintf("ruled%d", start))...)
		for i, err := range handle(p, t.Context(), ds) {
			if err != nil && !gate.IsInvalid(err) {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	for _, name := range []string{"gate_decisions_total", "gate_invalid_messages_total"} {
		got := sceneLabels(t, m, name)
		want := []string{metrics.OtherScenes, "s"}
		if name == "gate_invalid_messages_total" {
			want = want[:1]
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: scenes %q, want %q", name, got[:min(len(got), 5)], want)
		}
	}
	if got := counterValue(t, m.Decisions.WithLabelValues(metrics.OtherScenes, string(gate.OutcomeForward), "false")); got != n {
		t.Errorf("forwards of scenes without a rule: %v, want %d", got, n)
	}
}

// sceneLabel names a scene only when a rule does, and never with a value
// Prometheus refuses, whatever a rule set built in code holds.
func TestSceneLabel(t *testing.T) {
	rs := &gate.RuleSet{Scenes: map[string]gate.SceneRule{"s": {}, "bad\xff": {}}}
	for scene, want := range map[string]string{
		"s": "s", "other": metrics.OtherScenes, "": metrics.OtherScenes, "bad\xff": metrics.OtherScenes,
	} {
		if got := sceneLabel(rs, scene); got != want {
			t.Errorf("sceneLabel(%q) = %q, want %q", scene, got, want)
		}
	}
	if got := sceneLabel(nil, "s"); got != metrics.OtherScenes {
		t.Errorf("sceneLabel without rules = %q, want %q", got, metrics.OtherScenes)
	}
}

// A panic while recording a message's metrics is recovered, logged with
// the message id and counted; the message is decided all the same.
func TestMetricsPanicRecovered(t *testing.T) {
	p, out, m, log := metered(t)
	// A collector with one label fewer than observe passes: every
	// WithLabelValues panics, as one given a label value that is not UTF-8.
	m.Decisions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "broken"}, []string{"scene", "outcome"})
	noErrors(t, handle(p, t.Context(), deliveries("m1", "m2")))
	if got := out.forwarded(); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("forwarded %v, want [m1 m2]", got)
	}
	if got := counterValue(t, m.Recovered.WithLabelValues("metrics")); got != 2 {
		t.Errorf("gate_recovered_panics_total{stage=metrics} = %v, want 2", got)
	}
	for _, id := range []string{"id=m1", "id=m2"} {
		if !strings.Contains(log.String(), id) {
			t.Errorf("log does not name %s:\n%s", id, log)
		}
	}
}

// A panic while parsing one message makes that message invalid (the dead
// letter), logged and counted; the rest of its batch is decided.
func TestParsePanicIsInvalid(t *testing.T) {
	p, out, m, log := metered(t)
	parseDelivery = func(d gate.Delivery, max int) (gate.Message, error) {
		if d.HeaderID == "boom" {
			panic("a library failed on boom")
		}
		return gate.ParseDelivery(d, max)
	}
	t.Cleanup(func() { parseDelivery = gate.ParseDelivery })
	ds := deliveries("m1", "m2")
	ds = slices.Insert(ds, 1, gate.Delivery{Data: []byte(`{"id":"boom","scene":"s","receive_id":"ou_1"}`), HeaderID: "boom", Seq: 42, NumDelivered: 1})
	errs := handle(p, t.Context(), ds)
	if errs[0] != nil || errs[2] != nil || !gate.IsInvalid(errs[1]) {
		t.Fatalf("verdicts %v, want nil, an invalid error, nil", errs)
	}
	if got := out.forwarded(); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("forwarded %v, want [m1 m2]", got)
	}
	if got := counterValue(t, m.Recovered.WithLabelValues("parse")); got != 1 {
		t.Errorf("gate_recovered_panics_total{stage=parse} = %v, want 1", got)
	}
	if !strings.Contains(log.String(), "id=boom") || !strings.Contains(log.String(), "seq=42") {
		t.Errorf("log does not name the message:\n%s", log)
	}
}
