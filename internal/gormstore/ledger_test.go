package gormstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// testLedgerReads: what Commit claims, the ledger gives back in full, by key
// and by range, oldest first across pages, ties in key order.
func testLedgerReads(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	n := ledgerPage + 7 // two pages
	recs := make([]gate.Record, n)
	for i := range recs {
		at := t0.Add(time.Duration(i/2) * time.Millisecond) // pairs share a time
		recs[i] = gate.Record{Key: fmt.Sprintf("k%05d", n-i), Scene: "alerts", Recipient: fmt.Sprintf("open_id:ou_%d", i%3),
			Priority: gate.Priority("high"), TZ: "Asia/Shanghai", Outcome: gate.OutcomeForward, At: at}
	}
	recs[0].TZ, recs[0].Outcome = "", gate.OutcomeSuppress
	recs = append(recs, gate.Record{Key: "invalid:x", Outcome: gate.OutcomeInvalid, At: t0})
	for i := 0; i < len(recs); i += 1000 {
		MustCommit(t, s, recs[i:min(i+1000, len(recs))]...)
	}

	got, err := s.LedgerEntries(ctx, []string{recs[0].Key, recs[5].Key, "invalid:x", "never"})
	if err != nil {
		t.Fatalf("LedgerEntries: %v", err)
	}
	want := map[string]gate.LedgerEntry{
		recs[0].Key: {Key: recs[0].Key, Scene: "alerts", Recipient: "open_id:ou_0", Priority: "high", Outcome: gate.OutcomeSuppress, At: t0},
		recs[5].Key: {Key: recs[5].Key, Scene: "alerts", Recipient: "open_id:ou_2", Priority: "high", TZ: "Asia/Shanghai",
			Outcome: gate.OutcomeForward, At: t0.Add(2 * time.Millisecond)},
		"invalid:x": {Key: "invalid:x", Outcome: gate.OutcomeInvalid, At: t0},
	}
	if len(got) != len(want) {
		t.Fatalf("LedgerEntries = %d entries %v, want %d", len(got), got, len(want))
	}
	for k, w := range want {
		if g := got[k]; g != w || !g.At.Equal(w.At) {
			t.Errorf("LedgerEntries[%q] = %+v, want %+v", k, g, w)
		}
	}

	// The range [t0+1ms, t0+end) leaves out the first pair (and the invalid
	// row at t0), and reads the rest in pages.
	var (
		read  []gate.LedgerEntry
		pages int
	)
	err = s.LedgerRange(ctx, t0.Add(time.Millisecond), t0.Add(time.Hour), func(p []gate.LedgerEntry) error {
		pages++
		read = append(read, p...)
		return nil
	})
	if err != nil {
		t.Fatalf("LedgerRange: %v", err)
	}
	if pages != 2 || len(read) != n-2 {
		t.Fatalf("LedgerRange read %d entries in %d pages, want %d in 2", len(read), pages, n-2)
	}
	for i := 1; i < len(read); i++ {
		a, b := read[i-1], read[i]
		if b.At.Before(a.At) || (b.At.Equal(a.At) && b.Key <= a.Key) {
			t.Fatalf("LedgerRange entry %d (%s at %v) after %s at %v: want oldest first, ties by key", i, b.Key, b.At, a.Key, a.At)
		}
	}
	if e := read[0]; e.Recipient == "" || e.Scene != "alerts" || e.Priority != "high" {
		t.Errorf("LedgerRange first entry %+v: want its scene, recipient and priority", e)
	}

	stop := fmt.Errorf("stop")
	calls := 0
	err = s.LedgerRange(ctx, t0, t0.Add(time.Hour), func([]gate.LedgerEntry) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Errorf("LedgerRange with fn failing = %v after %d calls, want fn's error after 1", err, calls)
	}
}
