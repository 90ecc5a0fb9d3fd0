package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
)

// concurrentTwoScenes has many clients admit for one recipient, alternating
// between two scenes each under scene, with capl as the recipient's cap
// (asking for the tightest limit when tightest is set). The cap binds
// before the two scenes can fill: capl.Max in all, at most scene.Max per
// scene.
func concurrentTwoScenes(t *testing.T, b Backend, scene, capl gate.Limit, tightest bool) {
	t.Helper()
	const workers, perWorker = 16, 4
	r := newRecipient()
	got, errs := hammer(t, b, workers, perWorker, func(w, i int) gate.AdmitRequest {
		q := req(r, fmt.Sprint("s", (w+i)%2), newID(), scene)
		q.Caps, q.WantTightest = limits(capl), tightest
		return q
	})
	if len(errs) > 0 {
		t.Fatalf("%d of %d calls failed, first: %v", len(errs), workers*perWorker, errs[0])
	}
	admitted := map[string]int{}
	for _, a := range got {
		admitted[a.scene]++
	}
	if total := admitted["s0"] + admitted["s1"]; total != capl.Max || admitted["s0"] > scene.Max || admitted["s1"] > scene.Max {
		t.Fatalf("admitted %v, want %d in all and at most %d per scene", admitted, capl.Max, scene.Max)
	}
}

type admission struct {
	scene string
	at    int64 // ms
}

// hammer runs workers goroutines, each deciding perWorker requests made by
// next, over four clients of the store, and returns the admissions.
func hammer(t *testing.T, b Backend, workers, perWorker int, next func(w, i int) gate.AdmitRequest) ([]admission, []error) {
	t.Helper()
	clients := []gate.WindowStore{b.Store, b.Client(t), b.Client(t), b.Client(t)}
	var (
		mu       sync.Mutex
		admitted []admission
		errs     []error
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			s := clients[w%len(clients)]
			for i := range perWorker {
				q := next(w, i)
				res, err := s.Admit(context.Background(), []gate.AdmitRequest{q})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if res[0].Admitted && !res[0].Duplicate {
					admitted = append(admitted, admission{q.Scene, res[0].Now.UnixMilli()})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return admitted, errs
}
