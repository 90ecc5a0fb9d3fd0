package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

const prefRules = `
scenes:
  p.alerts:
    limits: [{window: 1h, max: 100}]
    on_exceed: suppress
    bypass_priorities: [urgent]
  p.news:
    limits: [{window: 2s, max: 100}]
    on_exceed: suppress
`

const prefToken = "pref-t0ken"

// preferences calls method on to's preferences with body (may be empty)
// and returns the status and body.
func (g *gateProc) preferences(method, to, body string) (int, string) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.base+"/v1/recipients/open_id:"+to+"/preferences", strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+prefToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("%s preferences of %s: %v", method, to, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (g *gateProc) mustPut(to, body string) {
	g.t.Helper()
	if code, got := g.preferences(http.MethodPut, to, body); code != http.StatusOK {
		g.t.Fatalf("PUT preferences of %s: %d %s", to, code, got)
	}
}

// TestPreferences: a muted scene's messages are suppressed with reason
// preference (and a bypass priority passes), until the preferences are
// deleted; a digest_only scene's messages come out as one digest.
func TestPreferences(t *testing.T) {
	t.Parallel()
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, prefRules)
		g := e.start(map[string]string{"GATE_API_TOKEN": prefToken})
		c := e.client()
		t.Run("mute", func(t *testing.T) {
			t.Parallel()
			to := testenv.Unique("mute")
			g.mustPut(to, `{"muted_scenes":["p.alerts"]}`)
			muted := holdMsg{ID: to + "-1", Scene: "p.alerts", To: to}
			urgent := holdMsg{ID: to + "-2", Scene: "p.alerts", To: to, Priority: "urgent"}
			c.sendHeld(muted, urgent)
			rows := g.waitRows(to, 30*time.Second, "the muted message's row", func(r map[string]gate.Suppression) bool { _, ok := r[muted.ID]; return ok })
			if r := rows[muted.ID]; r.Reason != gate.ReasonPreference || r.Scope != gate.ScopePreference || r.HeldAs != "" || r.Shadow {
				t.Errorf("row of the muted message = %+v, want suppressed for preference", r)
			}
			if _, ok := rows[urgent.ID]; ok {
				t.Errorf("the urgent message has an audit row: %+v", rows[urgent.ID])
			}
			out := c.waitOut(to, 1, 30*time.Second, nil)
			if ids := msgIDs(out); len(ids) != 1 || ids[0] != urgent.ID {
				t.Errorf("gate.out for %s: %v, want only the urgent message", to, ids)
			}

			if code, body := g.preferences(http.MethodDelete, to, ""); code != http.StatusNoContent {
				t.Fatalf("DELETE: %d %s", code, body)
			}
			if code, _ := g.preferences(http.MethodGet, to, ""); code != http.StatusNotFound {
				t.Errorf("GET after DELETE: %d, want 404", code)
			}
			again := holdMsg{ID: to + "-3", Scene: "p.alerts", To: to}
			c.sendHeld(again)
			if ids := msgIDs(c.waitOut(to, 2, 30*time.Second, nil)); len(ids) != 2 || ids[1] != again.ID {
				t.Errorf("gate.out for %s after DELETE: %v, want %s forwarded", to, ids, again.ID)
			}
		})
		t.Run("digest only", func(t *testing.T) {
			t.Parallel()
			to := testenv.Unique("digestonly")
			g.mustPut(to, `{"digest_only":["p.news"]}`)
			code, body := g.preferences(http.MethodGet, to, "")
			var p gate.Preferences
			if code != http.StatusOK || json.Unmarshal([]byte(body), &p) != nil || !p.DigestOnly("p.news") {
				t.Fatalf("GET: %d %s, want digest_only [p.news]", code, body)
			}
			ms := series(to, "p.news", 3)
			c.sendHeld(ms...)
			rows := g.waitRows(to, 30*time.Second, "three messages collected", func(r map[string]gate.Suppression) bool { return len(r) == 3 })
			for _, m := range ms {
				if r := rows[m.ID]; r.HeldAs != gate.HoldDigest || r.Reason != gate.ReasonPreference {
					t.Errorf("row of %s = %+v, want held as digest for preference", m.ID, r)
				}
			}
			d := checkDigest(t, c, to, 3, "p.news")
			all, err := c.readOut()
			if err != nil {
				t.Fatal(err)
			}
			onceEach(t, all, d.MsgID)
			if n := len(recipientOut(all, to)); n != 1 {
				t.Errorf("gate.out holds %d messages for %s, want the digest alone: %v", n, to, msgIDs(recipientOut(all, to)))
			}
		})
	})
}

// TestPreferencesSharedByGates: a change made through one gate applies on
// another that shares its PostgreSQL, which had cached the recipient as
// having none: the other gate polls the changes.
func TestPreferencesSharedByGates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stackReal, prefRules)
	vars := map[string]string{"GATE_API_TOKEN": prefToken}
	one, two := e.start(vars), e.start(vars)
	c := e.client()
	to := testenv.Unique("shared")
	if code, _ := two.preferences(http.MethodGet, to, ""); code != http.StatusNotFound {
		t.Fatalf("GET on the second gate before any PUT: %d, want 404", code)
	}
	one.mustPut(to, `{"muted_scenes":["*"]}`)
	// No timing is asserted: a generous deadline for what takes a poll.
	waitFor(t, 30*time.Second, func() bool { code, _ := two.preferences(http.MethodGet, to, ""); return code == http.StatusOK })
	ms := series(to, "p.alerts", 6)
	c.sendHeld(ms...) // decided by either gate
	rows := two.waitRows(to, 30*time.Second, "six rows", func(r map[string]gate.Suppression) bool { return len(r) == 6 })
	for _, m := range ms {
		if r := rows[m.ID]; r.Reason != gate.ReasonPreference {
			t.Errorf("row of %s = %+v, want suppressed for preference", m.ID, r)
		}
	}
	if out := c.outFor(to); len(out) != 0 {
		t.Errorf("gate.out for %s: %v, want nothing", to, msgIDs(out))
	}

	if code, body := two.preferences(http.MethodDelete, to, ""); code != http.StatusNoContent {
		t.Fatalf("DELETE on the second gate: %d %s", code, body)
	}
	waitFor(t, 30*time.Second, func() bool { code, _ := one.preferences(http.MethodGet, to, ""); return code == http.StatusNotFound })
	more := []holdMsg{{ID: to + "-7", Scene: "p.alerts", To: to}, {ID: to + "-8", Scene: "p.alerts", To: to}}
	c.sendHeld(more...)
	if ids := msgIDs(c.waitOut(to, 2, 30*time.Second, nil)); len(ids) != 2 {
		t.Errorf("gate.out for %s after DELETE: %v, want both forwarded", to, ids)
	}
}
