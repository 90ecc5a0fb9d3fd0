package main

import (
	"encoding/csv"
	"encoding/json"
	"slices"
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
	if want := "scene,received,forwarded,suppressed,dropped,invalid,shadow_suppressed,shadow_dropped,forwarded_unchecked,parked,deferred,digested,released,fell_back,refunded,cancelled\nalert.disk,3,1,2,0,0,0,0,0,0,0,0,0,0,0,0\n"; out.String() != want {
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
		// A deferred message past max_defer with defer_fallback: digest,
		// before and after its digest is sent.
		{gate.Suppression{HeldAs: gate.HoldDefer, Fallback: gate.ActionDigest}, "deferred → moved to a digest, still held"},
		{gate.Suppression{HeldAs: gate.HoldDefer, Fallback: gate.ActionDigest, Settled: gate.SettleDigested, DigestID: "dg-2", SettledAt: at},
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
	for cal, want := range map[gate.Calendar]string{
		gate.CalendarDay:  "scene 3/calendar day",
		gate.CalendarWeek: "scene 3/calendar week",
		"":                "scene 3/calendar period", // a row written before rows named the period
	} {
		row := gate.Suppression{Reason: gate.ReasonLimit, Scope: gate.ScopeScene, LimitMax: 3, LimitCalendar: cal}
		if got := suppressionRow(row)[4]; got != want {
			t.Errorf("limit of a calendar-limit row (%q): got %q, want %q", cal, got, want)
		}
	}
}

// TestSuppressionRowRateLimit: a row held back by a rate limit names its
// burst and rate in every format, where its window alone (0s) would read as
// a calendar limit's.
func TestSuppressionRowRateLimit(t *testing.T) {
	row := gate.Suppression{MessageID: "m4", Scene: "chat.mention", Reason: gate.ReasonLimit, Scope: gate.ScopeScene,
		LimitMax: 3, LimitRate: gate.Duration(10 * time.Minute), CountSeen: 3,
		DecidedAt: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC), NextAllowedAt: time.Date(2026, 11, 24, 9, 10, 0, 0, time.UTC)}
	caps := row
	caps.Scope, caps.LimitMax, caps.LimitRate = gate.ScopeRecipient, 10, gate.Duration(90*time.Second)
	for _, tt := range []struct {
		row  gate.Suppression
		want string
	}{
		{row, "scene 3 burst, 1/10m"},
		{caps, "recipient 10 burst, 1/1m30s"},
	} {
		if got := suppressionRow(tt.row)[4]; got != tt.want {
			t.Errorf("limit of a rate-limit row (%s every %v): got %q, want %q", tt.row.Scope, time.Duration(tt.row.LimitRate), got, tt.want)
		}
	}

	var out strings.Builder
	if err := printSuppressions(&out, "table", []gate.Suppression{row}); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "  scene 3 burst, 1/10m  ") {
		t.Errorf("table:\n%s\nwant one row whose limit column reads \"scene 3 burst, 1/10m\"", out.String())
	}

	out.Reset()
	if err := printSuppressions(&out, "csv", []gate.Suppression{row}); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(out.String())).ReadAll()
	if err != nil || len(recs) != 2 || recs[0][4] != "limit" || recs[1][4] != "scene 3 burst, 1/10m" || recs[1][5] != "3" ||
		recs[1][6] != "2026-11-24T09:10:00Z" {
		t.Errorf("csv: %v\n%s\nwant limit \"scene 3 burst, 1/10m\", count 3, next allowed 09:10", err, out.String())
	}

	// Text a producer chose never reaches a spreadsheet as a formula.
	hostile := row
	hostile.Recipient, hostile.Scene, hostile.MessageID = "=HYPERLINK(\"http://evil.example\")", "+scene", "\n@id"
	out.Reset()
	if err := printSuppressions(&out, "csv", []gate.Suppression{hostile}); err != nil {
		t.Fatal(err)
	}
	recs, err = csv.NewReader(strings.NewReader(out.String())).ReadAll()
	if err != nil || len(recs) != 2 || !slices.Contains(recs[1], "'"+hostile.Recipient) || !slices.Contains(recs[1], "'"+hostile.Scene) ||
		!slices.Contains(recs[1], "'"+hostile.MessageID) {
		t.Errorf("csv: %v\n%s\nwant the recipient, scene and id each with a leading '", err, out.String())
	}

	out.Reset()
	if err := printSuppressions(&out, "json", []gate.Suppression{row}); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil || len(got) != 1 ||
		got[0]["limit_rate"] != "10m" || got[0]["limit_max"] != 3.0 || got[0]["limit_window"] != "0s" {
		t.Errorf("json: %v\n%s\nwant limit_rate 10m, limit_max 3, limit_window 0s", err, out.String())
	}
}

// TestReportCLIHeldMessages runs `gate report` against a gate on each
// stack (PostgreSQL and the embedded SQLite) that has deferred, released,
// fallen back and digested real traffic: the summary table shows the held
// counters, and each held row of `gate report suppressions` says what became
// of its message, with the time and digest id the API gives.
func TestReportCLIHeldMessages(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, reportRules)
		const token = "cli-s3cret"
		g := e.start(map[string]string{"GATE_API_TOKEN": token})
		tr := reportTraffic(t, e.client())
		held := waitHeldSettled(t, g, tr)
		gateReport := func(args ...string) string {
			t.Helper()
			var out, errOut strings.Builder
			err := run(t.Context(), append([]string{"report"}, append(args, "--server", g.base)...),
				func(k string) string { return map[string]string{"GATE_API_TOKEN": token}[k] }, nil, &out, &errOut)
			if err != nil {
				t.Fatalf("gate report %v: %v (%s)", args, err, errOut.String())
			}
			return out.String()
		}

		summary := gateReport("summary")
		t.Logf("gate report summary:\n%s\ngate report suppressions --recipient open_id:%s:\n%s",
			summary, tr.gina, gateReport("suppressions", "--recipient", "open_id:"+tr.gina))
		table := strings.Split(strings.TrimRight(summary, "\n"), "\n")
		if got := strings.Fields(table[0]); !slices.Equal(got[len(got)-heldColumns:], summaryHeader[len(summaryHeader)-2-heldColumns:len(summaryHeader)-2]) {
			t.Errorf("summary table heads %q: want them to end in the held counters", got)
		}
		// scene received forwarded suppressed dropped invalid shadow×2 unchecked parked deferred digested released fell_back
		want := map[string]string{
			"remind.later":    "3 1 0 0 0 0 0 0 0 2 0 2 0",
			"remind.expiring": "2 1 0 0 0 0 0 0 0 1 0 0 1",
			"ci.build_failed": "3 1 0 0 0 0 0 0 0 0 2 0 0",
			"*":               "27 11 8 2 1 1 0 0 0 3 2 2 1",
		}
		for _, line := range table[1:] {
			f := strings.Fields(line)
			if w, ok := want[f[0]]; ok {
				if got := strings.Join(f[1:], " "); got != w {
					t.Errorf("summary of %s: %q, want %q", f[0], got, w)
				}
				delete(want, f[0])
			}
		}
		if len(want) > 0 {
			t.Errorf("summary table without rows for %v:\n%s", keysOf(want), strings.Join(table, "\n"))
		}

		// dan's shadow suppression was held back by a calendar limit: the
		// row names the period, not a window.
		out := gateReport("suppressions", "--recipient", "open_id:"+tr.dan, "--format", "csv")
		if recs, err := csv.NewReader(strings.NewReader(out)).ReadAll(); err != nil || len(recs) != 2 || recs[1][4] != "scene 1/calendar week" {
			t.Errorf("suppressions of %s: %v, want one row whose limit is \"scene 1/calendar week\":\n%s", tr.dan, err, out)
		}

		for to, prefix := range map[string]string{tr.erin: "deferred → released at ", tr.frank: "deferred → fell back to drop at ",
			tr.gina: "in digest "} {
			out := gateReport("suppressions", "--recipient", "open_id:"+to, "--format", "csv")
			recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
			if err != nil || len(recs) != len(held[to])+1 {
				t.Fatalf("suppressions of %s: %v, %d lines; want %d rows:\n%s", to, err, len(recs), len(held[to]), out)
			}
			for i, s := range held[to] {
				rec := recs[i+1]
				wantText := prefix + s.SettledAt.UTC().Format(time.RFC3339)
				if s.DigestID != "" {
					wantText = prefix + s.DigestID + " sent at " + s.SettledAt.UTC().Format(time.RFC3339)
				}
				if rec[3] != s.MessageID || rec[len(rec)-1] != wantText {
					t.Errorf("suppression row of %s: %q, want message %s saying %q", to, rec, s.MessageID, wantText)
				}
			}
		}
	})
}
