package main

import (
	"encoding/csv"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// rateRules puts rate limits (GCRA) where a deployment would: alone on a
// scene, beside a sliding window, with on_exceed defer, and in
// recipient_caps. The cap's burst of 4 is above every scene's, so that it
// refuses only what the scene limits let through.
const rateRules = `
recipient_caps:
  - {rate: 1/10m, burst: 4}
scenes:
  r.burst:
    limits: [{rate: 1/10m, burst: 3}]
    on_exceed: suppress
  r.mixed:
    limits: [{rate: 1/1m, burst: 3}, {window: 1h, max: 2}]
    on_exceed: suppress
  r.free:
    limits: [{window: 1h, max: 100}]
    on_exceed: suppress
  r.defer:
    limits: [{rate: 1/10m}]
    on_exceed: defer
  r.tick:
    limits: [{window: 2s, max: 1}]
    on_exceed: defer
`

// rateInterval is the emission interval of r.burst, r.defer and the cap.
const rateInterval = 10 * time.Minute

// TestRateLimitE2E proves rate limits through a running gate on both
// stacks. Ten minutes never pass: every time is asserted against the
// decided_at and next_allowed_at the gate reports, which are the store's
// clock (Redis TIME, or the in-process store's), by the GCRA's algebra:
// with interval T and burst B, a refusal's next_allowed_at is the limit's
// theoretical arrival time less (B-1)·T, and after B admissions starting at
// t1 that is t1 + T.
func TestRateLimitE2E(t *testing.T) {
	t.Parallel()
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, rateRules)
		g := e.start(nil)
		c := e.client()
		t.Run("burst", func(t *testing.T) { rateBurst(t, g, c) })
		t.Run("window and cap", func(t *testing.T) { rateWindowAndCap(t, g, c) })
		t.Run("defer", func(t *testing.T) { rateDefer(t, g, c) })
	})
}

// rateBurst: five messages of one recipient under {rate: 1/10m, burst: 3}:
// the first three are forwarded, the last two suppressed by the rate
// limit, which reopens one interval after the first admission for both.
func rateBurst(t *testing.T, g *gateProc, c *client) {
	to := testenv.Unique("rate")
	ms := make([]msg, 5)
	for i, id := range ids(to, 5) {
		ms[i] = msg{ID: id, Scene: "r.burst", To: to}
	}
	// The store's clock is this machine's (Redis is on loopback): the
	// first admission is no earlier than this, to the millisecond the
	// stores keep.
	sent := time.Now().Truncate(time.Millisecond)
	c.send(ms...)

	if got, _ := c.forwarded(to); !slices.Equal(got, []string{ms[0].ID, ms[1].ID, ms[2].ID}) {
		t.Errorf("gate.out for %s: %v, want the burst %s, %s, %s", to, got, ms[0].ID, ms[1].ID, ms[2].ID)
	}
	rows := g.rows(to)
	if len(rows) != 2 {
		t.Fatalf("audit rows of %s: %d (%v), want 2, of the last two messages", to, len(rows), keysOf(rows))
	}
	fourth, fifth := rows[ms[3].ID], rows[ms[4].ID]
	for _, r := range []gate.Suppression{fourth, fifth} {
		if r.Reason != gate.ReasonLimit || r.Scope != gate.ScopeScene || time.Duration(r.LimitRate) != rateInterval ||
			r.LimitMax != 3 || r.LimitWindow != 0 || r.LimitCalendar != "" || r.CountSeen != 3 || r.HeldAs != "" {
			t.Errorf("row of %s: %+v; want reason limit, scope scene, limit_rate 10m, limit_max 3 (the burst), limit_window 0s, count_seen 3", r.MessageID, r)
		}
	}
	// Nothing was admitted between the two refusals: one theoretical
	// arrival time, one instant at which the limit reopens.
	if !fourth.NextAllowedAt.Equal(fifth.NextAllowedAt) {
		t.Errorf("next_allowed_at of %s %s and of %s %s: want the same instant", ms[3].ID, fourth.NextAllowedAt, ms[4].ID, fifth.NextAllowedAt)
	}
	// next_allowed_at = t1 + T, t1 the first admission's instant, which
	// came after sending began and before the fourth was decided.
	t1 := fourth.NextAllowedAt.Add(-rateInterval)
	if t1.Before(sent) || t1.After(fourth.DecidedAt) || fifth.DecidedAt.Before(fourth.DecidedAt) {
		t.Errorf("next_allowed_at %s less 10m is %s: want the first admission's instant, between sending (%s) and the fourth's decision (%s)",
			fourth.NextAllowedAt, t1, sent, fourth.DecidedAt)
	}

	// The same rows as the CSV export and gate report write them.
	code, body := g.get("/v1/suppressions.csv", recipientQuery(to), "")
	recs, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
	if code != http.StatusOK || err != nil || len(recs) != 3 {
		t.Fatalf("suppressions.csv of %s: %d, %v, %d lines; want 200 and 2 rows:\n%s", to, code, err, len(recs), body)
	}
	last := len(recs[0]) - 1
	for _, rec := range recs[1:] {
		if recs[0][last] != "limit_rate" || rec[last] != "10m" || rec[7] != "0s" || rec[8] != "3" {
			t.Errorf("suppressions.csv row %q under %q: want limit_window 0s, limit_max 3 and a last column limit_rate 10m", rec, recs[0])
		}
	}
	var out, errOut strings.Builder
	if err := run(t.Context(), []string{"report", "suppressions", "--recipient", "open_id:" + to, "--format", "csv", "--server", g.base},
		func(string) string { return "" }, nil, &out, &errOut); err != nil {
		t.Fatalf("gate report suppressions: %v (%s)", err, errOut.String())
	}
	recs, err = csv.NewReader(strings.NewReader(out.String())).ReadAll()
	if err != nil || len(recs) != 3 || recs[1][4] != "scene 3 burst, 1/10m" || recs[2][4] != "scene 3 burst, 1/10m" {
		t.Errorf("gate report suppressions of %s: %v\n%s\nwant two rows whose limit reads \"scene 3 burst, 1/10m\"", to, err, out.String())
	}
}

// rateWindowAndCap: r.mixed's window (2 an hour) refuses before its rate
// (burst 3) does, and what it refuses takes no slot of the recipient cap's
// rate, which then refuses the fifth admission overall. The window's row
// names the first admission's instant exactly (its next_allowed_at is that
// message's time plus 1h), and the cap's must be that instant plus one
// interval: after four admissions from t1 its arrival time is t1 + 4T, less
// (4-1)·T.
func rateWindowAndCap(t *testing.T, g *gateProc, c *client) {
	to := testenv.Unique("ratecap")
	mixed := ids(to+"-mixed", 4)
	free := ids(to+"-free", 3)
	var ms []msg
	for _, id := range mixed {
		ms = append(ms, msg{ID: id, Scene: "r.mixed", To: to})
	}
	c.send(ms...)
	// Two admitted, two refused by the window: two cap slots are in use,
	// not four, so two more messages of another scene pass the cap.
	ms = ms[:0]
	for _, id := range free {
		ms = append(ms, msg{ID: id, Scene: "r.free", To: to})
	}
	c.send(ms...)

	want := []string{mixed[0], mixed[1], free[0], free[1]}
	if got, _ := c.forwarded(to); !slices.Equal(got, want) {
		t.Errorf("gate.out for %s: %v, want %v: refusals of the window must take no slot of the cap", to, got, want)
	}
	rows := g.rows(to)
	if len(rows) != 3 {
		t.Fatalf("audit rows of %s: %v, want %s, %s and %s", to, keysOf(rows), mixed[2], mixed[3], free[2])
	}
	var t1 time.Time
	for _, id := range mixed[2:] {
		r := rows[id]
		if r.Scope != gate.ScopeScene || time.Duration(r.LimitWindow) != time.Hour || r.LimitMax != 2 || r.LimitRate != 0 || r.CountSeen != 2 {
			t.Errorf("row of %s: %+v; want the scene's window 2/1h, without limit_rate", id, r)
		}
		t1 = r.NextAllowedAt.Add(-time.Hour)
	}
	capRow := rows[free[2]]
	if capRow.Scope != gate.ScopeRecipient || time.Duration(capRow.LimitRate) != rateInterval || capRow.LimitMax != 4 ||
		capRow.LimitWindow != 0 || capRow.CountSeen != 4 {
		t.Errorf("row of %s: %+v; want the recipient cap, limit_rate 10m, limit_max 4, count_seen 4", free[2], capRow)
	}
	if want := t1.Add(rateInterval); !capRow.NextAllowedAt.Equal(want) {
		t.Errorf("cap's next_allowed_at %s, want the first admission's instant %s (the window's next_allowed_at less 1h) plus 10m, %s",
			capRow.NextAllowedAt, t1, want)
	}
	if !capRow.DecidedAt.After(t1) || !capRow.NextAllowedAt.After(capRow.DecidedAt) {
		t.Errorf("cap refusal decided at %s, reopening at %s: want both after the first admission %s, the reopening later",
			capRow.DecidedAt, capRow.NextAllowedAt, t1)
	}
}

// rateDefer: under {rate: 1/10m} with on_exceed defer the second message is
// held until the limit reopens, one interval after the first. A message of
// another scene deferred for two seconds is released meanwhile, so the
// releaser has run past the held one's decision; the held one is still
// held, and nothing but the first is on gate.out.
func rateDefer(t *testing.T, g *gateProc, c *client) {
	to := testenv.Unique("ratedefer")
	ms := series(to, "r.defer", 2)
	ticks := series(to+"-tick", "r.tick", 2)
	for i := range ticks {
		ticks[i].To = to // the same recipient, so the same cap and hold tables
	}
	c.sendHeld(ms...)
	c.sendHeld(ticks...)

	row := g.waitRows(to, 30*time.Second, "the second message held", held(gate.HoldDefer, ms[1].ID))[ms[1].ID]
	if row.Scope != gate.ScopeScene || time.Duration(row.LimitRate) != rateInterval || row.LimitMax != 1 || row.CountSeen != 1 {
		t.Errorf("row of %s: %+v; want the scene's rate limit 1/10m, burst 1, one slot in use", ms[1].ID, row)
	}
	if wait := row.NextAllowedAt.Sub(row.DecidedAt); wait <= 0 || wait > rateInterval {
		t.Errorf("%s decided at %s is held until %s: want it held until the limit reopens, within 10m of the decision and after it",
			ms[1].ID, row.DecidedAt, row.NextAllowedAt)
	}

	released := c.waitOut(to, 3, time.Minute, nil)
	if got, want := msgIDs(released), []string{ms[0].ID, ticks[0].ID, ticks[1].ID}; !slices.Equal(got, want) {
		t.Errorf("gate.out for %s: %v, want %v (the rate-limited %s still held)", to, got, want, ms[1].ID)
	}
	g.waitRows(to, 30*time.Second, "the tick released", settled(gate.SettleReleased, ticks[1].ID))
	rows := g.rows(to)
	if r := rows[ms[1].ID]; r.HeldAs != gate.HoldDefer || r.Settled != "" || !r.NextAllowedAt.Equal(row.NextAllowedAt) {
		t.Errorf("after a release pass, row of %s: %+v; want it still held until %s", ms[1].ID, r, row.NextAllowedAt)
	}
	if got := c.outFor(to); len(got) != 3 {
		t.Errorf("gate.out for %s after a release pass: %v, want 3 messages, not the rate-limited one", to, msgIDs(got))
	}
	if s := g.summary()["r.defer"]; s.Received != 2 || s.Forwarded != 1 || s.Deferred != 1 || s.Released != 0 {
		t.Errorf("r.defer summary = %+v, want received 2, forwarded 1, deferred 1, released 0", s)
	}
}
