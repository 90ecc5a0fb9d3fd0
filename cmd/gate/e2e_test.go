package main

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// contractRules exercise every line of contract section 2 with windows of
// seconds.
const contractRules = `
unknown_scene: forward
recipient_caps:
  - {window: 30s, max: 4}
scenes:
  t.sliding:
    limits:
      - {window: 2s, max: 1}
      - {window: 8s, max: 2}
    on_exceed: suppress
  t.drop:
    limits: [{window: 1m, max: 1}]
    on_exceed: drop
  t.bypass:
    limits: [{window: 1m, max: 2}]
    on_exceed: suppress
    bypass_priorities: [urgent]
  t.shadow:
    limits: [{window: 1m, max: 1}]
    on_exceed: suppress
    shadow: true
  t.cap_a:
    limits: [{window: 1m, max: 10}]
  t.cap_b:
    limits: [{window: 1m, max: 10}]
  t.burst:
    limits: [{window: 1m, max: 3}]
    on_exceed: suppress
`

// TestContractWindowSemantics proves contract section 2 end to end through
// NATS, on the Redis + Postgres stack and on the embedded stack.
func TestContractWindowSemantics(t *testing.T) {
	for _, kind := range []stack{stackReal, stackEmbedded} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			testContract(t, kind)
		})
	}
}

func testContract(t *testing.T, kind stack) {
	e := newEnv(t, kind, contractRules)
	g := e.start(map[string]string{"GATE_API_TOKEN": "s3cret-token"})
	c := e.client()
	u := func(name string) string { return testenv.Unique(name) }

	t.Run("every limit must pass, over a sliding window", func(t *testing.T) {
		to := u("sliding")
		m := func(i int) msg { return msg{ID: fmt.Sprintf("%s-%d", to, i), Scene: "t.sliding", To: to} }
		c.send(m(1)) // admitted: counts 1/2s, 1/8s
		t0 := time.Now()
		c.send(m(2)) // 1/2s full
		time.Sleep(2100 * time.Millisecond)
		c.send(m(3)) // 2s window slid past m1: admitted; 8s window now holds 2
		c.send(m(4)) // 1/2s full again
		time.Sleep(2100 * time.Millisecond)
		c.send(m(5)) // 2s window free, but 2/8s is full
		got, _ := c.forwarded(to)
		if want := []string{m(1).ID, m(3).ID}; !slices.Equal(got, want) {
			t.Fatalf("forwarded %v, want %v", got, want)
		}
		rows := g.suppressions(recipientQuery(to))
		if len(rows) != 3 {
			t.Fatalf("got %d suppression rows, want 3 (m2, m4, m5): %+v", len(rows), rows)
		}
		// Newest first: m5 was held by the 8s limit with 2 seen.
		r5 := rows[0]
		if r5.MessageID != m(5).ID || r5.Scope != gate.ScopeScene || time.Duration(r5.LimitWindow) != 8*time.Second || r5.LimitMax != 2 || r5.CountSeen != 2 {
			t.Errorf("m5 row = %+v, want scene limit 2/8s with count 2", r5)
		}
		// The 8s window reopens when m1 leaves it, about 8s after m1.
		if d := r5.NextAllowedAt.Sub(t0); d < 7*time.Second || d > 9*time.Second {
			t.Errorf("m5 next_allowed_at is %s after m1, want about 8s", d)
		}
		if r2 := rows[2]; r2.MessageID != m(2).ID || time.Duration(r2.LimitWindow) != 2*time.Second || r2.CountSeen != 1 || r2.RulesVersion == "" {
			t.Errorf("m2 row = %+v, want scene limit 1/2s with count 1 and a rules version", r2)
		}
		if rows[0].Payload == "" || !strings.Contains(rows[0].Payload, m(5).ID) {
			t.Errorf("suppression row should keep the payload, got %q", rows[0].Payload)
		}
	})

	t.Run("only admitted messages count: a retry loop cannot lock a recipient out", func(t *testing.T) {
		to := u("retry")
		c.send(msg{ID: to + "-first", Scene: "t.sliding", To: to})
		start := time.Now()
		var admittedAfter time.Duration
		for i := 0; time.Since(start) < 4*time.Second; i++ {
			id := fmt.Sprintf("%s-retry-%d", to, i)
			c.send(msg{ID: id, Scene: "t.sliding", To: to})
			if got, _ := c.forwarded(to); len(got) == 2 {
				admittedAfter = time.Since(start)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if admittedAfter == 0 {
			t.Fatal("a recipient retried every 100ms was never admitted again: rejected attempts are filling the window")
		}
		if admittedAfter < 1900*time.Millisecond {
			t.Errorf("admitted again after %s, before the 2s window passed", admittedAfter)
		}
	})

	t.Run("drop writes nothing but counts", func(t *testing.T) {
		to := u("drop")
		c.send(msg{ID: to + "-1", Scene: "t.drop", To: to}, msg{ID: to + "-2", Scene: "t.drop", To: to})
		if got, _ := c.forwarded(to); !slices.Equal(got, []string{to + "-1"}) {
			t.Errorf("forwarded %v, want only the first", got)
		}
		if rows := g.suppressions(recipientQuery(to)); len(rows) != 0 {
			t.Errorf("drop wrote %d suppression rows, want none", len(rows))
		}
		if s := g.summary()["t.drop"]; s.Dropped != 1 || s.Forwarded != 1 || s.Received != 2 {
			t.Errorf("t.drop summary = %+v, want received 2, forwarded 1, dropped 1", s)
		}
	})

	t.Run("recipient caps hold across scenes but ignore unknown scenes", func(t *testing.T) {
		to := u("caps")
		c.send(
			msg{ID: to + "-1", Scene: "t.cap_a", To: to},
			msg{ID: to + "-2", Scene: "t.cap_b", To: to},
			msg{ID: to + "-3", Scene: "t.cap_a", To: to},
			msg{ID: to + "-u", Scene: "t.no_rule", To: to}, // neither counts nor is held
			msg{ID: to + "-4", Scene: "t.cap_b", To: to},   // 4th counted: cap is 4/30s
			msg{ID: to + "-5", Scene: "t.cap_a", To: to},   // held by the cap
			msg{ID: to + "-u2", Scene: "t.no_rule", To: to},
		)
		got, _ := c.forwarded(to)
		want := []string{to + "-1", to + "-2", to + "-3", to + "-u", to + "-4", to + "-u2"}
		if !slices.Equal(got, want) {
			t.Fatalf("forwarded %v, want %v", got, want)
		}
		rows := g.suppressions(recipientQuery(to))
		if len(rows) != 1 || rows[0].MessageID != to+"-5" || rows[0].Scope != gate.ScopeRecipient || rows[0].LimitMax != 4 || rows[0].CountSeen != 4 {
			t.Fatalf("rows = %+v, want one recipient-cap suppression of -5 with 4 seen", rows)
		}
	})

	t.Run("bypass priorities pass and still count", func(t *testing.T) {
		to := u("bypass")
		// The limit is 2/1m: -1 takes one slot, the urgent -2 the other, so
		// -3 is held. Had -2 not counted, -3 would pass.
		c.send(
			msg{ID: to + "-1", Scene: "t.bypass", To: to},
			msg{ID: to + "-2", Scene: "t.bypass", To: to, Priority: "urgent"},
			msg{ID: to + "-3", Scene: "t.bypass", To: to},
			msg{ID: to + "-4", Scene: "t.bypass", To: to, Priority: "urgent"}, // full, but urgent
		)
		got, hdrs := c.forwarded(to)
		if !slices.Equal(got, []string{to + "-1", to + "-2", to + "-4"}) {
			t.Fatalf("forwarded %v, want -1 and the urgent -2 and -4", got)
		}
		if hdrs[1].Get(natsbus.HeaderBypass) != "true" || hdrs[0].Get(natsbus.HeaderBypass) != "" {
			t.Errorf("only urgent forwards carry %s: true", natsbus.HeaderBypass)
		}
		rows := g.suppressions(recipientQuery(to))
		if len(rows) != 1 || rows[0].MessageID != to+"-3" || rows[0].CountSeen != 2 {
			t.Fatalf("rows = %+v, want -3 suppressed with the window full", rows)
		}
	})

	t.Run("shadow forwards everything, audits what enforcement would hold, keeps enforcement's window", func(t *testing.T) {
		to := u("shadow")
		c.send(
			msg{ID: to + "-1", Scene: "t.shadow", To: to},
			msg{ID: to + "-2", Scene: "t.shadow", To: to},
			msg{ID: to + "-3", Scene: "t.shadow", To: to},
		)
		got, hdrs := c.forwarded(to)
		if len(got) != 3 {
			t.Fatalf("shadow forwarded %v, want all 3", got)
		}
		if hdrs[0].Get(natsbus.HeaderShadow) != "" || hdrs[1].Get(natsbus.HeaderShadow) != "suppress" {
			t.Errorf("Gate-Shadow headers = %q, %q; want none on the first, suppress on the second",
				hdrs[0].Get(natsbus.HeaderShadow), hdrs[1].Get(natsbus.HeaderShadow))
		}
		rows := g.suppressions(recipientQuery(to))
		if len(rows) != 2 {
			t.Fatalf("got %d shadow rows, want 2", len(rows))
		}
		for _, r := range rows {
			// count 1 for both: the would-be-suppressed -2 did not fill the window.
			if !r.Shadow || r.CountSeen != 1 {
				t.Errorf("row %s shadow=%v count=%d, want shadow with count 1", r.MessageID, r.Shadow, r.CountSeen)
			}
		}
		if s := g.summary()["t.shadow"]; s.Forwarded < 3 || s.ShadowSuppressed < 2 || s.Suppressed != 0 {
			t.Errorf("t.shadow summary = %+v", s)
		}
	})

	t.Run("a message id is decided once", func(t *testing.T) {
		to := u("dup")
		before := g.summary()["t.sliding"]
		a := msg{ID: to + "-a", Scene: "t.sliding", To: to}
		b := msg{ID: to + "-b", Scene: "t.sliding", To: to}
		c.send(a, a, b)
		c.send(a, b) // again, in a later batch
		if got, _ := c.forwarded(to); !slices.Equal(got, []string{a.ID}) {
			t.Errorf("forwarded %v, want %s once", got, a.ID)
		}
		if rows := g.suppressions(recipientQuery(to)); len(rows) != 1 || rows[0].MessageID != b.ID {
			t.Errorf("rows = %+v, want one row for %s", rows, b.ID)
		}
		after := g.summary()["t.sliding"]
		if d := after.Received - before.Received; d != 2 {
			t.Errorf("received grew by %d, want 2 (duplicates are not counted)", d)
		}
	})

	t.Run("an id published again after its window reopened keeps its first outcome", func(t *testing.T) {
		// Without a Nats-Msg-Id header GATE_IN does not de-duplicate, so the
		// copy reaches the gate as a first delivery, which is not looked up
		// before deciding: the window admits it, the commit finds it decided.
		to := u("again")
		before := g.summary()["t.sliding"]
		m := func(i int) msg { return msg{ID: fmt.Sprintf("%s-%d", to, i), Scene: "t.sliding", To: to} }
		c.send(m(1)) // admitted
		c.send(m(2)) // suppressed: 1/2s is full
		time.Sleep(2100 * time.Millisecond)
		c.send(m(2)) // the 2s window has room now; m2 keeps its suppression
		c.send(m(3)) // admitted only if m2's second admission was taken out again
		if got, _ := c.forwarded(to); !slices.Equal(got, []string{m(1).ID, m(3).ID}) {
			t.Errorf("forwarded %v, want %s and %s", got, m(1).ID, m(3).ID)
		}
		if rows := g.suppressions(recipientQuery(to)); len(rows) != 1 || rows[0].MessageID != m(2).ID {
			t.Errorf("rows = %+v, want one row for %s", rows, m(2).ID)
		}
		after := g.summary()["t.sliding"]
		if d := after.Received - before.Received; d != 3 {
			t.Errorf("received grew by %d, want 3", d)
		}
	})

	t.Run("many messages at once never over-admit", func(t *testing.T) {
		to := u("burst")
		var ms []msg
		for _, id := range ids(to, 40) {
			ms = append(ms, msg{ID: id, Scene: "t.burst", To: to})
		}
		c.send(ms...)
		if got, _ := c.forwarded(to); len(got) != 3 {
			t.Errorf("forwarded %d of 40, want exactly 3", len(got))
		}
		if rows := g.suppressions(url.Values{"recipient": {"open_id:" + to}, "limit": {"100"}}); len(rows) != 37 {
			t.Errorf("got %d suppression rows, want 37", len(rows))
		}
	})

	t.Run("undecidable messages go to gate.dead with a reason", func(t *testing.T) {
		before := len(c.stored("GATE_DEAD"))
		c.publish([]byte("not json"), []byte(`{"id":"x","receive_id":"ou_1"}`))
		dead := c.stored("GATE_DEAD")[before:]
		if len(dead) != 2 {
			t.Fatalf("got %d dead letters, want 2", len(dead))
		}
		// Batches settle concurrently, so the two may be parked in either
		// order: find the one without a scene by its body.
		for _, d := range dead {
			if r := d.Header.Get(natsbus.HeaderError); strings.Contains(string(d.Data), `"id":"x"`) && !strings.Contains(r, "scene") {
				t.Errorf("Gate-Error = %q, want it to name the missing scene", r)
			}
		}
		var total int64
		for _, s := range g.summary() {
			total += s.Invalid
		}
		if total != 2 {
			t.Errorf("summary counts %d invalid, want 2", total)
		}
	})

	t.Run("the report API requires the token", func(t *testing.T) {
		for _, path := range []string{"/v1/suppressions", "/v1/reports/summary", "/v1/rules"} {
			if code, _ := g.get(path, nil, ""); code != http.StatusUnauthorized {
				t.Errorf("GET %s without token: %d, want 401", path, code)
			}
			if code, _ := g.get(path, nil, "wrong"); code != http.StatusUnauthorized {
				t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
			}
		}
		if code, _ := g.get("/healthz", nil, ""); code != http.StatusOK {
			t.Errorf("/healthz must stay open, got %d", code)
		}
		if code, body := g.get("/v1/suppressions", url.Values{"since": {"yesterday"}}, "s3cret-token"); code != http.StatusBadRequest {
			t.Errorf("bad since: %d %s, want 400", code, body)
		}
	})

	t.Run("rules reload from the file; unknown_scene applies", func(t *testing.T) {
		var before gate.RuleStatus
		g.api("/v1/rules", nil, &before)
		e.writeRules(strings.Replace(contractRules, "unknown_scene: forward", "unknown_scene: suppress", 1))
		waitFor(t, 5*time.Second, func() bool {
			var st gate.RuleStatus
			g.api("/v1/rules", nil, &st)
			return st.Version != before.Version
		})
		to := u("unknown")
		c.send(msg{ID: to + "-1", Scene: "t.nobody", To: to})
		rows := g.suppressions(recipientQuery(to))
		if len(rows) != 1 || rows[0].Reason != "unknown_scene" {
			t.Fatalf("rows = %+v, want one unknown_scene suppression", rows)
		}
		if got, _ := c.forwarded(to); len(got) != 0 {
			t.Errorf("unknown scene forwarded %v under unknown_scene: suppress", got)
		}
		// A broken document keeps the last good rules.
		e.writeRules("scenes: {t.x: {limits: [{window: 0s, max: 1}]}}")
		waitFor(t, 5*time.Second, func() bool {
			var st gate.RuleStatus
			g.api("/v1/rules", nil, &st)
			return st.LastError != ""
		})
		var st gate.RuleStatus
		g.api("/v1/rules", nil, &st)
		if st.Version == before.Version || st.Rules.UnknownScene != gate.ActionSuppress {
			t.Errorf("after a bad document the rules in force are %s (unknown_scene %s), want the last good ones", st.Version, st.Rules.UnknownScene)
		}
	})

	t.Run("gate report prints the summary", func(t *testing.T) {
		var out, errOut strings.Builder
		err := run(t.Context(), []string{"report", "summary", "--server", g.base, "--format", "csv", "--since", "1h"},
			func(k string) string { return map[string]string{"GATE_API_TOKEN": "s3cret-token"}[k] }, nil, &out, &errOut)
		if err != nil {
			t.Fatalf("gate report: %v (%s)", err, errOut.String())
		}
		if !strings.HasPrefix(out.String(), "scene,received,forwarded,suppressed,dropped,invalid") || !strings.Contains(out.String(), "\nt.drop,2,1,0,1,0") {
			t.Errorf("report csv:\n%s", out.String())
		}
	})
}

// TestProcessesShareOneWindow runs three gate processes on one NATS consumer,
// one Redis and one Postgres: together they never admit more than max.
func TestProcessesShareOneWindow(t *testing.T) {
	e := newEnv(t, stackReal, contractRules)
	gates := []*gateProc{e.start(nil), e.start(nil), e.start(nil)}
	c := e.client()
	to := testenv.Unique("shared")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			var data [][]byte
			for i := range 50 {
				data = append(data, msg{ID: fmt.Sprintf("%s-%d-%d", to, w, i), Scene: "t.burst", To: to}.json())
			}
			for _, d := range data {
				if _, err := c.js.Publish(t.Context(), "gate.in", d); err != nil {
					t.Errorf("publish: %v", err)
				}
			}
		})
	}
	wg.Wait()
	c.waitIdle()
	if got, _ := c.forwarded(to); len(got) != 3 {
		t.Errorf("three gates forwarded %d of 200, want exactly 3", len(got))
	}
	var sum map[string]gate.SceneSummary = gates[2].summary()
	if s := sum["t.burst"]; s.Received != 200 || s.Forwarded != 3 || s.Suppressed != 197 {
		t.Errorf("shared summary = %+v, want 200 received, 3 forwarded, 197 suppressed", s)
	}
}

// TestGracefulShutdown: SIGTERM-style cancellation ends serve cleanly and
// in time, and nothing is lost: what was not decided is decided by the next
// process.
func TestGracefulShutdown(t *testing.T) {
	e := newEnv(t, stackEmbedded, contractRules)
	g := e.start(nil)
	c := e.client()
	to := testenv.Unique("shutdown")
	for i := range 300 {
		if _, err := c.js.Publish(t.Context(), "gate.in", msg{ID: fmt.Sprintf("%s-%d", to, i), Scene: "t.cap_a", To: to}.json()); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := g.shutdown(); err != nil {
		t.Fatalf("serve returned %v on shutdown", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("shutdown took %s, want under 10s", d)
	}
	// The embedded NATS went down with the gate; a new gate on the same data
	// dir finishes the work.
	g2 := e.start(nil)
	e.client().waitIdle()
	var sum struct{ Total gate.SceneSummary }
	g2.api("/v1/reports/summary", nil, &sum)
	if s := sum.Total; s.Received != 300 {
		t.Errorf("after restart %d of 300 messages decided, want all", s.Received)
	}
}

func waitFor(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
