package inmem

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/storetest"
)

// fakeClock starts off a millisecond boundary, so truncation to the store's
// resolution is exercised.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2031, 3, 4, 5, 6, 7, 890_123_456, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to a later instant.
func (c *fakeClock) Set(t *testing.T, to time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if to.Before(c.now) {
		t.Fatalf("fake clock: cannot go back from %s to %s", c.now, to)
	}
	c.now = to
}

// count returns how many windows and rate states s holds for recipient:
// what the Redis store holds as keys.
func (s *Store) count(recipient string) (keys int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.windows {
		if k.recipient == recipient {
			keys++
		}
	}
	for k := range s.rates {
		if k.recipient == recipient {
			keys++
		}
	}
	return keys
}

// members returns the entries of one window: a scene's, or with scene "",
// the recipient cap window.
func (s *Store) members(recipient, scene string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.windows[windowKey{recipient: recipient, scene: scene, capWindow: scene == ""}]
	if w == nil {
		return 0
	}
	return len(w.entries)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, harness())
}

// harness opens stores on a fake clock of their own.
func harness() storetest.Harness {
	return storetest.Harness{
		Open: func(t *testing.T) storetest.Backend {
			clock := newFakeClock()
			s := New(Options{Now: clock.Now})
			return storetest.Backend{
				Store:  s,
				Client: func(*testing.T) gate.WindowStore { return s },
				Sleep:  clock.Advance,
				Now:    func(*testing.T) time.Time { return clock.Now() },
				Keys: func(_ *testing.T, recipient string) int {
					s.Sweep() // what Admit does every SweepEvery
					return s.count(recipient)
				},
				Members: func(_ *testing.T, recipient, scene string) int { return s.members(recipient, scene) },
				Travel:  clock.Set,
			}
		},
	}
}

// Admit sweeps expired windows by itself once SweepEvery has passed, so
// recipients that never come back do not pin memory.
func TestAdmitSweeps(t *testing.T) {
	clock := newFakeClock()
	s := New(Options{Now: clock.Now, SweepEvery: 10 * time.Second})
	ctx := context.Background()
	one := func(recipient string) gate.AdmitRequest {
		return gate.AdmitRequest{
			ID: recipient + "-m", Recipient: recipient, Scene: "s",
			Limits: []gate.Limit{{Window: time.Second, Max: 1}},
			Caps:   []gate.Limit{{Window: time.Second, Max: 1}},
		}
	}
	for _, r := range []string{"open_id:a", "open_id:b", "open_id:c"} {
		if _, err := s.Admit(ctx, []gate.AdmitRequest{one(r)}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := s.Len(), 6; got != want {
		t.Fatalf("Len after 3 recipients = %d, want %d", got, want)
	}
	clock.Advance(5 * time.Second) // expired, but no sweep is due yet
	if _, err := s.Admit(ctx, []gate.AdmitRequest{one("open_id:d")}); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Len(), 8; got != want {
		t.Fatalf("Len before the sweep is due = %d, want %d", got, want)
	}
	clock.Advance(5 * time.Second)
	if _, err := s.Admit(ctx, []gate.AdmitRequest{one("open_id:e")}); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Len(), 2; got != want {
		t.Fatalf("Len after the due sweep = %d, want %d (e's windows only)", got, want)
	}
}

// A rejection touches nothing but the trimming of expired members.
func TestRejectionWritesNothing(t *testing.T) {
	clock := newFakeClock()
	s := New(Options{Now: clock.Now})
	ctx := context.Background()
	q := gate.AdmitRequest{ID: "a", Recipient: "open_id:x", Scene: "s", Limits: []gate.Limit{{Window: time.Minute, Max: 1}}}
	if _, err := s.Admit(ctx, []gate.AdmitRequest{q}); err != nil {
		t.Fatal(err)
	}
	k := windowKey{recipient: q.Recipient, scene: q.Scene}
	before := *s.windows[k]
	before.entries = append([]entry(nil), before.entries...)
	clock.Advance(time.Second)
	q.ID = "b"
	res, err := s.Admit(ctx, []gate.AdmitRequest{q})
	if err != nil || res[0].Admitted {
		t.Fatalf("b = %+v, %v; want rejected", res, err)
	}
	after := s.windows[k]
	if after.expires != before.expires || len(after.entries) != 1 || after.entries[0] != before.entries[0] {
		t.Fatalf("window after a rejection = %+v, want it unchanged: %+v", *after, before)
	}
}
