package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/antifatigue/gate/internal/gate"
)

// saying is a delivery of id for recipient r in scene s, its text body
// text; delivered says how often it was delivered.
func (e *reuseEnv) saying(id, r, text string, delivered uint64) gate.Delivery {
	e.seq++
	return gate.Delivery{Data: fmt.Appendf(nil, `{"id":%q,"scene":"s","receive_id":%q,"content":{"text":%q}}`, e.id(id), e.label+r, text),
		Seq: e.seq, NumDelivered: delivered, ReceivedAt: time.Now()}
}

// mismatches reads gate_duplicate_body_mismatch_total.
func (e *reuseEnv) mismatches() float64 {
	e.t.Helper()
	var d dto.Metric
	if err := e.m.DuplicateBodyMismatch.Write(&d); err != nil {
		e.t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// A duplicate whose body differs from its first message's is counted
// wherever the gate meets it: a twin in the same batch (bodies compared),
// a first delivery whose claim finds the id taken (the ledger's hash of the
// first body), a redelivery looked up before it is decided (the same). It
// keeps the first's outcome, as every duplicate does. A retry with the same
// body counts nothing.
func TestDuplicateBodyMismatch(t *testing.T) {
	for name, open := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			e := newReuseEnv(t, open(t))
			deliver := func(what string, want float64, ds ...gate.Delivery) {
				t.Helper()
				for i, err := range e.deliver(ds...) {
					if err != nil {
						t.Fatalf("%s: delivery %d: %v, want its outcome (acked)", what, i, err)
					}
				}
				if got := e.mismatches(); got != want {
					t.Errorf("%s: gate_duplicate_body_mismatch_total = %v, want %v", what, got, want)
				}
			}
			deliver("twins of one body", 0, e.saying("a", "A", "one", 1), e.saying("a", "A", "one", 1))
			deliver("twins of two bodies", 1, e.saying("b", "A", "one", 1), e.saying("b", "A", "two", 1))
			deliver("first of c", 1, e.saying("c", "B", "one", 1))
			deliver("c again, the same body", 1, e.saying("c", "B", "one", 1))
			deliver("c with another body, at its claim", 2, e.saying("c", "B", "two", 1))
			deliver("c with another body, redelivered", 3, e.saying("c", "B", "three", 2))
			deliver("c redelivered with its own body", 3, e.saying("c", "B", "one", 2))
		})
	}
}
