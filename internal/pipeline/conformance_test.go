package pipeline

import (
	"cmp"
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/porttest"
)

// The pipeline's fakes run the suites the real stores run, so that a test
// leaning on a fake leans on the stores' meaning. Where a fake is
// deliberately simpler, the harness says so (TakesBadRecords) or a thin
// wrapper below supplies what the fake leaves out; each is named here.
func TestFakesConform(t *testing.T) {
	// ledger takes any record (the pipeline makes only valid ones): the
	// suite's BadRecords case reports itself skipped for it.
	t.Run("AuditLog", func(t *testing.T) {
		porttest.RunAuditLog(t, porttest.AuditHarness{
			Open:            func(t *testing.T) gate.AuditLog { return retriedLedger{newLedger(t)} },
			TakesBadRecords: true,
		})
	})
	t.Run("HoldStore", func(t *testing.T) {
		porttest.RunHoldStore(t, porttest.HoldHarness{Open: func(t *testing.T) (gate.AuditLog, gate.HoldStore) {
			l := newLedger(t)
			l.holds = newHoldBox(t)
			return retriedLedger{l}, soonestFirst{l.holds}
		}})
	})
	t.Run("PreferenceStore", func(t *testing.T) {
		porttest.RunPreferenceStore(t, porttest.PreferenceHarness{Open: func(t *testing.T) gate.PreferenceStore {
			return &writablePrefs{prefBox: &prefBox{prefs: map[string]gate.Preferences{}}, changed: map[string]time.Time{}}
		}})
	})
}

// retriedLedger lets the suite commit a key again: ledger fails a test that
// commits one twice unless told, since in the pipeline's tests that means
// an id decided twice; the suite retries on purpose.
type retriedLedger struct{ *ledger }

func (l retriedLedger) Commit(ctx context.Context, recs []gate.Record) ([]string, error) {
	l.mu.Lock()
	for _, r := range recs {
		l.again[r.Key] = true
	}
	l.mu.Unlock()
	return l.ledger.Commit(ctx, recs)
}

// soonestFirst puts right two things holdBox does more simply than the
// store. Waiting: the store leaves a queue without messages out of the
// answer, holdBox names it false. Settle: the store hands over the due
// queues soonest due first and takes maxQueues of those, holdBox takes
// the first maxQueues in queue order; the wrapper lets holdBox hand over
// every due queue and passes settle the soonest maxQueues of them, so the
// settlements only ever name messages holdBox handed over.
type soonestFirst struct{ *holdBox }

func (w soonestFirst) Waiting(ctx context.Context, qs []gate.Queue) (map[gate.Queue]bool, error) {
	got, err := w.holdBox.Waiting(ctx, qs)
	for q, ok := range got {
		if !ok {
			delete(got, q)
		}
	}
	return got, err
}

func (w soonestFirst) Settle(ctx context.Context, now time.Time, maxQueues, perQueue int,
	settle func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error)) (int, error) {
	return w.holdBox.Settle(ctx, now, math.MaxInt, perQueue, func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		due = slices.Clone(due)
		slices.SortStableFunc(due, func(x, y []gate.Held) int { return x[0].DueAt.Compare(y[0].DueAt) })
		return settle(ctx, due[:min(len(due), maxQueues)])
	})
}

// writablePrefs gives prefBox, which only answers lookups, the writes and
// the change log of a store, on a clock of microseconds as PostgreSQL
// keeps: PutPreferences checks and stamps, DeletePreferences of a
// recipient with preferences leaves a tombstone, and PreferenceChanges
// lists each recipient's latest change after since, oldest first, as the
// store's one row per recipient does.
type writablePrefs struct {
	*prefBox
	changed map[string]time.Time // guarded by prefBox.mu
	last    time.Time
}

// now is the store's clock: never backwards, in microseconds. Call with
// mu held.
func (s *writablePrefs) now() time.Time {
	t := time.Now().UTC().Truncate(time.Microsecond)
	if t.Before(s.last) {
		t = s.last
	}
	s.last = t
	return t
}

func (s *writablePrefs) PutPreferences(_ context.Context, p gate.Preferences) (gate.Preferences, error) {
	if err := p.Check(); err != nil {
		return gate.Preferences{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p.MutedUntil = p.MutedUntil.Truncate(time.Microsecond)
	p.UpdatedAt = s.now()
	s.prefs[p.Recipient] = p
	s.changed[p.Recipient] = p.UpdatedAt
	return p, nil
}

func (s *writablePrefs) DeletePreferences(_ context.Context, recipient string) error {
	if err := gate.CheckRecipient(recipient); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.prefs[recipient]; ok {
		delete(s.prefs, recipient)
		s.changed[recipient] = s.now()
	}
	return nil
}

func (s *writablePrefs) PreferenceChanges(_ context.Context, since time.Time, limit int) ([]gate.PreferenceChange, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if since.IsZero() {
		return nil, now, nil
	}
	var out []gate.PreferenceChange
	for r, at := range s.changed {
		if at.After(since) {
			out = append(out, gate.PreferenceChange{Recipient: r, At: at})
		}
	}
	slices.SortFunc(out, func(x, y gate.PreferenceChange) int {
		return cmp.Or(x.At.Compare(y.At), cmp.Compare(x.Recipient, y.Recipient))
	})
	return out[:min(len(out), max(limit, 0))], now, nil
}
