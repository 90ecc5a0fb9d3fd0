package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
)

// The tests of this file close gaps an audit of the decision core found
// (single-line mutations no test caught) in how a check meets an id's
// first use: a reused id against a stored answer, and the slot of a check
// whose claim conflicts. They drive the core through its front end
// (Checker), on the fakes of check_test.go and checkbatch_test.go.

// checkBodyFor is checkBody for recipient open_id:r.
func checkBodyFor(id, scene, r string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"scene":%q,"receive_id":%q}`, id, scene, r)
}

// wantReusedBy fails unless err is a reused id (409) whose first use is
// recipient open_id:r's.
func wantReusedBy(t *testing.T, what string, a gate.CheckAnswer, err error, r string) {
	t.Helper()
	var re *gate.ReusedError
	if !errors.As(err, &re) || gate.Classify(err) != gate.ClassConflict || re.First.Recipient != "open_id:"+r {
		t.Fatalf("%s: got %+v, %v; want a reused id (409) naming open_id:%s's use", what, a, err, r)
	}
}

// TestCheckReusedBeatsStoredAnswer protects the order of storedAnswer (the
// unbatched lookup, Check) and storedAnswers (the batched one): an id
// whose stored answer is another recipient's is a reused id, 409, not that
// answer as a duplicate. Otherwise u would be told v's decision as its own.
// The check asks no window and takes no slot.
func TestCheckReusedBeatsStoredAnswer(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			f := newCheckFixture(t)
			if batched {
				f.c.o.Answers = &batchAnswers{answerBox: f.answers}
			}
			if a := f.check(t, checkBodyFor("c1", "s", "v")); !a.Admitted {
				t.Fatalf("check of c1 for v: got %+v, want admitted", a)
			}
			a, err := f.c.Check(context.Background(), checkBody("c1", "s", ""))
			wantReusedBy(t, "check of c1 for u", a, err, "v")
			if len(f.store.calls) != 1 || f.store.taken("s") != 0 {
				t.Errorf("got %d admit requests, %d of u's slots taken; want 1 (v's) and 0", len(f.store.calls), f.store.taken("s"))
			}
		})
	}
}

// TestCheckReusedBeatsFirstClaimAnswer protects the order of first (the
// answer of a check whose claim conflicted, answerFirst): the claim that
// won is v's, and its answer is stored already; u's check answers 409, not
// v's answer, and gives back the slot it counted, since v's admission is in
// v's window, not u's.
func TestCheckReusedBeatsFirstClaimAnswer(t *testing.T) {
	f := newCheckFixture(t)
	f.ledger.fail = func([]gate.Record) error {
		// v's check of c1 claims the id first, and has stored its answer.
		f.ledger.priors["c1"] = gate.Prior{Outcome: gate.OutcomeForward, At: f.now, Scene: "s", Recipient: "open_id:v"}
		f.answers.mu.Lock()
		f.answers.answers["c1"] = gate.CheckAnswer{Decision: gate.OutcomeForward, Admitted: true, Count: 1, RulesVersion: "v7", DecidedAt: f.now}
		f.answers.mu.Unlock()
		f.ledger.fail = nil
		return nil
	}
	a, err := f.c.Check(context.Background(), checkBody("c1", "s", ""))
	wantReusedBy(t, "check of c1 for u", a, err, "v")
	if !slices.Equal(f.store.forgot, []string{"c1"}) || f.store.taken("s") != 0 {
		t.Errorf("forgot %v, %d of u's slots taken; want c1 taken back, 0", f.store.forgot, f.store.taken("s"))
	}
	if f.answers.saved != 0 {
		t.Errorf("saved %d answers, want 0: the check that lost the claim stores none", f.answers.saved)
	}
}

// TestCheckConflictLeavesASlotItDidNotRecord protects the keep/forget
// decision of a check whose claim conflicts (decideBatch, before
// answerFirst): only an admission the check counted is its own to give
// back. Here u's window holds c1 already (an earlier ask whose commit lost
// sight, so the slot stays), the retry finds it (a duplicate, counting
// nothing) and loses the claim to v: it answers 409 and leaves that slot,
// which it did not record, in the window.
func TestCheckConflictLeavesASlotItDidNotRecord(t *testing.T) {
	f := newCheckFixture(t)
	f.ledger.fail = func([]gate.Record) error {
		return fmt.Errorf("pg: %w: %w", gate.ErrOutcomeUnknown, gate.ErrUnavailable)
	}
	if _, err := f.c.Check(context.Background(), checkBody("c1", "s", "")); !errors.Is(err, gate.ErrUnavailable) {
		t.Fatalf("check of c1 for u: got %v, want unavailable (the commit lost sight)", err)
	}
	if f.store.taken("s") != 1 {
		t.Fatalf("%d of u's slots taken after a commit that lost sight, want 1 (kept)", f.store.taken("s"))
	}
	f.ledger.fail = func([]gate.Record) error {
		f.ledger.priors["c1"] = gate.Prior{Outcome: gate.OutcomeForward, At: f.now, Scene: "s", Recipient: "open_id:v"}
		f.ledger.fail = nil
		return nil
	}
	a, err := f.c.Check(context.Background(), checkBody("c1", "s", ""))
	wantReusedBy(t, "c1 for u asked again", a, err, "v")
	if len(f.store.forgot) != 0 || f.store.taken("s") != 1 {
		t.Errorf("forgot %v, %d of u's slots taken; want nothing forgotten, 1 (a slot the retry did not record)", f.store.forgot, f.store.taken("s"))
	}
}
