package gormstore

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/porttest"
)

func TestPostgresHold(t *testing.T) { runHoldConformance(t, postgresOptions) }

func TestSQLiteHold(t *testing.T) { runHoldConformance(t, sqliteOptions) }

// runHoldConformance is how every dialect keeps held messages (the
// HoldStore, and what AuditLog.Commit writes of them) beyond the shared
// suite (porttest.RunHoldStore, run by ports_test.go): the audit rows,
// counters and tables a settlement writes.
func runHoldConformance(t *testing.T, fresh freshFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *Store)
	}{
		{"CommitHeld", testCommitHeld},
		{"BadHeldRecords", testBadHeldRecords},
		{"SettleReleaseAndReschedule", testSettleReleaseAndReschedule},
		{"SettleFallBackMoveDigest", testSettleFallBackMoveDigest},
		{"SettleRollsBack", testSettleRollsBack},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, MustOpen(t, fresh(t))) })
	}
}

// heldRec is porttest.HeldRecord: a message held in queue of recipient.
var heldRec = porttest.HeldRecord

const ou1 = "open_id:ou_1"

var (
	qDisk   = gate.Queue{Recipient: ou1, Name: "disk"}
	qDigest = gate.Queue{Recipient: ou1, Name: "digest:ci"}
)

// settleAll runs one Settle round at now (porttest.SettleRound).
func settleAll(t *testing.T, s *Store, now time.Time, decide func(due [][]gate.Held) []gate.Settlement) ([][]gate.Held, int) {
	t.Helper()
	return porttest.SettleRound(t, s, now, decide)
}

// heldIDs lists the message ids of each queue handed over.
var heldIDs = porttest.HeldIDs

// auditRow returns the suppression row of id.
func auditRow(t *testing.T, s *Store, id string) gate.Suppression {
	t.Helper()
	page, err := s.Suppressions(context.Background(), gate.SuppressionFilter{Limit: MaxPageLimit})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range page.Items {
		if p.MessageID == id {
			return p
		}
	}
	t.Fatalf("no audit row of %s", id)
	return gate.Suppression{}
}

func waiting(t *testing.T, s *Store, qs ...gate.Queue) map[gate.Queue]bool {
	t.Helper()
	return porttest.Waiting(t, s, qs...)
}

func testCommitHeld(t *testing.T, s *Store) {
	due := t0.Add(time.Hour)
	batch := []gate.Record{
		heldRec("d1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, due),
		heldRec("d2", "disk", ou1, "disk", gate.HoldDefer, 2, t0.Add(time.Second), due),
		heldRec("c1", "ci.build", ou1, "digest:ci", gate.HoldDigest, 3, t0.Add(2*time.Second), due),
		record("f1", "disk", gate.OutcomeForward, t0),
	}
	if known := MustCommit(t, s, batch...); known != nil {
		t.Errorf("first commit: known %v, want none", known)
	}
	// A retry writes nothing again: no second held row, no second count.
	if known := MustCommit(t, s, batch...); len(known) != 4 {
		t.Errorf("second commit: known %v, want all four", known)
	}
	for table, want := range map[string]int64{"held": 3, "held_queues": 2, "suppressions": 3} {
		if got := countRows(t, s, table); got != want {
			t.Errorf("%s: got %d rows, want %d", table, got, want)
		}
	}
	if got, want := summaryOf(t, s, "disk"), (gate.SceneSummary{Scene: "disk", Received: 3, Forwarded: 1, Deferred: 2}); got != want {
		t.Errorf("disk counters: got %+v, want %+v", got, want)
	}
	if got, want := summaryOf(t, s, "ci.build"), (gate.SceneSummary{Scene: "ci.build", Received: 1, Digested: 1}); got != want {
		t.Errorf("ci.build counters: got %+v, want %+v", got, want)
	}
	if got := auditRow(t, s, "d1"); got.HeldAs != gate.HoldDefer || got.Settled != "" || !got.SettledAt.IsZero() {
		t.Errorf("audit row of d1: held_as %q, settled %q at %v; want defer, not settled", got.HeldAs, got.Settled, got.SettledAt)
	}
	if got := auditRow(t, s, "c1"); got.HeldAs != gate.HoldDigest {
		t.Errorf("audit row of c1: held_as %q, want digest", got.HeldAs)
	}
	// What is handed back is what was held, byte for byte.
	handed, _ := settleAll(t, s, due, func([][]gate.Held) []gate.Settlement { return nil })
	if len(handed) != 2 {
		t.Fatalf("handed %v, want the two queues", heldIDs(handed))
	}
	var d1 gate.Held
	for _, q := range handed {
		for _, h := range q {
			if h.MessageID == "d1" {
				d1 = h
			}
		}
	}
	want := *batch[0].Hold
	want.HeldAt, want.DueAt, want.Expires = want.HeldAt.UTC(), want.DueAt.UTC(), want.Expires.UTC()
	if d1.MessageID != want.MessageID || d1.Kind != want.Kind || d1.Queue != want.Queue || d1.Scene != want.Scene ||
		d1.Priority != want.Priority || d1.TZ != want.TZ || d1.Seq != want.Seq || !d1.HeldAt.Equal(want.HeldAt) ||
		!d1.DueAt.Equal(want.DueAt) || !d1.Expires.Equal(want.Expires) || d1.Fallback != want.Fallback ||
		d1.Reason != want.Reason || !bytes.Equal(d1.Payload, want.Payload) {
		t.Errorf("held d1 read back:\ngot  %+v\nwant %+v", d1, want)
	}
}

func testBadHeldRecords(t *testing.T, s *Store) {
	good := heldRec("ok", "disk", ou1, "disk", gate.HoldDefer, 1, t0, t0)
	noHold := good
	noHold.Hold = nil
	forwardHolds := record("k", "disk", gate.OutcomeForward, t0)
	forwardHolds.Hold = good.Hold
	wrongKind := heldRec("k", "disk", ou1, "disk", gate.HoldDigest, 1, t0, t0)
	wrongKind.Outcome = gate.OutcomeDefer
	noQueue := heldRec("k", "disk", ou1, "", gate.HoldDefer, 1, t0, t0)
	noDue := heldRec("k", "disk", ou1, "disk", gate.HoldDefer, 1, t0, time.Time{})
	hugeSeq := heldRec("k", "disk", ou1, "disk", gate.HoldDefer, 1<<63, t0, t0)
	for name, bad := range map[string]gate.Record{
		"defer without a message to hold": noHold, "forward holding a message": forwardHolds,
		"defer holding a digest": wrongKind, "no queue": noQueue, "no due time": noDue, "sequence over int64": hugeSeq,
	} {
		_, err := s.Commit(context.Background(), []gate.Record{record("f", "disk", gate.OutcomeForward, t0), bad})
		if !errors.Is(err, gate.ErrBadRequest) || !errors.Is(err, gate.ErrPermanent) {
			t.Errorf("%s: got %v, want an error wrapping ErrBadRequest and ErrPermanent", name, err)
		}
	}
	if got := countRows(t, s, "decisions") + countRows(t, s, "held"); got != 0 {
		t.Errorf("rows after refused batches: got %d, want 0", got)
	}
}

func testSettleReleaseAndReschedule(t *testing.T, s *Store) {
	due := t0.Add(time.Hour)
	MustCommit(t, s,
		heldRec("m1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, due),
		heldRec("m2", "disk", ou1, "disk", gate.HoldDefer, 2, t0.Add(time.Minute), due),
		heldRec("m3", "disk", ou1, "disk", gate.HoldDefer, 3, t0.Add(2*time.Minute), due))
	called := false
	n, err := s.Settle(context.Background(), due.Add(-time.Microsecond), 10, 10, func(context.Context, [][]gate.Held) ([]gate.Settlement, error) {
		called = true
		return nil, nil
	})
	if err != nil || n != 0 || called {
		t.Errorf("Settle before anything is due: got %d, %v, called %v; want 0, nil, not called", n, err, called)
	}

	// At due: the head goes out, the next waits for the next reopening,
	// the third is left as it was.
	at, next := due.Add(time.Second), due.Add(time.Hour)
	handed, n := settleAll(t, s, due, func(due [][]gate.Held) []gate.Settlement {
		return []gate.Settlement{
			{MessageID: "m1", Scene: "disk", Kind: gate.SettleReleased, At: at, Out: &gate.Forward{MessageID: "m1"}},
			{MessageID: "m2", Scene: "disk", Kind: gate.SettleReschedule, At: at, DueAt: next},
		}
	})
	if got, want := heldIDs(handed), [][]string{{"m1", "m2", "m3"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("handed %v, want %v", got, want)
	}
	if n != 1 {
		t.Errorf("Settle returned %d, want 1 (the rescheduled one is not settled)", n)
	}
	row := auditRow(t, s, "m1")
	if row.Settled != gate.SettleReleased || !row.SettledAt.Equal(at) || row.HeldAs != gate.HoldDefer {
		t.Errorf("audit row of m1: settled %q at %v, held as %q; want released at %v, held as defer", row.Settled, row.SettledAt, row.HeldAs, at)
	}
	if row := auditRow(t, s, "m2"); row.Settled != "" {
		t.Errorf("audit row of the rescheduled m2: settled %q, want not settled", row.Settled)
	}
	if got := countRows(t, s, "held"); got != 2 {
		t.Errorf("held: got %d rows, want 2", got)
	}
	if got := summaryOf(t, s, "disk"); got.Released != 1 || got.Deferred != 3 || got.Received != 3 {
		t.Errorf("counters: got %+v, want 3 received and deferred, 1 released", got)
	}
	if !waiting(t, s, qDisk)[qDisk] {
		t.Error("Waiting: the queue still holds two messages, got false")
	}

	// The queue is due when its head is: not before next, though m3 was
	// due earlier, and then m3 is due no earlier than m2.
	if handed, _ := settleAll(t, s, next.Add(-time.Microsecond), func([][]gate.Held) []gate.Settlement { return nil }); len(handed) != 0 {
		t.Errorf("before the head's new due time: handed %v, want nothing", heldIDs(handed))
	}
	handed, n = settleAll(t, s, next, func(due [][]gate.Held) []gate.Settlement {
		var out []gate.Settlement
		for _, h := range due[0] {
			out = append(out, gate.Settlement{MessageID: h.MessageID, Kind: gate.SettleReleased, At: next, Out: &gate.Forward{MessageID: h.MessageID}})
		}
		return out
	})
	if got, want := heldIDs(handed), [][]string{{"m2", "m3"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("handed %v, want %v", got, want)
	}
	if !handed[0][1].DueAt.Equal(next) {
		t.Errorf("m3 handed due at %v, want %v: no message is due before one ahead of it", handed[0][1].DueAt, next)
	}
	if n != 2 || countRows(t, s, "held")+countRows(t, s, "held_queues") != 0 || !waiting(t, s, qDisk)[qDisk] {
		t.Errorf("after releasing the rest: settled %d, want 2, and no held rows or queue rows, the queue waiting for its outbox", n)
	}
	if err := s.Sent(context.Background(), []string{"m1", "m2", "m3"}); err != nil {
		t.Fatal(err)
	}
	if waiting(t, s, qDisk)[qDisk] {
		t.Error("the queue waits after its forwards were sent")
	}
	// The release of m2 and m3 counts in the hour it happened.
	hours, err := s.Timeseries(context.Background(), time.Time{}, time.Time{}, "disk")
	if err != nil {
		t.Fatal(err)
	}
	if len(hours) != 3 || hours[1].Released != 1 || hours[2].Released != 2 || !hours[2].Hour.Equal(next) {
		t.Errorf("hourly counters: got %+v, want 1 released at %v and 2 at %v", hours, due, next)
	}
}

func testSettleFallBackMoveDigest(t *testing.T, s *Store) {
	MustCommit(t, s,
		heldRec("m1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, t0),
		heldRec("m2", "disk", ou1, "disk", gate.HoldDefer, 3, t0, t0),
		heldRec("c1", "ci.build", ou1, "digest:ci", gate.HoldDigest, 2, t0, t0.Add(time.Hour)))
	at := t0.Add(6 * time.Hour)
	handed, n := settleAll(t, s, at, func([][]gate.Held) []gate.Settlement {
		return []gate.Settlement{
			{MessageID: "m1", Scene: "disk", Kind: gate.SettleFellBack, At: at, Fallback: gate.ActionDrop},
			{MessageID: "m2", Scene: "disk", Kind: gate.SettleMoved, At: at, DueAt: at.Add(time.Hour), Queue: qDigest},
		}
	})
	// Soonest due first: the disk queue, then the digest queue.
	if got, want := heldIDs(handed), [][]string{{"m1", "m2"}, {"c1"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("handed %v, want %v", got, want)
	}
	if n != 2 {
		t.Errorf("Settle returned %d, want 2", n)
	}
	if row := auditRow(t, s, "m1"); row.Settled != gate.SettleFellBack || row.Fallback != gate.ActionDrop || !row.SettledAt.Equal(at) {
		t.Errorf("audit row of m1: settled %q, fallback %q at %v; want fell_back, drop at %v", row.Settled, row.Fallback, row.SettledAt, at)
	}
	if row := auditRow(t, s, "m2"); row.Settled != "" || row.Fallback != gate.ActionDigest {
		t.Errorf("audit row of the moved m2: settled %q, fallback %q; want not settled, digest", row.Settled, row.Fallback)
	}
	if w := waiting(t, s, qDisk, qDigest); w[qDisk] || !w[qDigest] {
		t.Errorf("Waiting: got %v, want only the digest queue", w)
	}

	// The digest queue holds c1 and the moved m2, in Seq order.
	digestAt := at.Add(time.Hour)
	handed, n = settleAll(t, s, digestAt, func(due [][]gate.Held) []gate.Settlement {
		var out []gate.Settlement
		for _, h := range due[0] {
			out = append(out, gate.Settlement{MessageID: h.MessageID, Scene: h.Scene, Kind: gate.SettleDigested, At: digestAt, DigestID: "dg-1", Out: &gate.Forward{MessageID: "dg-1"}})
		}
		return out
	})
	if got, want := heldIDs(handed), [][]string{{"c1", "m2"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("handed %v, want %v", got, want)
	}
	if m2 := handed[0][1]; m2.Kind != gate.HoldDigest || m2.Queue != qDigest || !m2.Expires.IsZero() {
		t.Errorf("moved m2: kind %q in %v, expires %v; want digest in %v, no expiry", m2.Kind, m2.Queue, m2.Expires, qDigest)
	}
	if n != 2 {
		t.Errorf("Settle returned %d, want 2", n)
	}
	for _, id := range []string{"c1", "m2"} {
		if row := auditRow(t, s, id); row.Settled != gate.SettleDigested || row.DigestID != "dg-1" || !row.SettledAt.Equal(digestAt) {
			t.Errorf("audit row of %s: settled %q by %q at %v, want digested by dg-1 at %v", id, row.Settled, row.DigestID, row.SettledAt, digestAt)
		}
	}
	if row := auditRow(t, s, "m2"); row.HeldAs != gate.HoldDefer || row.Fallback != gate.ActionDigest {
		t.Errorf("audit row of m2: held as %q, fallback %q; want what happened: defer, then digest", row.HeldAs, row.Fallback)
	}
	if got, want := summaryOf(t, s, "disk"), (gate.SceneSummary{Scene: "disk", Received: 2, Deferred: 2, FellBack: 2}); got != want {
		t.Errorf("disk counters: got %+v, want %+v", got, want)
	}
	if got, want := summaryOf(t, s, "ci.build"), (gate.SceneSummary{Scene: "ci.build", Received: 1, Digested: 1}); got != want {
		t.Errorf("ci.build counters: got %+v, want %+v (digested counts once, when collected)", got, want)
	}
	if got := countRows(t, s, "held") + countRows(t, s, "held_queues"); got != 0 {
		t.Errorf("held and queue rows left: %d, want 0", got)
	}
}

func testSettleRollsBack(t *testing.T, s *Store) {
	MustCommit(t, s,
		heldRec("m1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, t0),
		heldRec("m2", "disk", ou1, "disk", gate.HoldDefer, 2, t0, t0))
	ctx := context.Background()
	errPublish := errors.New("publish failed")
	release := []gate.Settlement{{MessageID: "m1", Kind: gate.SettleReleased, At: t0, Out: &gate.Forward{MessageID: "m1"}}}
	cases := []struct {
		name string
		out  []gate.Settlement
		err  error
		want []error
	}{
		{"settle fails", release, errPublish, []error{errPublish}},
		{"unknown message", append(slices.Clone(release), gate.Settlement{MessageID: "nope", Kind: gate.SettleReleased, Out: &gate.Forward{MessageID: "nope"}}), nil,
			[]error{gate.ErrBadRequest, gate.ErrPermanent}},
		{"settled twice", append(slices.Clone(release), release...), nil, []error{gate.ErrBadRequest}},
		{"unknown kind", []gate.Settlement{{MessageID: "m2", Kind: "lost"}}, nil, []error{gate.ErrBadRequest}},
		{"reschedule to no time", []gate.Settlement{{MessageID: "m2", Kind: gate.SettleReschedule}}, nil, []error{gate.ErrBadRequest}},
		{"digest without id", []gate.Settlement{{MessageID: "m2", Kind: gate.SettleDigested}}, nil, []error{gate.ErrBadRequest}},
		{"fall back to nothing", []gate.Settlement{{MessageID: "m2", Kind: gate.SettleFellBack}}, nil, []error{gate.ErrBadRequest}},
		{"move nowhere", []gate.Settlement{{MessageID: "m2", Kind: gate.SettleMoved}}, nil, []error{gate.ErrBadRequest}},
		{"release without its forward", []gate.Settlement{{MessageID: "m2", Kind: gate.SettleReleased, At: t0}}, nil,
			[]error{gate.ErrBadRequest, gate.ErrPermanent}},
		{"reschedule with a forward", []gate.Settlement{{MessageID: "m2", Kind: gate.SettleReschedule, DueAt: t0.Add(time.Hour),
			Out: &gate.Forward{MessageID: "m2"}}}, nil, []error{gate.ErrBadRequest}},
	}
	for _, tc := range cases {
		n, err := s.Settle(ctx, t0, 10, 10, func(context.Context, [][]gate.Held) ([]gate.Settlement, error) { return tc.out, tc.err })
		for _, want := range tc.want {
			if !errors.Is(err, want) {
				t.Errorf("%s: got %d, %v; want an error wrapping %v", tc.name, n, err, want)
			}
		}
	}
	if got := countRows(t, s, "held"); got != 2 {
		t.Errorf("held after rolled back rounds: got %d rows, want 2", got)
	}
	if got := countRows(t, s, "released_forwards"); got != 0 {
		t.Errorf("forwards after rolled back rounds: got %d rows, want 0", got)
	}
	if row := auditRow(t, s, "m1"); row.Settled != "" {
		t.Errorf("audit row of m1: settled %q, want nothing", row.Settled)
	}
	if got := summaryOf(t, s, "disk"); got.Released != 0 {
		t.Errorf("released: got %d, want 0", got.Released)
	}
	for _, bad := range [][2]int{{0, 1}, {1, 0}} {
		if _, err := s.Settle(ctx, t0, bad[0], bad[1], func(context.Context, [][]gate.Held) ([]gate.Settlement, error) { return nil, nil }); !errors.Is(err, gate.ErrBadRequest) {
			t.Errorf("Settle(%d queues, %d each): got %v, want ErrBadRequest", bad[0], bad[1], err)
		}
	}
}
