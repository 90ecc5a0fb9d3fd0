package porttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// AuditHarness opens the audit log under test.
type AuditHarness struct {
	// Open returns an empty audit log that only the calling test uses.
	Open func(t *testing.T) gate.AuditLog
	// TakesBadRecords says the log is a fake that does not check records
	// (no key, no time, an unknown outcome) the way a real store refuses
	// them: the BadRecords case is then reported skipped, with this reason.
	TakesBadRecords bool
}

// RunAuditLog is the behaviour every gate.AuditLog must have: Commit is
// idempotent per key and says which keys it knew, the first record of a
// key in a batch wins, Decided reports what was committed, when and for
// which scene and recipient,
// overlapping commits at once count each key once, bad records fail the
// whole batch permanently, and Ping answers.
func RunAuditLog(t *testing.T, h AuditHarness) {
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, h AuditHarness)
	}{
		{"CommitIdempotent", testCommitIdempotent},
		{"FirstRecordOfAKeyWins", testFirstRecordWins},
		{"DecidedAndLargeBatch", testDecidedAndLargeBatch},
		{"DecidedSaysForWhom", testDecidedSaysForWhom},
		{"ConcurrentOverlappingCommits", testConcurrentOverlappingCommits},
		{"BadRecords", testBadRecords},
		{"Ping", testPing},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, h) })
	}
}

func testCommitIdempotent(t *testing.T, h AuditHarness) {
	log := h.Open(t)
	batch := []gate.Record{
		Record("m1", "disk", gate.OutcomeForward, T0),
		Suppressed("m2", "disk", "open_id:ou_1", T0.Add(time.Second)),
		Record("m3", "disk", gate.OutcomeDrop, T0.Add(2*time.Second)),
	}
	if known := mustCommit(t, log, batch...); known != nil {
		t.Errorf("first commit: known %v, want none", known)
	}
	if known := mustCommit(t, log, batch...); !slices.Equal(known, []string{"m1", "m2", "m3"}) {
		t.Errorf("second commit: known %v, want [m1 m2 m3]", known)
	}
	// Retried with other keys mixed in: only those are new.
	if known := mustCommit(t, log, append(batch, Record("m4", "disk", gate.OutcomeForward, T0))...); !slices.Equal(known, []string{"m1", "m2", "m3"}) {
		t.Errorf("third commit: known %v, want [m1 m2 m3]", known)
	}
	if got := decided(t, log, "m1", "m2", "m3", "m4"); len(got) != 4 || got["m2"].Outcome != gate.OutcomeSuppress {
		t.Errorf("Decided after three commits: %+v, want the four keys, m2 suppressed", got)
	}
}

func testFirstRecordWins(t *testing.T, h AuditHarness) {
	log := h.Open(t)
	mustCommit(t, log,
		Suppressed("dup", "disk", "open_id:ou_1", T0),
		Record("dup", "disk", gate.OutcomeForward, T0.Add(time.Minute)),
		Record("other", "disk", gate.OutcomeDrop, T0),
	)
	got := decided(t, log, "dup", "other")
	if p := got["dup"]; p.Outcome != gate.OutcomeSuppress || !p.At.Equal(T0) {
		t.Errorf("Decided[dup] = %+v, want suppress at %v (the first record of a key wins)", p, T0)
	}
	if p := got["other"]; p.Outcome != gate.OutcomeDrop {
		t.Errorf("Decided[other] = %+v, want drop", p)
	}
}

func testDecidedAndLargeBatch(t *testing.T, h AuditHarness) {
	log := h.Open(t)
	all := Keys("k", 1300)
	if got := decided(t, log, all...); len(got) != 0 {
		t.Errorf("Decided before any commit: got %d keys, want none", len(got))
	}
	// 1,200 records: more than one statement's worth of a real store.
	var batch []gate.Record
	for i, k := range all[:1200] {
		batch = append(batch, Suppressed(k, fmt.Sprintf("s%04d", i), "open_id:ou_1", T0))
	}
	mustCommit(t, log, batch...)
	got := decided(t, log, append(all, all[0], all[1250])...)
	want := gate.Prior{Outcome: gate.OutcomeSuppress, At: T0}
	for i, k := range all {
		p, ok := got[k]
		if ok != (i < 1200) {
			t.Fatalf("Decided[%s]: got %v, want %v", k, ok, i < 1200)
		}
		if ok && !(p.Outcome == want.Outcome && p.At.Equal(want.At)) {
			t.Fatalf("Decided[%s]: got %+v, want %+v", k, p, want)
		}
	}
	if len(got) != 1200 {
		t.Errorf("Decided: got %d keys, want 1200", len(got))
	}
	if got, err := log.Decided(context.Background(), nil); err != nil || len(got) != 0 {
		t.Errorf("Decided(nil): got %v, %v; want an empty map", got, err)
	}
}

// Decided says which scene and recipient a key was decided for: what tells
// a message that repeats an id from one that reuses it for someone else
// (gate.Reuses).
func testDecidedSaysForWhom(t *testing.T, h AuditHarness) {
	log := h.Open(t)
	fwd := Record("who-fwd", "disk", gate.OutcomeForward, T0)
	fwd.Recipient = "open_id:ou_a"
	sup := Suppressed("who-sup", "cpu", "open_id:ou_b", T0.Add(time.Second))
	sup.Recipient = "open_id:ou_b"
	mustCommit(t, log, fwd, sup, Record("invalid:who-bad", "disk", gate.OutcomeInvalid, T0))
	got := decided(t, log, "who-fwd", "who-sup", "invalid:who-bad")
	for key, want := range map[string]gate.Prior{
		"who-fwd":         {Outcome: gate.OutcomeForward, At: T0, Scene: "disk", Recipient: "open_id:ou_a"},
		"who-sup":         {Outcome: gate.OutcomeSuppress, At: T0.Add(time.Second), Scene: "cpu", Recipient: "open_id:ou_b"},
		"invalid:who-bad": {Outcome: gate.OutcomeInvalid, At: T0, Scene: "disk"},
	} {
		p := got[key]
		if p.Outcome != want.Outcome || !p.At.Equal(want.At) || p.Scene != want.Scene || p.Recipient != want.Recipient {
			t.Errorf("Decided[%s] = %+v, want %+v", key, p, want)
		}
	}
}

// Workers commit one batch in their own orders at once, as retries from
// several gates would: every call succeeds and each key is decided once.
func testConcurrentOverlappingCommits(t *testing.T, h AuditHarness) {
	log := h.Open(t)
	var batch []gate.Record
	all := Keys("c", 60)
	for i, k := range all {
		batch = append(batch, Suppressed(k, fmt.Sprintf("scene%d", i%3), "open_id:ou_1", T0.Add(time.Duration(i)*time.Minute)))
	}
	const workers = 4
	var wg sync.WaitGroup
	errs := make([]error, workers)
	known := make([][]string, workers)
	for w := range workers {
		b := slices.Clone(batch)
		if w%2 == 1 {
			slices.Reverse(b)
		}
		wg.Go(func() { known[w], errs[w] = log.Commit(context.Background(), b) })
	}
	wg.Wait()
	fresh := 0
	for w, err := range errs {
		if err != nil {
			t.Errorf("worker %d: Commit: %v", w, err)
		}
		fresh += len(all) - len(known[w])
	}
	if fresh != len(all) {
		t.Errorf("keys new to some worker: %d in all, want %d (each key claimed once)", fresh, len(all))
	}
	if got := decided(t, log, all...); len(got) != len(all) {
		t.Errorf("Decided: %d keys, want %d", len(got), len(all))
	}
}

func testBadRecords(t *testing.T, h AuditHarness) {
	if h.TakesBadRecords {
		t.Skip("this audit log is a fake that takes records a real store refuses (AuditHarness.TakesBadRecords)")
	}
	log := h.Open(t)
	good := Record("ok", "disk", gate.OutcomeForward, T0)
	for _, tt := range []struct {
		name string
		bad  gate.Record
	}{
		{"empty key", Record("", "disk", gate.OutcomeForward, T0)},
		{"zero time", Record("k", "disk", gate.OutcomeForward, time.Time{})},
		{"unknown outcome", Record("k", "disk", gate.Outcome("maybe"), T0)},
	} {
		_, err := log.Commit(context.Background(), []gate.Record{good, tt.bad})
		if !errors.Is(err, gate.ErrBadRequest) || !errors.Is(err, gate.ErrPermanent) || errors.Is(err, gate.ErrUnavailable) {
			t.Errorf("%s: got %v, want an error wrapping ErrBadRequest and ErrPermanent, not ErrUnavailable", tt.name, err)
		}
	}
	if got := decided(t, log, "ok", "k"); len(got) != 0 {
		t.Errorf("Decided after refused batches: %+v, want nothing (a failed Commit writes nothing)", got)
	}
	if known, err := log.Commit(context.Background(), nil); err != nil || known != nil {
		t.Errorf("Commit(nil): got %v, %v; want nil, nil", known, err)
	}
}

func testPing(t *testing.T, h AuditHarness) {
	if err := h.Open(t).Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v, want nil", err)
	}
}
