package gormstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/migrations"
)

func TestCheckAnswersPostgres(t *testing.T) { runCheckAnswers(t, postgresOptions) }
func TestCheckAnswersSQLite(t *testing.T)   { runCheckAnswers(t, sqliteOptions) }

// runCheckAnswers is what both dialects must do with check answers.
func runCheckAnswers(t *testing.T, fresh freshFunc) {
	t.Run("RoundTripFirstStays", func(t *testing.T) { testCheckAnswerRoundTrip(t, fresh) })
	t.Run("LedgerOutcome", func(t *testing.T) { testCheckAnswerLedger(t, fresh) })
	t.Run("ConcurrentSaves", func(t *testing.T) { testCheckAnswerConcurrent(t, fresh) })
	t.Run("Prune", func(t *testing.T) { testCheckAnswerPrune(t, fresh) })
	t.Run("RefusedID", func(t *testing.T) { testCheckAnswerRefused(t, fresh) })
	t.Run("SaveAll", func(t *testing.T) { testCheckAnswerSaveAll(t, fresh) })
	t.Run("Answers", func(t *testing.T) { testCheckAnswersMany(t, fresh) })
	t.Run("WithClaims", func(t *testing.T) { testCheckAnswerWithClaims(t, fresh) })
}

// testCheckAnswerWithClaims: a record's answer is stored by the Commit
// that claims its id, in the same batch as records without one; a record
// whose id the ledger holds stores nothing, and an answer saved before
// the claim stays the first.
func testCheckAnswerWithClaims(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	first, later := checkAnswer(t0, 1), checkAnswer(t0.Add(time.Minute), 2)
	if err := s.Save(ctx, "saved-before", first); err != nil {
		t.Fatal(err)
	}
	with := func(key string, a gate.CheckAnswer) gate.Record {
		r := record(key, "disk", gate.OutcomeSuppress, a.DecidedAt)
		r.Answer = &a
		return r
	}
	MustCommit(t, s, with("c1", first), record("m1", "disk", gate.OutcomeForward, t0), with("saved-before", later))
	if known, err := s.Commit(ctx, []gate.Record{with("c1", later)}); err != nil || len(known) != 1 {
		t.Fatalf("claiming c1 again: known %v, err %v; want c1 known", known, err)
	}
	got, err := s.Answers(ctx, []string{"c1", "m1", "saved-before"})
	if err != nil {
		t.Fatal(err)
	}
	if a := got["c1"]; !a.Found || !reflect.DeepEqual(a.Answer, first) || a.Prior.Outcome != gate.OutcomeSuppress {
		t.Errorf("c1: got %+v; want the answer committed with its claim, %+v", a, first)
	}
	if a := got["m1"]; a.Found || a.Prior.Outcome != gate.OutcomeForward {
		t.Errorf("m1 (no answer): got %+v; want its ledger outcome alone", a)
	}
	if a := got["saved-before"]; !a.Found || !reflect.DeepEqual(a.Answer, first) {
		t.Errorf("saved-before: got %+v; want the answer saved first, %+v", a, first)
	}
	bad := with("bad", first)
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	bad.Answer.NextAllowedAt = &far
	if _, err := s.Commit(ctx, []gate.Record{bad}); !errors.Is(err, gate.ErrBadRequest) {
		t.Errorf("an answer that cannot be encoded: got %v, want ErrBadRequest", err)
	}
}

// testCheckAnswersMany: one lookup of many ids finds each one's answer and
// ledger outcome, and nothing for an id found nowhere.
func testCheckAnswersMany(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	MustCommit(t, s, record("m1", "disk", gate.OutcomeDrop, t0))
	first := checkAnswer(t0, 3)
	if err := s.Save(ctx, "c1", first); err != nil {
		t.Fatal(err)
	}
	got, err := s.Answers(ctx, []string{"c1", "m1", "none", "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if c1 := got["c1"]; !c1.Found || !reflect.DeepEqual(c1.Answer, first) || c1.Prior != (gate.Prior{}) {
		t.Errorf("c1: got %+v, want its answer and no ledger row", c1)
	}
	if m1 := got["m1"]; m1.Found || m1.Prior.Outcome != gate.OutcomeDrop || !m1.Prior.At.Equal(t0) {
		t.Errorf("m1: got %+v, want the ledger's drop alone", m1)
	}
	if none, ok := got["none"]; !ok || none != (gate.StoredAnswer{}) || len(got) != 3 {
		t.Errorf("got %+v, want c1, m1 and none (zero)", got)
	}
}

// testCheckAnswerSaveAll: a batch of answers larger than one INSERT is
// stored in full, and an id stored before keeps its first answer.
func testCheckAnswerSaveAll(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	if err := s.SaveAll(ctx, nil); err != nil {
		t.Fatalf("no answers: %v", err)
	}
	first := checkAnswer(t0, 1)
	if err := s.Save(ctx, "b-7", first); err != nil {
		t.Fatal(err)
	}
	batch := map[string]gate.CheckAnswer{}
	for i := range 2*saveRows + 50 {
		batch[fmt.Sprintf("b-%d", i)] = checkAnswer(t0.Add(time.Duration(i)*time.Second), i+2)
	}
	if err := s.SaveAll(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveAll(ctx, batch); err != nil {
		t.Fatalf("saving the batch again must change nothing and succeed: %v", err)
	}
	if n := countRows(t, s, "check_answers"); n != int64(len(batch)) {
		t.Errorf("got %d rows, want %d", n, len(batch))
	}
	for _, id := range []string{"b-0", "b-7", "b-449"} {
		want := batch[id]
		if id == "b-7" {
			want = first
		}
		got, found, _, err := s.Answer(ctx, id)
		if err != nil || !found || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v (found %v, err %v), want %+v", id, got, found, err, want)
		}
	}
}

// checkAnswer is a refused check's answer decided at at.
func checkAnswer(at time.Time, count int) gate.CheckAnswer {
	w := gate.Duration(time.Hour)
	next := at.Add(time.Hour)
	return gate.CheckAnswer{Decision: gate.OutcomeSuppress, Limit: &gate.CheckLimit{Scope: gate.ScopeScene, Window: &w, Max: 3},
		Count: count, NextAllowedAt: &next, RulesVersion: "v1", Reason: gate.ReasonLimit, DecidedAt: at}
}

func testCheckAnswerRoundTrip(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	if _, found, prior, err := s.Answer(ctx, "c1"); err != nil || found || prior != (gate.Prior{}) {
		t.Fatalf("unknown id: got found %v, prior %+v, err %v; want nothing", found, prior, err)
	}
	first := checkAnswer(t0, 3)
	if err := s.Save(ctx, "c1", first); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(ctx, "c1", checkAnswer(t0.Add(time.Minute), 1)); err != nil {
		t.Fatalf("a second save must change nothing and succeed: %v", err)
	}
	got, found, _, err := s.Answer(ctx, "c1")
	if err != nil || !found {
		t.Fatalf("got found %v, err %v", found, err)
	}
	if !reflect.DeepEqual(got, first) {
		t.Errorf("got  %+v\nwant the first answer %+v", got, first)
	}
}

func testCheckAnswerLedger(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	MustCommit(t, s, record("m1", "disk", gate.OutcomeDrop, t0))
	_, found, prior, err := s.Answer(ctx, "m1")
	if err != nil || found {
		t.Fatalf("got found %v, err %v; want no stored answer", found, err)
	}
	if prior.Outcome != gate.OutcomeDrop || !prior.At.Equal(t0) {
		t.Errorf("prior: got %+v, want drop at %v", prior, t0)
	}
	MustCommit(t, s, record("c2", "disk", gate.OutcomeSuppress, t0))
	if err := s.Save(ctx, "c2", checkAnswer(t0, 3)); err != nil {
		t.Fatal(err)
	}
	if _, found, prior, err := s.Answer(ctx, "c2"); err != nil || !found || prior.Outcome != gate.OutcomeSuppress {
		t.Errorf("got found %v, prior %+v, err %v; want the answer and the ledger's suppress", found, prior, err)
	}
}

func testCheckAnswerConcurrent(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() { errs <- s.Save(ctx, "same", checkAnswer(t0, i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent save: %v", err)
		}
	}
	if n := countRows(t, s, "check_answers"); n != 1 {
		t.Errorf("got %d rows, want 1", n)
	}
}

func testCheckAnswerPrune(t *testing.T, fresh freshFunc) {
	o := fresh(t)
	o.LedgerRetention = time.Hour
	s := MustOpen(t, o)
	ctx := context.Background()
	for i := range 3 {
		if err := s.Save(ctx, fmt.Sprintf("old-%d", i), checkAnswer(t0, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Save(ctx, "young", checkAnswer(t0.Add(90*time.Minute), 1)); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneCheckAnswers(ctx, t0.Add(2*time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("pruned %d, err %v; want the 3 answers older than the retention", n, err)
	}
	if _, found, _, err := s.Answer(ctx, "young"); err != nil || !found {
		t.Errorf("the answer within the retention: found %v, err %v", found, err)
	}
	if _, found, _, _ := s.Answer(ctx, "old-0"); found {
		t.Error("a pruned answer is still found")
	}
}

func testCheckAnswerRefused(t *testing.T, fresh freshFunc) {
	o := fresh(t)
	s := MustOpen(t, o)
	_, _, _, err := s.Answer(context.Background(), "bad\xffid")
	if s.dialect.name == migrations.SQLite {
		// SQLite keeps any bytes as text.
		if err != nil {
			t.Errorf("sqlite: %v", err)
		}
		return
	}
	if !errors.Is(err, gate.ErrPermanent) {
		t.Errorf("got %v, want an error wrapping gate.ErrPermanent", err)
	}
}
