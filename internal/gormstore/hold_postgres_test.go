package gormstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// The tests of this file are about PostgreSQL's row locks: several gates
// settling and committing at once. On SQLite one transaction writes at a
// time, so the same questions do not arise.

// conditionDeadline bounds every wait on a condition: generous, because the
// machine is shared.
const conditionDeadline = 30 * time.Second

// releaseAll settles every message handed over as released at now.
func releaseAll(due [][]gate.Held, now time.Time) []gate.Settlement {
	var out []gate.Settlement
	for _, q := range due {
		for _, h := range q {
			out = append(out, gate.Settlement{MessageID: h.MessageID, Scene: h.Scene, Kind: gate.SettleReleased, At: now, Out: &gate.Forward{MessageID: h.MessageID}})
		}
	}
	return out
}

// TestPostgresSettleConcurrent: two gates settling at once never get the
// same queue. Each settle callback waits until both are inside, so both
// transactions hold their queues at the same time. It fails at once, not
// after conditionDeadline, when a message is handed to both (a doubled
// release) or when one gate waits for the other's queue lock (once that
// one ends it would be handed the same queue).
func TestPostgresSettleConcurrent(t *testing.T) {
	schemaURL := testenv.PostgresSchemaURL(t)
	apps := []string{testenv.Unique("settle0"), testenv.Unique("settle1")}
	gates := []*Store{MustOpen(t, Options{DatabaseURL: withApplicationName(t, schemaURL, apps[0])}),
		MustOpen(t, Options{DatabaseURL: withApplicationName(t, schemaURL, apps[1])})}
	MustCommit(t, gates[0],
		heldRec("a1", "disk", "open_id:ou_a", "disk", gate.HoldDefer, 1, t0, t0),
		heldRec("a2", "disk", "open_id:ou_a", "disk", gate.HoldDefer, 2, t0, t0),
		heldRec("b1", "disk", "open_id:ou_b", "disk", gate.HoldDefer, 3, t0, t0.Add(time.Second)))
	now := t0.Add(time.Minute)

	var (
		inside sync.WaitGroup
		mu     sync.Mutex
		got    [][]string
	)
	inside.Add(len(gates))
	bothInside := make(chan struct{})
	go func() { inside.Wait(); close(bothInside) }()
	// abort gets why a gate cannot go on: it was handed a message the
	// other holds, or it was seen waiting for a lock before both were
	// inside (each gate's lock wait is looked for by its own connections'
	// name, from the other's pool). The gate waiting for both to be
	// inside then gives up at once.
	abort := make(chan string, len(gates))
	giveUp := func(why string) {
		select {
		case abort <- why:
		default:
		}
	}
	watch, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	for i, app := range apps {
		go func() {
			if waitForLockWait(watch, gates[1-i], app) != nil {
				return
			}
			giveUp(fmt.Sprintf("gate %d waits for a queue the other holds instead of skipping it: it would be handed the same queue next", i))
		}()
	}
	settled := make([]int, len(gates))
	errs := make([]error, len(gates))
	var wg sync.WaitGroup
	for i, s := range gates {
		wg.Go(func() {
			settled[i], errs[i] = s.Settle(context.Background(), now, 1, 10, func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
				mu.Lock()
				ids := heldIDs(due)
				for _, q := range got {
					for _, id := range q {
						if slices.ContainsFunc(ids, func(mine []string) bool { return slices.Contains(mine, id) }) {
							mu.Unlock()
							why := id + " handed to both gates: a doubled release"
							giveUp(why)
							return nil, errors.New(why)
						}
					}
				}
				got = append(got, ids...)
				mu.Unlock()
				inside.Done()
				select {
				case <-bothInside:
					stopWatch()
				case why := <-abort:
					return nil, errors.New(why)
				case <-time.After(conditionDeadline):
					return nil, errors.New("the other gate never got a queue while this one held its own")
				}
				return releaseAll(due, now), nil
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("gate %d: Settle: %v", i, err)
		}
	}
	slices.SortFunc(got, slices.Compare)
	if want := [][]string{{"a1", "a2"}, {"b1"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("handed to the two gates: %v, want %v, each queue to one gate", got, want)
	}
	if settled[0]+settled[1] != 3 {
		t.Errorf("settled %v, want 3 in all", settled)
	}
	if got := countRows(t, gates[0], "held") + countRows(t, gates[0], "held_queues"); got != 0 {
		t.Errorf("held and queue rows left: %d, want 0", got)
	}
	if got := summaryOf(t, gates[0], "disk"); got.Released != 3 {
		t.Errorf("released: got %d, want 3, each message once", got.Released)
	}
}

// TestPostgresSettleSkipsLockedQueues: while one gate holds the only due
// queue, another's Settle returns at once with nothing, instead of waiting
// for it.
func TestPostgresSettleSkipsLockedQueues(t *testing.T) {
	opts := postgresOptions(t)
	a, b := MustOpen(t, opts), MustOpen(t, opts)
	MustCommit(t, a, heldRec("m1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, t0))
	n, err := a.Settle(context.Background(), t0, 10, 10, func(_ context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		// The context's deadline fails the call if it waits for the lock.
		ctx, cancel := context.WithTimeout(context.Background(), conditionDeadline)
		defer cancel()
		called := false
		n, err := b.Settle(ctx, t0, 10, 10, func(context.Context, [][]gate.Held) ([]gate.Settlement, error) {
			called = true
			return nil, nil
		})
		if err != nil || n != 0 || called {
			return nil, fmt.Errorf("the other gate's Settle: %d, %v, called %v; want 0, nil, not called", n, err, called)
		}
		return releaseAll(due, t0), nil
	})
	if err != nil || n != 1 {
		t.Fatalf("Settle: %d, %v; want 1, nil", n, err)
	}
}

// TestPostgresCommitWaitsForSettle: a message committed into a queue while
// a gate settles the queue waits for that settlement (the queue row's
// lock): it is not among the messages handed over, and the queue gets it
// afterwards, behind the rest, in Seq order.
func TestPostgresCommitWaitsForSettle(t *testing.T) {
	schemaURL := testenv.PostgresSchemaURL(t)
	settler := MustOpen(t, Options{DatabaseURL: schemaURL})
	// The committing gate names its connections, so the test can see one
	// wait for a lock.
	app := testenv.Unique("commit")
	committer := MustOpen(t, Options{DatabaseURL: withApplicationName(t, schemaURL, app)})
	MustCommit(t, settler,
		heldRec("m1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, t0),
		heldRec("m2", "disk", ou1, "disk", gate.HoldDefer, 2, t0, t0))

	committed := make(chan error, 1)
	var handed [][]string
	n, err := settler.Settle(context.Background(), t0, 10, 10, func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		handed = heldIDs(due)
		go func() {
			_, err := committer.Commit(context.Background(), []gate.Record{heldRec("m3", "disk", ou1, "disk", gate.HoldDefer, 3, t0, t0)})
			committed <- err
		}()
		if err := waitForLockWait(ctx, settler, app); err != nil {
			return nil, err
		}
		select {
		case err := <-committed:
			return nil, fmt.Errorf("the commit into the queue being settled went through before the settlement: %v", err)
		default:
		}
		return []gate.Settlement{{MessageID: "m1", Kind: gate.SettleReleased, At: t0, Out: &gate.Forward{MessageID: "m1"}}}, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("Settle: %d, %v; want 1, nil", n, err)
	}
	if want := [][]string{{"m1", "m2"}}; !slices.EqualFunc(handed, want, slices.Equal) {
		t.Errorf("handed %v, want %v", handed, want)
	}
	select {
	case err := <-committed:
		if err != nil {
			t.Fatalf("the waiting commit: %v", err)
		}
	case <-time.After(conditionDeadline):
		t.Fatal("the commit still waits after the settlement ended")
	}
	handedAfter, _ := settleAll(t, settler, t0, func([][]gate.Held) []gate.Settlement { return nil })
	if want := [][]string{{"m2", "m3"}}; !slices.EqualFunc(heldIDs(handedAfter), want, slices.Equal) {
		t.Errorf("next round: handed %v, want %v", heldIDs(handedAfter), want)
	}
}

// withApplicationName is schemaURL with its connections named app, so that
// pg_stat_activity tells them apart.
func withApplicationName(t *testing.T, schemaURL, app string) string {
	t.Helper()
	u, err := url.Parse(schemaURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// waitForLockWait waits until a session of application app waits for a
// lock.
func waitForLockWait(ctx context.Context, s *Store, app string) error {
	deadline := time.Now().Add(conditionDeadline)
	for {
		var n int
		err := s.sqlDB.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
	WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&n)
		if err != nil {
			return fmt.Errorf("read pg_stat_activity: %w", err)
		}
		if n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the commit into the queue being settled never waited for its lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPostgresHoldCommitsAndSettlesAtOnce: gates committing held messages
// into shared queues and scenes while two others settle them: no deadlock
// (it would surface as an error), every message released exactly once.
// The first message handed over twice ends the test at once.
//
// This test and TestPostgresSettleConcurrent are what guard against a
// doubled release: the end-to-end tests' "once each" checks read GATE_OUT,
// whose duplicate window drops a second publish of the same message id, so
// a message released twice within it still reaches GATE_OUT once.
func TestPostgresHoldCommitsAndSettlesAtOnce(t *testing.T) {
	opts := postgresOptions(t)
	s := MustOpen(t, opts)
	const committers, batches, perBatch = 4, 25, 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []error
		done   = make(chan struct{})
		counts = map[string]int{}
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var commitWG sync.WaitGroup
	for c := range committers {
		store := MustOpen(t, opts)
		commitWG.Go(func() {
			for b := range batches {
				var recs []gate.Record
				for i := range perBatch {
					n := (c*batches+b)*perBatch + i
					recipient := fmt.Sprintf("open_id:ou_%d", n%7)
					scene := fmt.Sprintf("scene%d", n%3)
					recs = append(recs, heldRec(fmt.Sprintf("m%05d", n), scene, recipient, scene, gate.HoldDefer, uint64(n), t0, t0))
				}
				if _, err := store.Commit(ctx, recs); err != nil {
					fail(fmt.Errorf("commit: %w", err))
					return
				}
			}
		})
	}
	go func() { commitWG.Wait(); close(done) }()
	for range 2 {
		store := MustOpen(t, opts)
		wg.Go(func() {
			err := settleUntil(ctx, store, t0, done, func(h gate.Held) {
				mu.Lock()
				counts[h.MessageID]++
				again := counts[h.MessageID] == 2
				mu.Unlock()
				if again {
					// A doubled release: fail now, not when the context
					// ends (a message never leaving held is handed over
					// round after round, so settleUntil would not return).
					fail(fmt.Errorf("%s handed over a second time", h.MessageID))
					cancel()
				}
			})
			if err != nil {
				fail(fmt.Errorf("settle: %w", err))
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	total := committers * batches * perBatch
	if len(counts) != total {
		t.Errorf("%d messages handed over, want %d", len(counts), total)
	}
	for id, n := range counts {
		if n != 1 {
			t.Errorf("%s handed over %d times, want once", id, n)
		}
	}
	var released int64
	for i := range 3 {
		released += summaryOf(t, s, fmt.Sprintf("scene%d", i)).Released
	}
	if released != int64(total) || countRows(t, s, "held")+countRows(t, s, "held_queues") != 0 {
		t.Errorf("released %d, want %d, and no held or queue rows left", released, total)
	}
}

// settleUntil settles store's due queues at now, three queues of up to five
// messages a round, releasing every message it is handed after passing it
// to seen, until a round after done is closed finds nothing: after the last
// commit, that means nothing is left.
func settleUntil(ctx context.Context, store *Store, now time.Time, done <-chan struct{}, seen func(gate.Held)) error {
	for {
		finished := false
		select {
		case <-done:
			finished = true
		default:
		}
		n, err := store.Settle(ctx, now, 3, 5, func(_ context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
			for _, q := range due {
				for _, h := range q {
					seen(h)
				}
			}
			return releaseAll(due, now), nil
		})
		if err != nil || (finished && n == 0) {
			return err
		}
	}
}
