package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/redis/go-redis/v9"
)

// TestUpgradeUnderTraffic runs the gates of a rolling upgrade side by side
// on one Redis, with traffic: old gates (the script and keys before the
// recipient's key, testdata/admit_before.lua), new gates with LegacyKeys,
// and new gates without it. In every mix the upgrade steps allow (old with
// legacy; legacy with new once the old gates are gone) nobody is admitted
// over a limit. Old gates beside new ones without LegacyKeys must over-admit,
// which shows the test can see it.
func TestUpgradeUnderTraffic(t *testing.T) {
	raw := newClient(t)
	scene := []gate.Limit{{Window: time.Hour, Max: 3}}
	caps := []gate.Limit{{Window: time.Hour, Max: 5}}
	open := func(prefix string, lay layout) *Store {
		// A client per store: gates of one kind share nothing with the others.
		s := newStore(t, newClient(t), prefix)
		s.layout = lay
		if lay == layoutOld {
			s.script, s.source = redis.NewScript(oldSource), oldSource
		}
		return s
	}
	for _, mix := range []struct {
		name     string
		layouts  []layout
		wantOver bool
	}{
		{"old and legacy", []layout{layoutOld, layoutLegacy}, false},
		{"old, legacy and legacy", []layout{layoutOld, layoutLegacy, layoutLegacy}, false},
		{"legacy and new, the old gates gone", []layout{layoutLegacy, layoutOne}, false},
		{"legacy alone", []layout{layoutLegacy}, false},
		{"old and new without legacy keys", []layout{layoutOld, layoutOne}, true},
	} {
		t.Run(mix.name, func(t *testing.T) {
			prefix := newPrefix(t, raw)
			stores := make([]*Store, len(mix.layouts))
			for i, lay := range mix.layouts {
				stores[i] = open(prefix, lay)
			}
			const workers, batches, batch, recipients = 6, 20, 16, 8
			var (
				mu       sync.Mutex
				perScene = map[string]int{}
				perRcpt  = map[string]int{}
				wg       sync.WaitGroup
				errs     = make(chan error, workers)
			)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rnd := rand.New(rand.NewPCG(uint64(w), 27))
					for b := range batches {
						// Each batch goes to one gate, as a gate decides a
						// batch of deliveries; gates take turns at random.
						s := stores[rnd.IntN(len(stores))]
						reqs := make([]gate.AdmitRequest, batch)
						for i := range reqs {
							reqs[i] = gate.AdmitRequest{
								ID:        testenv.Unique(fmt.Sprintf("m%d-%d-%d", w, b, i)),
								Recipient: fmt.Sprintf("open_id:%s-%d", prefix, rnd.IntN(recipients)),
								Scene:     fmt.Sprintf("s%d", rnd.IntN(2)), Limits: scene, Caps: caps,
							}
						}
						res, err := s.Admit(context.Background(), reqs)
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						for i, r := range res {
							if r.Admitted && !r.Duplicate {
								perScene[reqs[i].Recipient+" "+reqs[i].Scene]++
								perRcpt[reqs[i].Recipient]++
							}
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			over := 0
			for k, n := range perScene {
				if n > scene[0].Max {
					over++
					if !mix.wantOver {
						t.Errorf("%s: %d admitted, over the scene's limit of %d", k, n, scene[0].Max)
					}
				}
			}
			for k, n := range perRcpt {
				if n > caps[0].Max {
					over++
					if !mix.wantOver {
						t.Errorf("%s: %d admitted, over the cap of %d", k, n, caps[0].Max)
					}
				}
			}
			if len(perRcpt) < recipients {
				t.Fatalf("%d recipients admitted anything, want %d", len(perRcpt), recipients)
			}
			t.Logf("%d windows over a limit", over)
			if mix.wantOver && over == 0 {
				t.Errorf("no one over a limit with old gates beside new ones without LegacyKeys: the test cannot see over-admissions")
			}
		})
	}
}
