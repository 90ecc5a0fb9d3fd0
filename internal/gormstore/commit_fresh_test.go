package gormstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// TestPostgresCommitOverlapWhileSettling: six gates commit batches drawn
// at random from the same 3,000 ids (forwarded, suppressed, and deferred
// into shared queues), so that most batches hold ids another committed
// first and go from commitFresh to commitPostgres, while a seventh settles
// the held messages. No deadlock (it would surface as an error), every id
// counted once, every held message handed over once.
func TestPostgresCommitOverlapWhileSettling(t *testing.T) {
	opts := postgresOptions(t)
	s := MustOpen(t, opts)
	const workers, rounds, universe = 6, 40, 3000
	recOf := func(n int) gate.Record {
		k := fmt.Sprintf("k%05d", n)
		scene := fmt.Sprintf("scene%d", n%4)
		switch n % 3 {
		case 0:
			return suppressed(k, scene, fmt.Sprintf("open_id:ou_%d", n%9), t0.Add(time.Duration(n)*time.Second))
		case 1:
			return heldRec(k, scene, fmt.Sprintf("open_id:ou_%d", n%5), scene, gate.HoldDefer, uint64(n), t0, t0.Add(time.Hour))
		}
		return record(k, scene, gate.OutcomeForward, t0.Add(time.Duration(n)*time.Second))
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds+1)
	drawn := make([][]int, workers)
	for w := range workers {
		store := MustOpen(t, opts)
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			for range rounds {
				var batch []gate.Record
				for range 100 {
					n := rnd.IntN(universe)
					drawn[w] = append(drawn[w], n)
					batch = append(batch, recOf(n))
				}
				if _, err := store.Commit(context.Background(), batch); err != nil {
					errs <- err
				}
			}
		})
	}
	done := make(chan struct{})
	handed := map[string]int{}
	var settleWG sync.WaitGroup
	settler := MustOpen(t, opts)
	settleWG.Go(func() {
		if err := settleUntil(context.Background(), settler, t0.Add(2*time.Hour), done, func(h gate.Held) { handed[h.MessageID]++ }); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(done)
	settleWG.Wait()
	close(errs)
	for id, n := range handed {
		if n != 1 {
			t.Errorf("%s handed %d times", id, n)
		}
	}
	for err := range errs {
		t.Error(err)
	}
	var want gate.SceneSummary
	seen := map[int]bool{}
	for _, ns := range drawn {
		for _, n := range ns {
			if !seen[n] {
				seen[n] = true
				count(&want, recOf(n))
			}
		}
	}
	var got gate.SceneSummary
	for i := range 4 {
		c := summaryOf(t, s, fmt.Sprintf("scene%d", i))
		for j, v := range c.Counters() {
			*got.Counters()[j] += *v
		}
	}
	want.Released = want.Deferred
	if got != want {
		t.Errorf("counters over all scenes:\n got %+v\nwant %+v", got, want)
	}
	if n := countRows(t, s, "decisions"); n != int64(len(seen)) {
		t.Errorf("decisions: %d rows, want %d", n, len(seen))
	}
	if n := countRows(t, s, "suppressions"); n != want.Suppressed+want.Deferred {
		t.Errorf("suppressions: %d rows, want %d", n, want.Suppressed+want.Deferred)
	}
	if n := countRows(t, s, "held") + countRows(t, s, "held_queues"); n != 0 || int64(len(handed)) != want.Deferred {
		t.Errorf("%d held and queue rows left, %d messages handed over, want 0 and %d", n, len(handed), want.Deferred)
	}
}
