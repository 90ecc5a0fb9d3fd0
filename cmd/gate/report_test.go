package main

import (
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
)

// TestSummaryTableShowsHeldCountersWhenAny: the table of a gate that held
// nothing is the table it always was; once any message was deferred or
// digested, the four held columns appear, for every scene and the total.
func TestSummaryTableShowsHeldCountersWhenAny(t *testing.T) {
	plain := []gate.SceneSummary{{Scene: "alert.disk", Received: 3, Forwarded: 1, Suppressed: 2}}
	var out strings.Builder
	if err := printSummary(&out, "table", httpapi.Summary{Scenes: plain, Total: httpapi.Total(plain)}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "deferred") || !strings.Contains(out.String(), "parked") {
		t.Errorf("table of a gate that held nothing:\n%s\nwant the columns up to parked, no held ones", out.String())
	}

	held := []gate.SceneSummary{
		{Scene: "alert.disk", Received: 4, Forwarded: 1, Deferred: 3, Released: 2, FellBack: 1},
		{Scene: "ci.build", Received: 5, Forwarded: 1, Digested: 4},
	}
	out.Reset()
	if err := printSummary(&out, "table", httpapi.Summary{Scenes: held, Total: httpapi.Total(held)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	want := [][]string{
		{"scene", "received", "forwarded", "suppressed", "dropped", "invalid", "shadow_suppressed", "shadow_dropped",
			"forwarded_unchecked", "parked", "deferred", "digested", "released", "fell_back"},
		{"alert.disk", "4", "1", "0", "0", "0", "0", "0", "0", "0", "3", "0", "2", "1"},
		{"ci.build", "5", "1", "0", "0", "0", "0", "0", "0", "0", "0", "4", "0", "0"},
		{"*", "9", "2", "0", "0", "0", "0", "0", "0", "0", "3", "4", "2", "1"},
	}
	if len(lines) != len(want) {
		t.Fatalf("table:\n%s\nwant %d lines", out.String(), len(want))
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("table line %d: got %q, want %q", i, got, w)
		}
	}

	out.Reset()
	if err := printSummary(&out, "csv", httpapi.Summary{Scenes: plain, Total: httpapi.Total(plain)}); err != nil {
		t.Fatal(err)
	}
	if want := "scene,received,forwarded,suppressed,dropped,invalid,shadow_suppressed,shadow_dropped,forwarded_unchecked,parked,deferred,digested,released,fell_back\nalert.disk,3,1,2,0,0,0,0,0,0,0,0,0,0\n"; out.String() != want {
		t.Errorf("csv:\n%s\nwant every column, held ones too:\n%s", out.String(), want)
	}
}

// TestSuppressionOutcome: each audit row says what became of its message.
func TestSuppressionOutcome(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 30, 0, 0, time.FixedZone("CST", 8*3600))
	for _, tt := range []struct {
		row  gate.Suppression
		want string
	}{
		{gate.Suppression{}, "suppressed"},
		{gate.Suppression{Shadow: true}, "forwarded (shadow)"},
		{gate.Suppression{HeldAs: gate.HoldDefer}, "deferred, still held"},
		{gate.Suppression{HeldAs: gate.HoldDigest}, "held for a digest, still held"},
		{gate.Suppression{HeldAs: gate.HoldDefer, Settled: gate.SettleReleased, SettledAt: at}, "deferred → released at 2026-11-24T01:30:00Z"},
		{gate.Suppression{HeldAs: gate.HoldDefer, Settled: gate.SettleFellBack, Fallback: gate.ActionDrop, SettledAt: at},
			"deferred → fell back to drop at 2026-11-24T01:30:00Z"},
		{gate.Suppression{HeldAs: gate.HoldDigest, Settled: gate.SettleDigested, DigestID: "dg-1", SettledAt: at},
			"in digest dg-1 sent at 2026-11-24T01:30:00Z"},
		// A deferred message past max_defer with defer_fallback: digest.
		{gate.Suppression{HeldAs: gate.HoldDefer, Settled: gate.SettleDigested, DigestID: "dg-2", SettledAt: at},
			"in digest dg-2 sent at 2026-11-24T01:30:00Z"},
	} {
		if got := outcome(tt.row); got != tt.want {
			t.Errorf("outcome of %+v: got %q, want %q", tt.row, got, tt.want)
		}
		row := suppressionRow(tt.row)
		if len(row) != len(suppressionHeader) || row[len(row)-1] != tt.want {
			t.Errorf("row %q: want %d cells ending in %q", row, len(suppressionHeader), tt.want)
		}
	}
	quiet := gate.Suppression{Reason: gate.ReasonQuietHours, Scope: gate.ScopeQuietHours}
	if got := suppressionRow(quiet)[4]; got != "quiet_hours" {
		t.Errorf("limit of a quiet-hours row: got %q, want quiet_hours", got)
	}
	cal := gate.Suppression{Reason: gate.ReasonLimit, Scope: gate.ScopeScene, LimitMax: 3}
	if got := suppressionRow(cal)[4]; got != "scene 3/calendar period" {
		t.Errorf("limit of a calendar-limit row: got %q", got)
	}
}
