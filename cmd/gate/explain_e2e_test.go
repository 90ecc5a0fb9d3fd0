package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// explainRules: one scene at 2 an hour, suppressing.
const explainRules = `
unknown_scene: drop
scenes:
  x.two:
    limits: [{window: 1h, max: 2}]
    on_exceed: suppress
`

// TestExplainE2E proves GET /v1/explain and gate explain on both stacks:
// per-limit counts as the check API's admissions leave them, explaining
// takes no slot, the reading token is enough, bad parameters are 400.
func TestExplainE2E(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, explainRules)
		g := e.start(map[string]string{"GATE_API_TOKEN": checkToken, "GATE_API_READ_TOKEN": "explain-reader"})
		to := testenv.Unique("explain")
		q := url.Values{"recipient": {"open_id:" + to}, "scene": {"x.two"}}
		explainHTTP := func() gate.Explanation {
			t.Helper()
			code, body := g.get("/v1/explain", q, "explain-reader")
			if code != http.StatusOK {
				t.Fatalf("GET /v1/explain: %d %s", code, body)
			}
			var x gate.Explanation
			if err := json.Unmarshal(body, &x); err != nil {
				t.Fatal(err)
			}
			return x
		}
		first := g.mustCheck(t, checkOf(to+"-1", "x.two", to, false))
		x := explainHTTP()
		if l := x.Limits; len(l) != 1 || l[0].Count != 1 || l[0].Left != 1 || x.Decision.Outcome != gate.OutcomeForward || x.NextAt == nil {
			t.Fatalf("after one of 2: %+v", x)
		}
		for range 10 {
			explainHTTP()
		}
		if a := g.mustCheck(t, checkOf(to+"-2", "x.two", to, false)); !a.Admitted {
			t.Fatalf("second of 2 after 10 explanations: %+v", a)
		}
		x = explainHTTP()
		if l := x.Limits[0]; l.Count != 2 || l.Left != 0 || !l.FreeAt.Equal(first.DecidedAt.Add(3600e9)) ||
			x.Decision.Outcome != gate.OutcomeSuppress || x.NextAt == nil || !x.NextAt.Equal(l.FreeAt) {
			t.Errorf("full: %+v, want 2 used, free and next at %v", x, first.DecidedAt.Add(3600e9))
		}

		cli := func(args ...string) string {
			t.Helper()
			var out, errOut strings.Builder
			err := run(t.Context(), append([]string{"explain", "--server", g.base, "--to", "open_id:" + to, "--scene", "x.two"}, args...),
				func(k string) string { return map[string]string{"GATE_API_READ_TOKEN": "explain-reader"}[k] }, nil, &out, &errOut)
			if err != nil {
				t.Fatalf("gate explain %v: %v (%s)", args, err, errOut.String())
			}
			return out.String()
		}
		text := cli()
		t.Logf("gate explain:\n%s", text)
		for _, want := range []string{"is full (2 of 2 used)", "decision:  suppress (limit)", "2/1h", "SCOPE"} {
			if !strings.Contains(text, want) {
				t.Errorf("text lacks %q:\n%s", want, text)
			}
		}
		var j gate.Explanation
		if err := json.Unmarshal([]byte(cli("--format", "json")), &j); err != nil || j.Limits[0].Left != 0 || !j.HeldQueuesKnown {
			t.Errorf("json: %+v, %v", j, err)
		}
		if a := g.mustCheck(t, checkOf(to+"-3", "x.two", to, false)); a.Admitted {
			t.Errorf("third of 2 admitted: %+v", a)
		}
		q.Set("limit", "5")
		if code, body := g.get("/v1/explain", q, "explain-reader"); code != http.StatusBadRequest {
			t.Errorf("unknown parameter: %d %s, want 400", code, body)
		}
	})
}
