package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/rules"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// previewRulesNow are the rules in force while the preview traffic is
// decided; previewRulesStrict the proposed document.
const (
	previewRulesNow = `
scenes:
  p.alert:
    limits: [{window: 1h, max: 3}]
  p.other:
    limits: [{window: 1h, max: 10}]
`
	previewRulesStrict = `
scenes:
  p.alert:
    limits: [{window: 1h, max: 1}]
  p.other:
    limits: [{window: 1h, max: 2}]
    on_exceed: drop
`
)

// previewTraffic publishes, under previewRulesNow: four p.alert to a (the
// fourth suppressed), two p.alert to b, four p.other to a.
func previewTraffic(t *testing.T, c *client, a, b string) {
	t.Helper()
	var ms []msg
	for i := range 4 {
		ms = append(ms, msg{ID: fmt.Sprintf("%s-alert-%d", a, i), Scene: "p.alert", To: a})
	}
	for i := range 2 {
		ms = append(ms, msg{ID: fmt.Sprintf("%s-alert-%d", b, i), Scene: "p.alert", To: b})
	}
	for i := range 4 {
		ms = append(ms, msg{ID: fmt.Sprintf("%s-other-%d", a, i), Scene: "p.other", To: a})
	}
	c.send(ms...)
}

// previewWant is what previewRulesStrict makes of previewTraffic: p.alert
// one each to a and b (2 forwarded, 4 suppressed), p.other two to a (2
// forwarded, 2 dropped).
var previewWant = map[string]gate.ScenePreview{
	"p.alert": {Scene: "p.alert", Then: gate.PreviewCounts{Forwarded: 5, Suppressed: 1}, Now: gate.PreviewCounts{Forwarded: 2, Suppressed: 4}},
	"p.other": {Scene: "p.other", Then: gate.PreviewCounts{Forwarded: 4}, Now: gate.PreviewCounts{Forwarded: 2, Dropped: 2}},
}

// postPreview calls POST /v1/rules/preview on g.
func (g *gateProc) postPreview(query, doc, token string) (int, []byte) {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/rules/preview?"+query, strings.NewReader(doc))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("POST /v1/rules/preview: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func checkPreview(t *testing.T, p gate.RulePreview, version string) {
	t.Helper()
	if p.Version != version || p.Decisions != 10 || p.Replayed != 10 || p.NotReplayable != 0 || p.Truncated {
		t.Errorf("version %s decisions %d replayed %d not replayable %d truncated %v; want %s 10 10 0 false",
			p.Version, p.Decisions, p.Replayed, p.NotReplayable, p.Truncated, version)
	}
	if len(p.Scenes) != len(previewWant) {
		t.Errorf("scenes %+v, want %d", p.Scenes, len(previewWant))
	}
	for _, s := range p.Scenes {
		if want := previewWant[s.Scene]; s != want {
			t.Errorf("scene %s:\n got %+v\nwant %+v", s.Scene, s, want)
		}
	}
	wantTotal := gate.ScenePreview{Then: gate.PreviewCounts{Forwarded: 9, Suppressed: 1}, Now: gate.PreviewCounts{Forwarded: 4, Suppressed: 4, Dropped: 2}}
	if p.Total != wantTotal {
		t.Errorf("total %+v, want %+v", p.Total, wantTotal)
	}
}

// TestRulePreviewEndToEnd publishes messages through a running gate, then
// previews a stricter document over its ledger through the API and the
// CLI, on both stacks.
func TestRulePreviewEndToEnd(t *testing.T) {
	for _, kind := range []stack{stackReal, stackEmbedded} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, kind, previewRulesNow)
			const token = "preview-t0ken"
			g := e.start(map[string]string{"GATE_API_TOKEN": token})
			a, b := testenv.Unique("pa"), testenv.Unique("pb")
			previewTraffic(t, e.client(), a, b)
			version := docVersion(t, previewRulesStrict)

			code, body := g.postPreview("since=1h", previewRulesStrict, token)
			if code != http.StatusOK {
				t.Fatalf("POST /v1/rules/preview: %d %s", code, body)
			}
			var p gate.RulePreview
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatal(err)
			}
			checkPreview(t, p, version)

			// The same answer for the rules in force, which change nothing.
			if code, body = g.postPreview("since=1h", previewRulesNow, token); code != http.StatusOK {
				t.Fatalf("preview of the rules in force: %d %s", code, body)
			}
			var same gate.RulePreview
			if err := json.Unmarshal(body, &same); err != nil {
				t.Fatal(err)
			}
			for _, s := range same.Scenes {
				if s.Then != s.Now {
					t.Errorf("the rules in force previewed: scene %s then %+v now %+v, want equal", s.Scene, s.Then, s.Now)
				}
			}

			if code, body = g.postPreview("since=1h", "scenes:\n  p.alert:\n    limits: [{window: 1h, max: 0}]\n", token); code != http.StatusBadRequest ||
				!strings.Contains(string(body), "proposed document:3") {
				t.Errorf("a bad document: %d %s, want 400 naming its line", code, body)
			}
			if code, _ = g.postPreview("since=1h", previewRulesStrict, ""); code != http.StatusUnauthorized {
				t.Errorf("without the token: %d, want 401", code)
			}

			// gate rules preview, from a file, as a table and as JSON.
			file := filepath.Join(t.TempDir(), "strict.yaml")
			if err := os.WriteFile(file, []byte(previewRulesStrict), 0o600); err != nil {
				t.Fatal(err)
			}
			getenv := func(k string) string { return map[string]string{"GATE_API_TOKEN": token}[k] }
			var out, errOut bytes.Buffer
			if err := run(t.Context(), []string{"rules", "preview", file, "--since", "1h", "--server", g.base, "--format", "json"}, getenv, nil, &out, &errOut); err != nil {
				t.Fatalf("gate rules preview --format json: %v %s", err, errOut.String())
			}
			var cli gate.RulePreview
			if err := json.Unmarshal(out.Bytes(), &cli); err != nil {
				t.Fatalf("gate rules preview --format json wrote %s: %v", out.String(), err)
			}
			checkPreview(t, cli, version)

			out.Reset()
			if err := run(t.Context(), []string{"rules", "preview", file, "--since", "1h", "--server", g.base}, getenv, nil, &out, &errOut); err != nil {
				t.Fatalf("gate rules preview: %v %s", err, errOut.String())
			}
			wantRows := map[string]string{
				"scene":   "scene then fwd then sup then drop then defer then digest now fwd now sup now drop now defer now digest change",
				"p.alert": "p.alert 5 1 0 0 0 2 4 0 0 0 fwd -3 sup +3",
				"p.other": "p.other 4 0 0 0 0 2 0 2 0 0 fwd -2 drop +2",
				"total":   "total 9 1 0 0 0 4 4 2 0 0 fwd -5 sup +3 drop +2",
			}
			for _, line := range strings.Split(out.String(), "\n") {
				f := strings.Fields(line)
				if len(f) == 0 {
					continue
				}
				if want, ok := wantRows[f[0]]; ok {
					if got := strings.Join(f, " "); got != want {
						t.Errorf("table row:\n got %s\nwant %s", got, want)
					}
					delete(wantRows, f[0])
				}
			}
			if len(wantRows) > 0 {
				t.Errorf("table lacks rows %v:\n%s", wantRows, out.String())
			}
			if !strings.Contains(out.String(), "rules "+version+" against the decisions of") || !strings.Contains(out.String(), "10 read, 10 replayed") {
				t.Errorf("table header:\n%s", out.String())
			}

			// A document that does not validate is refused before any call.
			bad := filepath.Join(t.TempDir(), "bad.yaml")
			_ = os.WriteFile(bad, []byte("scenes: {x: {limits: []}}"), 0o600)
			if err := run(t.Context(), []string{"rules", "preview", bad, "--server", g.base}, getenv, nil, &out, &errOut); err == nil || !strings.Contains(err.Error(), bad) {
				t.Errorf("previewing a bad document: %v, want its problems", err)
			}
		})
	}
}

func docVersion(t *testing.T, doc string) string {
	t.Helper()
	rs, err := rules.Parse("test", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return rs.Version
}
