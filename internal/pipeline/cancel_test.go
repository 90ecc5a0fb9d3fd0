package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// keyedMsg is a delivery of id in scene for ou_1 with a cancel_key and a
// resolves field (each left out when "").
func (e *holdEnv) keyedMsg(scene, id, cancelKey, resolves string) gate.Delivery {
	d := e.msg(scene, id, "")
	body := fmt.Sprintf(`{"id":%q,"scene":%q,"receive_id":"ou_1"`, id, scene)
	if cancelKey != "" {
		body += fmt.Sprintf(`,"cancel_key":%q`, cancelKey)
	}
	if resolves != "" {
		body += fmt.Sprintf(`,"resolves":%q`, resolves)
	}
	d.Data = []byte(body + "}")
	return d
}

// TestResolvesCancels: a held message keeps its cancel_key; a later
// message that resolves the key is decided as any other and, once
// committed, cancels its recipient's held messages with that key. A cancel
// that fails fails the message, to be retried: the redelivery (a prior)
// runs the cancel again.
func TestResolvesCancels(t *testing.T) {
	e := newHoldEnv(t, true)
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{
		e.keyedMsg("d", "d1", "k", ""), e.keyedMsg("d", "d2", "k", ""), e.keyedMsg("d", "d3", "other", ""),
	}))
	if h := e.held(t, "d2", gate.HoldDefer, "d", gate.ReasonLimit); h.CancelKey != "k" {
		t.Fatalf("d2 held with cancel_key %q, want k", h.CancelKey)
	}
	e.box.failCancel = fmt.Errorf("cancel: %w", gate.ErrUnavailable)
	r1 := e.keyedMsg("s", "r1", "", "k")
	errs := handle(e.p, t.Context(), []gate.Delivery{r1})
	if !errors.Is(errs[0], gate.ErrUnavailable) {
		t.Fatalf("r1 with the hold store failing its cancel: %v, want a transient error (retried)", errs[0])
	}
	if _, ok := e.box.row("d2"); !ok {
		t.Fatal("d2 left held although the cancel failed")
	}
	e.box.failCancel = nil
	r1.NumDelivered = 2
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{r1}))
	if _, ok := e.box.row("d2"); ok {
		t.Error("d2 still held after the redelivery of r1 resolved k")
	}
	if _, ok := e.box.row("d3"); !ok {
		t.Error("d3 (another key) was cancelled")
	}
	if got := e.out.forwarded(); !slices.Equal(got, []string{"d1", "r1"}) {
		t.Errorf("forwarded %v, want d1 and r1 (once: the retry replays r1's forward)", got)
	}
	want := gate.CancelRequest{Key: "k", Recipient: "open_id:ou_1"}
	if n := len(e.box.cancels); n != 2 || e.box.cancels[0] != want || e.box.cancels[1] != want {
		t.Errorf("cancels %+v, want %+v twice (failed, then again)", e.box.cancels, want)
	}
}

// TestCanceller: a cancel request is parsed, handed to the hold store and
// counted by source and result; each message cancelled is counted settled
// cancelled under its scene.
func TestCanceller(t *testing.T) {
	box := newHoldBox(t)
	box.add(gate.Held{MessageID: "a", Kind: gate.HoldDefer, Queue: queueD, Scene: "d", Seq: 1, DueAt: noon, CancelKey: "k"})
	box.add(gate.Held{MessageID: "b", Kind: gate.HoldDefer, Queue: gate.Queue{Recipient: "open_id:ou_2", Name: "d"}, Scene: "d", Seq: 2, DueAt: noon, CancelKey: "k"})
	m := metrics.New(prometheus.NewRegistry())
	c, err := NewCanceller(CancellerOptions{Rules: staticRules{holdRules()}, Holds: box, Metrics: m, Now: func() time.Time { return noon }})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		body string
		want int
		bad  bool
	}{
		{body: `{"cancel_key":"k","receive_id_type":"open_id","receive_id":"ou_2"}`, want: 1},
		{body: `{"cancel_key":"k"}`, want: 1},
		{body: `{"cancel_key":"k"}`, want: 0},
		{body: `{"cancel_key":"k","receive_id":"ou_1"}`, bad: true},
	} {
		res, err := c.Cancel(t.Context(), []byte(tt.body), gate.CancelSourceAPI)
		if tt.bad != gate.IsInvalid(err) || (!tt.bad && (err != nil || res.Count != tt.want)) {
			t.Errorf("Cancel(%s) = %+v, %v; want count %d (refused: %t)", tt.body, res, err, tt.want, tt.bad)
		}
	}
	if s := box.settled["a"]; s.Kind != gate.SettleCancelled || !s.At.Equal(noon) {
		t.Errorf("a settled %+v, want cancelled at noon", s)
	}
	box.failCancel = errors.New("connection refused")
	if _, err := c.Cancel(t.Context(), []byte(`{"cancel_key":"k"}`), gate.CancelSourceNATS); !errors.Is(err, gate.ErrUnavailable) {
		t.Errorf("Cancel with the store down: %v, want it to wrap gate.ErrUnavailable", err)
	}
	for labels, want := range map[[2]string]float64{
		{"api", "cancelled"}: 2, {"api", "none"}: 1, {"api", "invalid"}: 1, {"nats", "failed"}: 1,
	} {
		if got := counterValue(t, m.Cancels.WithLabelValues(labels[0], labels[1])); got != want {
			t.Errorf("gate_cancels_total%v = %v, want %v", labels, got, want)
		}
	}
	if got := counterValue(t, m.Settled.WithLabelValues("d", "cancelled")); got != 2 {
		t.Errorf("gate_held_settled_total{d,cancelled} = %v, want 2", got)
	}
}
