package gormstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

func TestSQLiteCancel(t *testing.T) { testCancel(t, MustOpen(t, sqliteOptions(t))) }

func TestPostgresCancel(t *testing.T) { testCancel(t, MustOpen(t, postgresOptions(t))) }

// keyed is heldRec with a cancel_key.
func keyed(key, cancelKey, scene, recipient, queue string, kind gate.HoldKind, seq uint64, due time.Time) gate.Record {
	r := heldRec(key, scene, recipient, queue, kind, seq, t0, due)
	r.Hold.CancelKey = cancelKey
	return r
}

// testCancel: a cancel takes back the held messages of its key (of one
// recipient when named) and no other, whichever queue holds them (a
// deferred one, a digest's); their audit rows say cancelled, the
// counters count them, and the queues' rows name their new oldest
// message, or go. Asked again, it cancels nothing. The cancel_key is kept
// by the commit (read back by Settle).
func testCancel(t *testing.T, s *Store) {
	ctx := context.Background()
	due := t0.Add(time.Hour)
	ou2 := "open_id:ou_2"
	MustCommit(t, s,
		keyed("a1", "order-1", "disk", ou1, "disk", gate.HoldDefer, 1, due),
		keyed("a2", "order-2", "disk", ou1, "disk", gate.HoldDefer, 2, due.Add(time.Minute)),
		keyed("a3", "order-1", "ci", ou1, "digest:ci", gate.HoldDigest, 3, due),
		keyed("b1", "order-1", "disk", ou2, "disk", gate.HoldDefer, 4, due),
		keyed("b2", "", "disk", ou2, "disk", gate.HoldDefer, 5, due),
	)
	now := t0.Add(10 * time.Minute)

	// Of one recipient: ou2's b1 only.
	out, err := s.Cancel(ctx, gate.CancelRequest{Key: "order-1", Recipient: ou2}, now)
	if err != nil || len(out) != 1 || out[0].MessageID != "b1" || out[0].Kind != gate.SettleCancelled || out[0].Scene != "disk" {
		t.Fatalf("Cancel(order-1, %s) = %+v, %v; want b1 cancelled", ou2, out, err)
	}
	// Of every recipient: a1 and a3, in two queues.
	out, err = s.Cancel(ctx, gate.CancelRequest{Key: "order-1"}, now)
	ids := make([]string, len(out))
	for i, st := range out {
		ids[i] = st.MessageID
	}
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"a1", "a3"}) {
		t.Fatalf("Cancel(order-1) = %v, %v; want a1 and a3", ids, err)
	}
	// Again, and a key nobody named: nothing, no error.
	for _, req := range []gate.CancelRequest{{Key: "order-1"}, {Key: "nobody"}, {Key: "order-2", Recipient: ou2}} {
		if out, err := s.Cancel(ctx, req, now); err != nil || len(out) != 0 {
			t.Errorf("Cancel(%+v) = %+v, %v; want nothing", req, out, err)
		}
	}
	if _, err := s.Cancel(ctx, gate.CancelRequest{}, now); !errors.Is(err, gate.ErrPermanent) {
		t.Errorf("Cancel without a key: %v, want a permanent error", err)
	}

	for _, id := range []string{"a1", "a3", "b1"} {
		if r := auditRow(t, s, id); r.Settled != gate.SettleCancelled || !r.SettledAt.Equal(now) {
			t.Errorf("audit row of %s: settled %q at %v, want cancelled at %v", id, r.Settled, r.SettledAt, now)
		}
	}
	for _, id := range []string{"a2", "b2"} {
		if r := auditRow(t, s, id); r.Settled != "" {
			t.Errorf("audit row of %s: settled %q, want still held", id, r.Settled)
		}
	}
	if got := summaryOf(t, s, "disk"); got.Cancelled != 2 || got.Deferred != 4 {
		t.Errorf("disk counters: %+v, want cancelled 2 (deferred 4)", got)
	}
	if got := summaryOf(t, s, "ci"); got.Cancelled != 1 {
		t.Errorf("ci counters: %+v, want cancelled 1", got)
	}
	if n := countRows(t, s, "held"); n != 2 {
		t.Errorf("held: %d rows, want 2 (a2, b2)", n)
	}
	// ou1's disk queue now starts at a2 (its due time), the digest queue
	// is gone, ou2's disk queue starts at b2.
	type head struct {
		Recipient, Queue string
		HeadSeq          int64
	}
	var heads []head
	if err := s.db.Raw(`SELECT recipient, queue, head_seq FROM held_queues ORDER BY recipient, queue`).Scan(&heads).Error; err != nil {
		t.Fatal(err)
	}
	if want := []head{{ou1, "disk", 2}, {ou2, "disk", 5}}; !slices.Equal(heads, want) {
		t.Errorf("held_queues: %+v, want %+v", heads, want)
	}
	if w := waiting(t, s, qDisk, qDigest); !w[qDisk] || w[qDigest] {
		t.Errorf("Waiting: %v, want disk only", w)
	}
	// The messages left are handed over as held, cancel_key and all; a2's
	// queue is due at a2's time now, not a1's.
	handed, _ := settleAll(t, s, due, func([][]gate.Held) []gate.Settlement { return nil })
	if got := fmt.Sprint(heldIDs(handed)); got != "[[b2]]" {
		t.Errorf("due at %v: handed %s, want [[b2]] (a2 is due a minute later)", due, got)
	}
	handed, _ = settleAll(t, s, due.Add(time.Minute), func([][]gate.Held) []gate.Settlement { return nil })
	keys := map[string]string{}
	for _, q := range handed {
		for _, h := range q {
			keys[h.MessageID] = h.CancelKey
		}
	}
	if want := map[string]string{"a2": "order-2", "b2": ""}; fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("handed the cancel_keys %v, want %v", keys, want)
	}
}

// TestSQLiteCancelAfterRelease: a message settled released is in the outbox
// (or out): a cancel does not see it, and it stays released.
func TestSQLiteCancelAfterRelease(t *testing.T) {
	testCancelAfterRelease(t, MustOpen(t, sqliteOptions(t)))
}

func TestPostgresCancelAfterRelease(t *testing.T) {
	testCancelAfterRelease(t, MustOpen(t, postgresOptions(t)))
}

func testCancelAfterRelease(t *testing.T, s *Store) {
	ctx := context.Background()
	MustCommit(t, s, keyed("r1", "k", "disk", ou1, "disk", gate.HoldDefer, 1, t0),
		keyed("r2", "k", "disk", ou1, "disk", gate.HoldDefer, 2, t0))
	settleAll(t, s, t0, func(due [][]gate.Held) []gate.Settlement {
		return []gate.Settlement{{MessageID: "r1", Kind: gate.SettleReleased, At: t0, Out: &gate.Forward{MessageID: "r1"}}}
	})
	out, err := s.Cancel(ctx, gate.CancelRequest{Key: "k"}, t0)
	if err != nil || len(out) != 1 || out[0].MessageID != "r2" {
		t.Fatalf("Cancel = %+v, %v; want r2 alone", out, err)
	}
	if r := auditRow(t, s, "r1"); r.Settled != gate.SettleReleased {
		t.Errorf("r1 settled %q, want released", r.Settled)
	}
	fs, err := s.Outbox(ctx, 10)
	if err != nil || len(fs) != 1 || fs[0].MessageID != "r1" {
		t.Errorf("outbox %+v, %v; want r1's forward", fs, err)
	}
}

// TestPostgresCancelWaitsForSettle: a cancel of messages in a queue a gate
// is settling waits for that round (the queue row's lock, taken without
// SKIP LOCKED), then sees what it left: the message released stays
// released, the one rescheduled is cancelled. Never both.
func TestPostgresCancelWaitsForSettle(t *testing.T) {
	schemaURL := testenv.PostgresSchemaURL(t)
	settler := MustOpen(t, Options{DatabaseURL: schemaURL})
	app := testenv.Unique("cancel")
	canceller := MustOpen(t, Options{DatabaseURL: withApplicationName(t, schemaURL, app)})
	MustCommit(t, settler,
		keyed("m1", "k", "disk", ou1, "disk", gate.HoldDefer, 1, t0),
		keyed("m2", "k", "disk", ou1, "disk", gate.HoldDefer, 2, t0))

	type result struct {
		out []gate.Settlement
		err error
	}
	cancelled := make(chan result, 1)
	n, err := settler.Settle(context.Background(), t0, 10, 10, func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		go func() {
			out, err := canceller.Cancel(context.Background(), gate.CancelRequest{Key: "k"}, t0)
			cancelled <- result{out, err}
		}()
		if err := waitForLockWait(ctx, settler, app); err != nil {
			return nil, err
		}
		select {
		case r := <-cancelled:
			return nil, fmt.Errorf("the cancel went through while the queue was settled: %+v, %v", r.out, r.err)
		default:
		}
		return []gate.Settlement{
			{MessageID: "m1", Kind: gate.SettleReleased, At: t0, Out: &gate.Forward{MessageID: "m1"}},
			{MessageID: "m2", Kind: gate.SettleReschedule, DueAt: t0.Add(time.Hour)},
		}, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("Settle: %d, %v; want 1, nil", n, err)
	}
	select {
	case r := <-cancelled:
		if r.err != nil || len(r.out) != 1 || r.out[0].MessageID != "m2" {
			t.Fatalf("the waiting cancel: %+v, %v; want m2 alone", r.out, r.err)
		}
	case <-time.After(conditionDeadline):
		t.Fatal("the cancel still waits after the settlement ended")
	}
	if r := auditRow(t, settler, "m1"); r.Settled != gate.SettleReleased {
		t.Errorf("m1 settled %q, want released", r.Settled)
	}
	if r := auditRow(t, settler, "m2"); r.Settled != gate.SettleCancelled {
		t.Errorf("m2 settled %q, want cancelled", r.Settled)
	}
	if n := countRows(t, settler, "held_queues"); n != 0 {
		t.Errorf("held_queues: %d rows, want none", n)
	}
}
