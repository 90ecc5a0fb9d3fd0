package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The tests of this file close a gap an audit of the decision core found
// (a single-line mutation no test caught) in how a reused id is found: a
// twin of a prior. They drive the core through its front end (Pipeline), on
// reuse_test.go's reuseEnv.

// TestReusedIDTwinOfPrior protects the twin of a prior (reusedTwins, case
// prior): in one batch, a redelivery of x for A, whose id the ledger holds
// (a prior), and a twin of it for B. The prior keeps its outcome; the twin
// is checked against the ledger's use of x and parked as a reused id naming
// it (scene, recipient and the ledger's time), with B's reused_id row and no
// slot. Were the prior's twin not checked, B would take A's outcome unseen;
// were it checked against the batch's message instead of the ledger's row,
// its dead letter would name a first use at the wrong time.
func TestReusedIDTwinOfPrior(t *testing.T) {
	for name, open := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			e := newReuseEnv(t, open(t))
			if err := e.deliver(e.msg("x", "s", "A", 1))[0]; err != nil {
				t.Fatalf("x for A: got %v, want decided (acked)", err)
			}
			priors, err := e.st.audit.Decided(context.Background(), []string{e.id("x")})
			if err != nil {
				t.Fatal(err)
			}
			first, ok := priors[e.id("x")]
			if !ok {
				t.Fatalf("ledger: got no row for x, want A's")
			}

			errs := e.deliver(e.msg("x", "s", "A", 2), e.msg("x", "s", "B", 1))
			if errs[0] != nil {
				t.Errorf("x for A redelivered: got %v, want its prior outcome (acked)", errs[0])
			}
			e.wantReused("twin of the prior, for B", errs[1], "s", "A")
			if at := first.At.UTC().Format(time.RFC3339Nano); !strings.Contains(errs[1].Error(), at) {
				t.Errorf("twin's verdict: got %q, want the ledger's first use at %s", errs[1], at)
			}
			if rows := e.reusedRows("B"); len(rows) != 1 || rows[0].Scene != "s" {
				t.Errorf("B's reused_id rows: got %+v, want one in s", rows)
			}
			if got := e.out.forwarded(); len(got) != 2 || got[0] != e.id("x") || got[1] != e.id("x") {
				t.Errorf("forwarded %v, want x, then x replayed for A (nothing for B)", got)
			}
			e.wantSlotFree("s", "B")
		})
	}
}
