package gormstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

func TestSQLiteTrends(t *testing.T)   { runTrends(t, sqliteOptions) }
func TestPostgresTrends(t *testing.T) { runTrends(t, postgresOptions) }

// runTrends is the behaviour of the report page's queries and of audit
// retention that every dialect must have.
func runTrends(t *testing.T, fresh freshFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, fresh freshFunc)
	}{
		{"Timeseries", testTimeseries},
		{"TopRecipients", testTopRecipients},
		{"PruneSuppressions", testPruneSuppressions},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, fresh) })
	}
}

// shadowSuppressed is a forward that enforcement would have suppressed,
// with its audit row.
func shadowSuppressed(key, scene, recipient string, at time.Time) gate.Record {
	r := suppressed(key, scene, recipient, at)
	r.Outcome, r.Shadow, r.ShadowOf = gate.OutcomeForward, true, gate.ActionSuppress
	r.Suppression.Shadow = true
	return r
}

func testTimeseries(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	MustCommit(t, s,
		record("f1", "a", gate.OutcomeForward, t0.Add(5*time.Minute)),
		suppressed("s1", "a", "open_id:ou_1", t0.Add(10*time.Minute)),
		record("d1", "b", gate.OutcomeDrop, t0.Add(20*time.Minute)),
		record("f2", "b", gate.OutcomeForward, t0.Add(2*time.Hour+time.Minute)),
		record("i1", "a", gate.OutcomeInvalid, t0.Add(3*time.Hour)),
	)
	all, err := s.Timeseries(ctx, time.Time{}, time.Time{}, "")
	if err != nil {
		t.Fatalf("Timeseries(all): %v", err)
	}
	want := []gate.HourSummary{
		{Hour: t0, SceneSummary: gate.SceneSummary{Scene: "*", Received: 3, Forwarded: 1, Suppressed: 1, Dropped: 1}},
		{Hour: t0.Add(2 * time.Hour), SceneSummary: gate.SceneSummary{Scene: "*", Received: 1, Forwarded: 1}},
		{Hour: t0.Add(3 * time.Hour), SceneSummary: gate.SceneSummary{Scene: "*", Received: 1, Invalid: 1}},
	}
	if fmt.Sprint(all) != fmt.Sprint(want) {
		t.Errorf("Timeseries(all):\n got %+v\nwant %+v", all, want)
	}

	// A scene, and a range: since mid-hour counts its hour whole, until is
	// exclusive.
	got, err := s.Timeseries(ctx, t0.Add(30*time.Minute), t0.Add(3*time.Hour), "a")
	if err != nil {
		t.Fatalf("Timeseries(a): %v", err)
	}
	want = []gate.HourSummary{{Hour: t0, SceneSummary: gate.SceneSummary{Scene: "a", Received: 2, Forwarded: 1, Suppressed: 1}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Timeseries(a, [10:30, 13:00)):\n got %+v\nwant %+v", got, want)
	}

	none, err := s.Timeseries(ctx, t0.Add(10*time.Hour), time.Time{}, "")
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("Timeseries of an empty range: got %#v, %v; want an empty, non-nil slice", none, err)
	}
	if _, err := s.Timeseries(ctx, t0, t0.Add(-time.Second), ""); !errors.Is(err, gate.ErrBadRequest) {
		t.Errorf("Timeseries with until before since: got %v, want ErrBadRequest", err)
	}
}

func testTopRecipients(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	MustCommit(t, s,
		suppressed("a1", "x", "open_id:a", at(1)),
		suppressed("a2", "y", "open_id:a", at(2)),
		shadowSuppressed("a3", "z", "open_id:a", at(30)),
		suppressed("c1", "x", "open_id:c", at(3)),
		suppressed("c2", "x", "open_id:c", at(4)),
		suppressed("b1", "x", "open_id:b", at(5)),
		suppressed("b2", "x", "open_id:b", at(6)),
		suppressed("d1", "x", "open_id:d", at(7)),
		suppressed("old", "x", "open_id:d", at(-60)), // before the range
		suppressed("d2", "x", "open_id:d", at(60)),   // at until: excluded
	)
	got, err := s.TopRecipients(ctx, t0, at(60), 3)
	if err != nil {
		t.Fatalf("TopRecipients: %v", err)
	}
	want := []gate.RecipientCount{
		{Recipient: "open_id:a", Suppressed: 3, Shadow: 1, LastSuppressedAt: at(30)},
		{Recipient: "open_id:b", Suppressed: 2, LastSuppressedAt: at(6)},
		{Recipient: "open_id:c", Suppressed: 2, LastSuppressedAt: at(4)},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("TopRecipients(limit 3):\n got %+v\nwant %+v", got, want)
	}

	all, err := s.TopRecipients(ctx, time.Time{}, time.Time{}, 0)
	if err != nil {
		t.Fatalf("TopRecipients(all time): %v", err)
	}
	if len(all) != 4 || all[0].Recipient != "open_id:a" || all[0].Suppressed != 3 {
		t.Errorf("TopRecipients(all time): got %+v, want 4 recipients, open_id:a and open_id:d first with 3", all)
	}

	empty, err := s.TopRecipients(ctx, at(1000), time.Time{}, 5)
	if err != nil || empty == nil || len(empty) != 0 {
		t.Errorf("TopRecipients of an empty range: got %#v, %v; want an empty, non-nil slice", empty, err)
	}
	for _, limit := range []int{-1, MaxTopRecipients + 1} {
		if _, err := s.TopRecipients(ctx, time.Time{}, time.Time{}, limit); !errors.Is(err, gate.ErrBadRequest) {
			t.Errorf("TopRecipients(limit %d): got %v, want ErrBadRequest", limit, err)
		}
	}
	if _, err := s.TopRecipients(ctx, t0, t0.Add(-time.Second), 1); !errors.Is(err, gate.ErrBadRequest) {
		t.Errorf("TopRecipients with until before since: got %v, want ErrBadRequest", err)
	}
}

func testPruneSuppressions(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	s.auditPruneRows, s.auditPrunePause = 4, time.Millisecond
	ctx := context.Background()
	var recs []gate.Record
	for i := range 13 {
		recs = append(recs, suppressed(fmt.Sprintf("k%02d", i), "x", "open_id:a", t0.Add(time.Duration(i)*time.Hour)))
	}
	MustCommit(t, s, recs...)
	before := summaryOf(t, s, "x")

	if n, err := s.PruneSuppressions(ctx, time.Time{}); n != 0 || err != nil {
		t.Errorf("PruneSuppressions(zero time) = %d, %v; want 0, nil", n, err)
	}
	// Rows k00…k09 are older than the cutoff: three full batches of 4 and
	// one short one.
	n, err := s.PruneSuppressions(ctx, t0.Add(9*time.Hour+time.Minute))
	if err != nil || n != 10 {
		t.Fatalf("PruneSuppressions = %d, %v; want 10, nil", n, err)
	}
	page, err := s.Suppressions(ctx, gate.SuppressionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(page); fmt.Sprint(got) != "[k12 k11 k10]" {
		t.Errorf("rows left after pruning: got %v, want [k12 k11 k10]", got)
	}
	if after := summaryOf(t, s, "x"); after != before {
		t.Errorf("counters after pruning audit rows: got %+v, want them kept: %+v", after, before)
	}
	if n, err := s.PruneSuppressions(ctx, t0.Add(9*time.Hour)); n != 0 || err != nil {
		t.Errorf("PruneSuppressions again = %d, %v; want 0, nil", n, err)
	}

	// A cancelled run stops between batches with what it deleted so far.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.PruneSuppressions(cancelled, t0.Add(100*time.Hour)); !errors.Is(err, gate.ErrUnavailable) {
		t.Errorf("PruneSuppressions(cancelled) error: got %v, want one wrapping ErrUnavailable", err)
	}
}
