package porttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// HoldHarness opens the hold store under test.
type HoldHarness struct {
	// Open returns an empty audit log and the hold store beside it: the
	// held messages are written by the log's Commit (gate.Record.Hold), as
	// the contract of gate.HoldStore says.
	Open func(t *testing.T) (gate.AuditLog, gate.HoldStore)
}

// RunHoldStore is the behaviour every gate.HoldStore must have: Waiting
// names the queues that hold messages, Settle hands over the due queues
// soonest first, each from its oldest message in Seq order within its
// bounds, and settles nothing when settle fails.
func RunHoldStore(t *testing.T, h HoldHarness) {
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, log gate.AuditLog, s gate.HoldStore)
	}{
		{"Waiting", testWaiting},
		{"SettleFailsSettlesNothing", testSettleFailsSettlesNothing},
		{"SettleBounds", testSettleBounds},
		{"LateCommitBecomesHead", testLateCommitBecomesHead},
	} {
		t.Run(c.name, func(t *testing.T) {
			log, s := h.Open(t)
			c.fn(t, log, s)
		})
	}
}

const ou1 = "open_id:ou_1"

var (
	qDisk   = gate.Queue{Recipient: ou1, Name: "disk"}
	qDigest = gate.Queue{Recipient: ou1, Name: "digest:ci"}
)

// SettleRound runs one Settle round at now over at most 10 queues of 10,
// returning what was handed over and Settle's count, settling as decide
// says.
func SettleRound(t *testing.T, s gate.HoldStore, now time.Time, decide func(due [][]gate.Held) []gate.Settlement) ([][]gate.Held, int) {
	t.Helper()
	var handed [][]gate.Held
	n, err := s.Settle(context.Background(), now, 10, 10, func(_ context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		handed = due
		return decide(due), nil
	})
	if err != nil {
		t.Fatalf("Settle at %v: %v", now, err)
	}
	return handed, n
}

// Waiting is Waiting or a failed test.
func Waiting(t *testing.T, s gate.HoldStore, qs ...gate.Queue) map[gate.Queue]bool {
	t.Helper()
	w, err := s.Waiting(context.Background(), qs)
	if err != nil {
		t.Fatalf("Waiting: %v", err)
	}
	return w
}

// Waiting names the queues that hold messages, and only those: a queue
// without messages is absent from its answer.
func testWaiting(t *testing.T, log gate.AuditLog, s gate.HoldStore) {
	other := gate.Queue{Recipient: "open_id:ou_2", Name: "disk"}
	if got := Waiting(t, s, qDisk, other); len(got) != 0 {
		t.Errorf("Waiting before anything is held: got %v, want none", got)
	}
	mustCommit(t, log, HeldRecord("d1", "disk", ou1, "disk", gate.HoldDefer, 1, T0, T0),
		HeldRecord("c1", "ci.build", ou1, "digest:ci", gate.HoldDigest, 2, T0, T0))
	got := Waiting(t, s, qDisk, other, qDigest, qDisk)
	if want := map[gate.Queue]bool{qDisk: true, qDigest: true}; len(got) != len(want) || !got[qDisk] || !got[qDigest] {
		t.Errorf("Waiting: got %v, want %v", got, want)
	}
	if got := Waiting(t, s); len(got) != 0 {
		t.Errorf("Waiting of no queues: got %v, want none", got)
	}
}

// settle failing (a publish that failed, say) settles nothing: the same
// messages are handed over again.
func testSettleFailsSettlesNothing(t *testing.T, log gate.AuditLog, s gate.HoldStore) {
	mustCommit(t, log,
		HeldRecord("m1", "disk", ou1, "disk", gate.HoldDefer, 1, T0, T0),
		HeldRecord("m2", "disk", ou1, "disk", gate.HoldDefer, 2, T0, T0))
	errPublish := errors.New("publish failed")
	n, err := s.Settle(context.Background(), T0, 10, 10, func(context.Context, [][]gate.Held) ([]gate.Settlement, error) {
		return []gate.Settlement{{MessageID: "m1", Kind: gate.SettleReleased, At: T0, Out: &gate.Forward{MessageID: "m1"}}}, errPublish
	})
	if !errors.Is(err, errPublish) || n != 0 {
		t.Errorf("Settle with settle failing: got %d, %v; want 0 and an error wrapping %v", n, err, errPublish)
	}
	handed, _ := SettleRound(t, s, T0, func([][]gate.Held) []gate.Settlement { return nil })
	if got, want := HeldIDs(handed), [][]string{{"m1", "m2"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("handed after the failed round %v, want %v", got, want)
	}
}

func testSettleBounds(t *testing.T, log gate.AuditLog, s gate.HoldStore) {
	var recs []gate.Record
	for i := range 3 {
		recipient := fmt.Sprintf("open_id:ou_%d", i)
		for j := range 3 {
			// Queue 2 is due first, then 1, then 0.
			recs = append(recs, HeldRecord(fmt.Sprintf("q%d-m%d", i, j), "disk", recipient, "disk", gate.HoldDefer,
				uint64(10*i+j), T0, T0.Add(time.Duration(3-i)*time.Minute)))
		}
	}
	mustCommit(t, log, recs...)
	var handed [][]gate.Held
	n, err := s.Settle(context.Background(), T0.Add(time.Hour), 2, 1, func(_ context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		handed = due
		return nil, nil
	})
	if err != nil || n != 0 {
		t.Fatalf("Settle: %d, %v", n, err)
	}
	if got, want := HeldIDs(handed), [][]string{{"q2-m0"}, {"q1-m0"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("two queues, one message each: handed %v, want %v (soonest due first, each its head)", got, want)
	}
}

// A message decided on one gate may commit after a later message of its
// queue decided on another. It is the queue's head.
func testLateCommitBecomesHead(t *testing.T, log gate.AuditLog, s gate.HoldStore) {
	mustCommit(t, log, HeldRecord("late", "disk", ou1, "disk", gate.HoldDefer, 5, T0, T0.Add(2*time.Hour)))
	mustCommit(t, log, HeldRecord("early", "disk", ou1, "disk", gate.HoldDefer, 3, T0, T0.Add(time.Hour)))
	handed, _ := SettleRound(t, s, T0.Add(time.Hour), func([][]gate.Held) []gate.Settlement { return nil })
	if got, want := HeldIDs(handed), [][]string{{"early", "late"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("handed %v, want %v: the queue is due when its oldest message is", got, want)
	}
}
