package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// reportRules give the report page every kind of outcome to show.
const reportRules = `
unknown_scene: forward
scenes:
  alert.disk_full:
    limits:
      - {window: 1h, max: 1}
      - {window: 24h, max: 3}
    on_exceed: suppress
  job.retry_notice:
    limits: [{window: 24h, max: 1}]
    on_exceed: drop
  digest.weekly:
    limits: [{calendar: week, max: 1}]
    on_exceed: suppress
    shadow: true
  remind.later:
    limits: [{window: 2s, max: 1}]
    on_exceed: defer
    max_defer: 1m
  remind.expiring:
    limits: [{window: 1h, max: 1}]
    on_exceed: defer
    max_defer: 2s
    defer_fallback: drop
  ci.build_failed:
    limits: [{window: 2s, max: 1}]
    on_exceed: digest
    digest_group: ci
`

// traffic names the recipients of reportTraffic, by what was decided for
// them.
type traffic struct {
	alice, bob, evil string
	// dan: 2 of digest.weekly, a shadow scene with a calendar limit (1 per
	// calendar week), 1 forwarded and 1 shadow-suppressed.
	dan string
	// erin: 3 messages of remind.later, 1 forwarded and 2 deferred, both
	// released within seconds; frank: 2 of remind.expiring, 1 forwarded
	// and 1 deferred that falls back to drop after 2 s; gina: 3 of
	// ci.build_failed, 1 forwarded and 2 carried by one digest.
	erin, frank, gina string
}

// reportTraffic publishes, through NATS, messages that the gate forwards,
// suppresses, drops, shadow-suppresses, defers, collects for a digest and
// finds invalid, for recipients unique to this run (the Redis windows
// outlive it): 27 received. It returns the recipients' receive ids: alice
// (5 suppressed), bob (2), a recipient whose id is markup (1), and those of
// traffic's held messages; besides them carol has 2 dropped and dan 1 shadow
// suppression. The held messages are settled seconds later:
// waitHeldSettled waits for that.
func reportTraffic(t *testing.T, c *client) traffic {
	t.Helper()
	u := testenv.Unique("")
	tr := traffic{alice: "ou_alice" + u, bob: "ou_bob" + u, evil: `<img src=x onerror="window.__pwned=1">` + u,
		dan: "ou_dan" + u, erin: "ou_erin" + u, frank: "ou_frank" + u, gina: "ou_gina" + u}
	alice, bob, evil, dan := tr.alice, tr.bob, tr.evil, tr.dan
	carol := "ou_carol" + u
	var ms []msg
	add := func(n int, scene, to string) {
		for i := range n {
			ms = append(ms, msg{ID: fmt.Sprintf("%s-%s-%d", scene, to, i), Scene: scene, To: to})
		}
	}
	add(6, "alert.disk_full", alice)
	add(3, "alert.disk_full", bob)
	add(2, "alert.disk_full", evil)
	add(3, "job.retry_notice", carol)
	add(2, "digest.weekly", dan)
	add(2, "unknown.scene", carol)
	add(3, "remind.later", tr.erin)
	add(2, "remind.expiring", tr.frank)
	add(3, "ci.build_failed", tr.gina)
	c.send(ms...)
	c.publish([]byte("not json at all"))
	return tr
}

// muted names what mutedAndRefunded did.
type muted struct {
	recipient string    // open_id:…, whose preferences mute alert.disk_full
	until     time.Time // when their mute ends
	refunded  string    // the id of their forward that was refunded
}

// mutedAndRefunded gives a recipient unique to this run preferences that
// mute alert.disk_full for two hours, sends them 2 messages of that scene
// (suppressed by the preference) and 1 of job.retry_notice (forwarded), and
// refunds that one through POST /v1/refund: 3 more received, 2 more
// suppressed, 1 refunded.
func mutedAndRefunded(t *testing.T, g *gateProc, c *client) muted {
	t.Helper()
	to := "ou_hank" + testenv.Unique("")
	m := muted{recipient: "open_id:" + to, until: time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second), refunded: "refund-" + to}
	body := fmt.Sprintf(`{"muted_scenes": ["alert.disk_full"], "muted_until": %q}`, m.until.Format(time.RFC3339))
	if code, out := g.call(http.MethodPut, "/v1/recipients/"+url.PathEscape(m.recipient)+"/preferences", nil, body); code != http.StatusOK {
		t.Fatalf("PUT preferences of %s: %d %s", m.recipient, code, out)
	}
	c.send(msg{ID: "muted-0-" + to, Scene: "alert.disk_full", To: to}, msg{ID: "muted-1-" + to, Scene: "alert.disk_full", To: to},
		msg{ID: m.refunded, Scene: "job.retry_notice", To: to})
	if code, out := g.call(http.MethodPost, "/v1/refund", nil, fmt.Sprintf(`{"id": %q}`, m.refunded)); code != http.StatusOK {
		t.Fatalf("POST /v1/refund of %s: %d %s", m.refunded, code, out)
	}
	return m
}

// heldTotals are the counters of reportTraffic's held messages once every
// one is settled.
var heldTotals = gate.SceneSummary{Deferred: 3, Digested: 2, Released: 2, FellBack: 1}

// waitHeldSettled waits until the gate has settled every held message of
// reportTraffic (released, fallen back or digested: heldTotals), within a
// deadline generous for a busy machine, and returns the audit rows of the
// held recipients, newest first.
func waitHeldSettled(t *testing.T, g *gateProc, tr traffic) map[string][]gate.Suppression {
	t.Helper()
	rows := map[string][]gate.Suppression{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var sum httpapi.Summary
		g.api("/v1/reports/summary", nil, &sum)
		settled := 0
		for _, to := range []string{tr.erin, tr.frank, tr.gina} {
			rows[to] = g.suppressions(recipientQuery(to))
			for _, r := range rows[to] {
				if r.Settled != "" {
					settled++
				}
			}
		}
		tot := sum.Total
		got := gate.SceneSummary{Deferred: tot.Deferred, Digested: tot.Digested, Released: tot.Released, FellBack: tot.FellBack}
		if got == heldTotals && settled == 5 {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("held messages not settled within 60 s: counters %+v (want %+v), %d of 5 rows settled: %+v", got, heldTotals, settled, rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requiredTool returns the path of a program a test needs: from env when
// set, else the first of paths that exists. When none does, the test skips
// under a plain go test and fails under make test, saying which is missing
// and how to get it.
func requiredTool(t *testing.T, name, env, script string, paths ...string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		paths = []string{p}
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	msg := fmt.Sprintf("%s not found (looked at %v): run `bash %s` (make test does) or set %s", name, paths, script, env)
	if testenv.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// artifactsDir is where tests leave files for people to look at: the
// git-ignored testdata/artifacts of the repository, or GATE_TEST_ARTIFACTS.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GATE_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", "testdata", "artifacts")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser is a headless Chromium with one tab, and what its pages wrote
// to the console as errors.
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// newBrowser starts a headless Chromium with a fresh profile and the flags
// this machine needs (root, no network), and extra (a test's own flags,
// such as host-resolver-rules), and records every script exception and
// console error, CSP violations included.
func newBrowser(t *testing.T, chromium string, extra ...chromedp.ExecAllocatorOption) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900))
	opts = append(opts, extra...)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// The first action starts the browser, and the browser lives as long as
	// that action's context: no timeout on it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", chromium, err)
	}
	b := &browser{ctx: ctx}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			// The API's 401 before the token is entered is expected; the
			// browser logs it as a failed resource. So are the 404 of a
			// recipient without preferences and the 400 of a rule document
			// the preview refuses: the page shows what they mean.
			u, _ := url.Parse(m.URL)
			expected := m.Source == "network" && (strings.Contains(m.Text, "status of 401") ||
				strings.Contains(m.Text, "status of 404") && u != nil && strings.HasSuffix(u.Path, "/preferences") ||
				strings.Contains(m.Text, "status of 400") && u != nil && u.Path == "/v1/rules/preview")
			if (m.Type == chromedp.ConsoleError || m.IsException()) && !expected {
				b.mu.Lock()
				b.errors = append(b.errors, m.String())
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// do runs steps, each batch bounded to 30 s.
func (b *browser) do(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval runs one step that returns a value, bounded to 30 s.
func eval[T any](t *testing.T, b *browser, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// evalJSON evaluates expr in the page and decodes its value into out.
func (b *browser) evalJSON(t *testing.T, expr string, out any) {
	t.Helper()
	raw := eval(t, b, chromedp.Evaluate[string]("JSON.stringify("+expr+")"))
	if err := json.Unmarshal([]byte(raw), out); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

// consoleErrors returns what the pages wrote to the console as errors.
func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.errors)
}

// TestReportPageInBrowser loads the report page in headless Chromium
// against a real gate (NATS, Redis, Postgres) that has decided real
// traffic, and checks that what the page shows is what the API answers:
// the summary per scene, the chart's hourly bars, the top recipients, the
// rules, and a recipient's "why didn't I get it?" lookup. It also checks
// that the token is asked for, that the reading token (GATE_API_READ_TOKEN)
// is all the page needs, that markup in a recipient id stays text, and
// that the page logs no error (a CSP violation would be one). The
// screenshot is left in testdata/artifacts.
func TestReportPageInBrowser(t *testing.T) {
	chromium := requiredTool(t, "chromium", "GATE_TEST_CHROMIUM", "scripts/browser.sh", "/usr/bin/chromium", "/usr/bin/chromium-browser")
	e := newEnv(t, stackReal, reportRules)
	const token, readToken = "page-s3cret", "page-r3ad"
	g := e.start(map[string]string{"GATE_API_TOKEN": token, "GATE_API_READ_TOKEN": readToken})
	tr := reportTraffic(t, e.client())
	alice, evil := tr.alice, tr.evil
	held := waitHeldSettled(t, g, tr)
	pm := mutedAndRefunded(t, g, e.client())

	b := newBrowser(t, chromium)
	// Without a token the API answers 401 and the page asks for one.
	b.do(t, "load the page", chromedp.Navigate(g.base+"/"), chromedp.WaitVisible(chromedp.ID("auth")))
	b.do(t, "give the page the reading token",
		chromedp.SendKeys(chromedp.ID("token"), readToken),
		chromedp.Click(chromedp.CSS(`#auth-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="true"]`)))
	if hidden := eval(t, b, chromedp.Evaluate[bool](`document.getElementById('auth').hidden`)); !hidden {
		t.Error("the token form is still shown after the token was accepted")
	}

	// The range the page chose, to ask the API the same questions.
	since := eval(t, b, chromedp.AttributeValue(chromedp.ID("range-label"), "data-since")).Value
	until := eval(t, b, chromedp.AttributeValue(chromedp.ID("range-label"), "data-until")).Value
	rng := url.Values{"since": {since}, "until": {until}}
	t.Logf("page range: %s to %s", since, until)

	t.Run("summary table matches the API", func(t *testing.T) {
		var api httpapi.Summary
		g.api("/v1/reports/summary", rng, &api)
		// The refunded counter, read apart so that this test does not
		// depend on the summary's Go type.
		var refunds struct {
			Scenes []struct {
				Scene    string `json:"scene"`
				Refunded int64  `json:"refunded"`
			} `json:"scenes"`
			Total struct {
				Refunded int64 `json:"refunded"`
			} `json:"total"`
		}
		g.api("/v1/reports/summary", rng, &refunds)
		refunded := map[string]int64{"*": refunds.Total.Refunded}
		for _, s := range refunds.Scenes {
			refunded[s.Scene] = s.Refunded
		}
		// The muted counts: the range's suppressions of reason preference,
		// per scene and in all.
		muted := map[string]int64{}
		for _, s := range g.suppressions(url.Values{"since": {since}, "until": {until}, "reason": {gate.ReasonPreference}}) {
			muted[s.Scene]++
			muted["*"]++
		}
		if muted["alert.disk_full"] != 2 || muted["*"] != 2 {
			t.Errorf("API suppressions of reason preference, per scene: %v; want hank's 2 of alert.disk_full", muted)
		}
		var dom map[string]map[string]int64
		b.evalJSON(t, `(() => {
			const out = {};
			for (const tr of document.querySelectorAll('#summary-table tr[data-scene]')) {
				const row = {};
				for (const td of tr.querySelectorAll('td[data-value]')) row[td.dataset.field] = Number(td.dataset.value);
				out[tr.dataset.scene] = row;
			}
			return out;
		})()`, &dom)
		want := map[string]gate.SceneSummary{"*": api.Total}
		for _, s := range api.Scenes {
			want[s.Scene] = s
		}
		if len(dom) != len(want) {
			t.Errorf("page shows scenes %v, API has %d (with the total)", keysOf(dom), len(want))
		}
		for scene, s := range want {
			exp := map[string]int64{"received": s.Received, "forwarded": s.Forwarded, "suppressed": s.Suppressed,
				"dropped": s.Dropped, "invalid": s.Invalid, "shadow": s.ShadowSuppressed + s.ShadowDropped,
				"unchecked": s.ForwardedUnchecked, "parked": s.Parked,
				"deferred": s.Deferred, "digested": s.Digested, "released": s.Released, "fell_back": s.FellBack,
				"refunded": refunded[scene], "muted": muted[scene]}
			if got := dom[scene]; fmt.Sprint(got) != fmt.Sprint(exp) {
				t.Errorf("scene %s: page shows %v, API says %v", scene, got, exp)
			}
		}
		// This gate's database holds only this test's traffic.
		tot := api.Total
		if tot.Received != 30 || tot.Suppressed != 10 || tot.Dropped != 2 || tot.Invalid != 1 || tot.ShadowSuppressed != 1 {
			t.Errorf("API total %+v: want 30 received, 10 suppressed, 2 dropped, 1 invalid, 1 shadow", tot)
		}
		// The refund of hank's forward, in its scene and in the total.
		if refunded["*"] != 1 || refunded["job.retry_notice"] != 1 {
			t.Errorf("API refunded counters %v: want 1 in job.retry_notice and in the total", refunded)
		}
		for f, want := range map[string]string{"refunded": "1", "muted": "2"} {
			if got := eval(t, b, chromedp.Text(chromedp.CSS(`#summary-total td[data-field="`+f+`"]`))); got != want {
				t.Errorf("total %s: page shows %q, want %s", f, got, want)
			}
		}
		if sum := tot.Forwarded + tot.Suppressed + tot.Dropped + tot.Invalid + tot.Parked + tot.Deferred + tot.Digested; sum != tot.Received {
			t.Errorf("API total %+v: the outcomes add up to %d, want received", tot, sum)
		}
		for scene, w := range map[string]gate.SceneSummary{
			"remind.later":    {Received: 3, Forwarded: 1, Deferred: 2, Released: 2},
			"remind.expiring": {Received: 2, Forwarded: 1, Deferred: 1, FellBack: 1},
			"ci.build_failed": {Received: 3, Forwarded: 1, Digested: 2},
		} {
			got := want[scene]
			if got.Received != w.Received || got.Forwarded != w.Forwarded || got.Deferred != w.Deferred ||
				got.Digested != w.Digested || got.Released != w.Released || got.FellBack != w.FellBack {
				t.Errorf("scene %s: API says %+v, want %+v", scene, got, w)
			}
		}
		// The held columns are shown, with the total's numbers as text;
		// columns zero for every scene (unchecked, parked) are left out, and
		// a note says so.
		var heads []string
		b.evalJSON(t, `[...document.querySelectorAll('#summary-table thead th')].filter(th => th.offsetParent !== null).map(th => th.textContent)`, &heads)
		for _, h := range []string{"deferred", "digested", "released", "fell back", "shadow", "refunded", "muted"} {
			if !slices.Contains(heads, h) {
				t.Errorf("summary table shows the columns %q: want %q among them", heads, h)
			}
		}
		for _, h := range []string{"unchecked", "parked"} {
			if slices.Contains(heads, h) {
				t.Errorf("summary table shows the columns %q: want %q, zero for every scene, left out", heads, h)
			}
		}
		if note := eval(t, b, chromedp.Text(chromedp.ID("summary-hidden"))); !strings.Contains(note, "unchecked, parked") {
			t.Errorf("note under the summary %q: want it to name the columns left out", note)
		}
		for f, v := range map[string]int64{"deferred": 3, "digested": 2, "released": 2, "fell_back": 1} {
			if got := eval(t, b, chromedp.Text(chromedp.CSS(`#summary-total td[data-field="`+f+`"]`))); got != fmt.Sprint(v) {
				t.Errorf("total %s: page shows %q, want %d", f, got, v)
			}
		}
		rate := eval(t, b, chromedp.Text(chromedp.CSS(`#summary-total td[data-field="rate"]`)))
		if want := fmt.Sprintf("%.1f%%", 100*float64(tot.Suppressed+tot.Dropped)/float64(tot.Received)); rate != want {
			t.Errorf("total suppression rate: page shows %q, want %q", rate, want)
		}
	})

	t.Run("chart bars add up to the timeseries", func(t *testing.T) {
		var api httpapi.Timeseries
		g.api("/v1/reports/timeseries", rng, &api)
		var want [7]int64
		for _, h := range api.Hours {
			want = [7]int64{want[0] + h.Received, want[1] + h.Forwarded, want[2] + h.Suppressed, want[3] + h.Dropped,
				want[4] + h.Invalid, want[5] + h.Deferred, want[6] + h.Digested}
		}
		var bars struct {
			N    int      `json:"n"`
			Sums [7]int64 `json:"sums"`
			Step string   `json:"step"`
		}
		b.evalJSON(t, `(() => {
			const bars = document.querySelectorAll('#chart g.bar');
			const sums = [0, 0, 0, 0, 0, 0, 0];
			const f = ['received', 'forwarded', 'suppressed', 'dropped', 'invalid', 'deferred', 'digested'];
			for (const b of bars) f.forEach((k, i) => { sums[i] += Number(b.dataset[k]); });
			return {n: bars.length, sums, step: document.getElementById('chart').dataset.step};
		})()`, &bars)
		// 24 hours, plus the partial hour the range starts in unless it
		// starts on the hour.
		if bars.Sums != want || bars.N < 24 || bars.N > 25 || bars.Step != "hour" || want[0] != 30 || want[5] != 3 || want[6] != 2 {
			t.Errorf("chart: %d %s bars adding up to %v; want 24 or 25 hourly bars adding up to the API's %v (30 received, 3 deferred, 2 digested)",
				bars.N, bars.Step, bars.Sums, want)
		}
	})

	t.Run("top recipients match the API, markup stays text", func(t *testing.T) {
		var api httpapi.TopRecipients
		g.api("/v1/reports/top-recipients", url.Values{"since": {since}, "until": {until}, "limit": {"10"}}, &api)
		var dom []struct {
			Recipient  string `json:"recipient"`
			Text       string `json:"text"`
			Suppressed int64  `json:"suppressed"`
		}
		b.evalJSON(t, `[...document.querySelectorAll('#top-body tr')].map(tr => ({
			recipient: tr.dataset.recipient, text: tr.querySelector('button').textContent,
			suppressed: Number(tr.querySelector('[data-field="suppressed"]').dataset.value)}))`, &dom)
		if len(dom) != len(api.Recipients) {
			t.Fatalf("page lists %d recipients, API %d", len(dom), len(api.Recipients))
		}
		for i, r := range api.Recipients {
			if dom[i].Recipient != r.Recipient || dom[i].Text != r.Recipient || dom[i].Suppressed != r.Suppressed {
				t.Errorf("top recipient %d: page %+v, API %+v", i, dom[i], r)
			}
		}
		if len(dom) == 0 || dom[0].Recipient != "open_id:"+alice || dom[0].Suppressed != 5 {
			t.Errorf("most suppressed: got %+v, want open_id:%s with 5", dom, alice)
		}
		var injected struct {
			Imgs   int  `json:"imgs"`
			Pwned  bool `json:"pwned"`
			Listed bool `json:"listed"`
		}
		b.evalJSON(t, fmt.Sprintf(`({imgs: document.querySelectorAll('img').length, pwned: !!window.__pwned,
			listed: [...document.querySelectorAll('#top-body button')].some(b => b.textContent === %q)})`, "open_id:"+evil), &injected)
		if injected.Imgs != 0 || injected.Pwned || !injected.Listed {
			t.Errorf("a recipient id holding markup: %+v; want it listed as text, no <img>, no script run", injected)
		}
	})

	t.Run("rules in force", func(t *testing.T) {
		var st gate.RuleStatus
		g.api("/v1/rules", nil, &st)
		version := eval(t, b, chromedp.Text(chromedp.ID("rules-version")))
		loaded := eval(t, b, chromedp.AttributeValue(chromedp.ID("rules-loaded"), "data-time")).Value
		var scenes []string
		b.evalJSON(t, `[...document.querySelectorAll('#rules-body tr')].map(tr => tr.dataset.scene)`, &scenes)
		loadedAt, err := time.Parse(time.RFC3339Nano, loaded)
		if version != st.Version || err != nil || !loadedAt.Equal(st.LoadedAt) {
			t.Errorf("page shows rules %q loaded %q; API says %q loaded %s", version, loaded, st.Version, st.LoadedAt)
		}
		if want := []string{"alert.disk_full", "ci.build_failed", "digest.weekly", "job.retry_notice", "remind.expiring", "remind.later"}; !slices.Equal(scenes, want) {
			t.Errorf("rules table lists %v, want %v", scenes, want)
		}
		var overLimit map[string]string
		b.evalJSON(t, `Object.fromEntries([...document.querySelectorAll('#rules-body tr')].map(tr =>
			[tr.dataset.scene, tr.querySelector('[data-field="on_exceed"]').textContent]))`, &overLimit)
		for scene, want := range map[string]string{"remind.expiring": "defer (up to 2s, then drop)", "ci.build_failed": "digest (group ci)"} {
			if overLimit[scene] != want {
				t.Errorf("rules table, %s over the limit: %q, want %q", scene, overLimit[scene], want)
			}
		}
	})

	// lookUp asks the page why recipient got nothing, and waits for the
	// answer.
	lookUp := func(t *testing.T, recipient string) {
		t.Helper()
		b.do(t, "look up "+recipient,
			chromedp.SetValue(chromedp.ID("lookup-recipient"), recipient),
			chromedp.Click(chromedp.CSS(`#lookup-form button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#lookup-summary[data-recipient=%q]`, recipient))))
	}

	t.Run("why didn't I get it", func(t *testing.T) {
		recipient := "open_id:" + alice
		lookUp(t, recipient)
		summary := eval(t, b, chromedp.Text(chromedp.ID("lookup-summary")))
		want := g.suppressions(url.Values{"recipient": {recipient}, "since": {since}, "until": {until}})
		type row struct {
			ID, Scene, Limit, Count, Next, Version string
		}
		var dom []row
		b.evalJSON(t, `[...document.querySelectorAll('#lookup-body tr')].map(tr => {
			const f = (n) => tr.querySelector('[data-field="' + n + '"]');
			return {ID: tr.dataset.messageId, Scene: f('scene').textContent, Limit: f('limit').textContent,
				Count: f('count_seen').dataset.value, Next: f('next_allowed_at').dataset.time || '',
				Version: f('rules_version').textContent};
		})`, &dom)
		if len(dom) != 5 || len(want) != 5 {
			t.Fatalf("lookup of %s: page lists %d rows, API %d; want 5 (6 sent, 1 per hour)", recipient, len(dom), len(want))
		}
		for i, s := range want {
			got := dom[i]
			gotNext, err := time.Parse(time.RFC3339Nano, got.Next)
			if got.ID != s.MessageID || got.Scene != s.Scene || got.Count != fmt.Sprint(s.CountSeen) ||
				got.Version != s.RulesVersion || err != nil || !gotNext.Equal(s.NextAllowedAt) {
				t.Errorf("lookup row %d: page %+v, API %+v", i, got, s)
			}
			if wantLimit := fmt.Sprintf("%d per %s in this scene", s.LimitMax, gate.FormatDuration(time.Duration(s.LimitWindow))); got.Limit != wantLimit {
				t.Errorf("lookup row %d: limit shown %q, want %q", i, got.Limit, wantLimit)
			}
		}
		if !strings.Contains(summary, "5 messages were held back for "+recipient) || !strings.Contains(summary, "reopens") {
			t.Errorf("lookup summary %q: want it to say 5 were held back and when the limit reopens", summary)
		}
	})

	t.Run("why didn't I get it: a calendar limit", func(t *testing.T) {
		recipient := "open_id:" + tr.dan
		lookUp(t, recipient)
		var limits []string
		b.evalJSON(t, `[...document.querySelectorAll('#lookup-body tr')].map(tr =>
			tr.querySelector('[data-field="limit"]').textContent)`, &limits)
		if want := []string{"1 per calendar week in this scene (shadow: forwarded anyway)"}; !slices.Equal(limits, want) {
			t.Errorf("lookup of %s: limits shown %q, want %q", recipient, limits, want)
		}
	})

	t.Run("why didn't I get it: held messages", func(t *testing.T) {
		type row struct {
			ID      string `json:"id"`
			Text    string `json:"text"`
			HeldAs  string `json:"heldAs"`
			Settled string `json:"settled"`
			Time    string `json:"time"`
			Digest  string `json:"digest"`
		}
		for _, tt := range []struct {
			to, settled, text string
		}{
			{tr.erin, "released", "deferred → released at "},
			{tr.frank, "fell_back", "deferred → fell back to drop at "},
			{tr.gina, "digested", "in digest "},
		} {
			recipient := "open_id:" + tt.to
			lookUp(t, recipient)
			var dom []row
			b.evalJSON(t, `[...document.querySelectorAll('#lookup-body tr')].map(tr => {
				const f = tr.querySelector('[data-field="outcome"]');
				return {id: tr.dataset.messageId, text: f.textContent, heldAs: f.dataset.heldAs || '',
					settled: f.dataset.settled || '', time: f.dataset.time || '', digest: f.dataset.digestId || ''};
			})`, &dom)
			api := held[tt.to]
			if len(dom) != len(api) || len(api) == 0 {
				t.Fatalf("lookup of %s: page lists %d rows, API %d; want the held ones", recipient, len(dom), len(api))
			}
			for i, s := range api {
				got := dom[i]
				at, err := time.Parse(time.RFC3339Nano, got.Time)
				if got.ID != s.MessageID || got.HeldAs != string(s.HeldAs) || got.Settled != string(s.Settled) ||
					got.Settled != tt.settled || got.Digest != s.DigestID || err != nil || !at.Equal(s.SettledAt) {
					t.Errorf("lookup %s row %d: page %+v, API %+v; want settled %s", recipient, i, got, s, tt.settled)
				}
				if !strings.HasPrefix(got.Text, tt.text) || (s.DigestID != "" && !strings.Contains(got.Text, s.DigestID)) {
					t.Errorf("lookup %s row %d says %q, want it to start %q and name the digest %q", recipient, i, got.Text, tt.text, s.DigestID)
				}
			}
			if tt.settled == "digested" && (len(api) != 2 || api[0].DigestID == "" || api[0].DigestID != api[1].DigestID) {
				t.Errorf("%s's two digested messages: %+v; want one digest carrying both", recipient, api)
			}
			summary := eval(t, b, chromedp.Text(chromedp.ID("lookup-summary")))
			if want := map[string]string{"released": "released later", "fell_back": "fell back", "digested": "sent in a digest"}[tt.settled]; !strings.Contains(summary, want) {
				t.Errorf("lookup summary %q: want it to say %q", summary, want)
			}
		}
	})

	t.Run("refunds", func(t *testing.T) {
		var api gate.RefundPage
		g.api("/v1/refunds", rng, &api)
		type row struct {
			ID, Scene, Recipient, Forwarded, Refunded, Source string
		}
		var dom []row
		b.evalJSON(t, `[...document.querySelectorAll('#refunds-body tr')].map(tr => {
			const f = (n) => tr.querySelector('[data-field="' + n + '"]');
			return {ID: f('message_id').textContent, Scene: f('scene').textContent, Recipient: f('recipient').textContent,
				Forwarded: f('forwarded_at').dataset.time, Refunded: f('refunded_at').dataset.time, Source: f('source').dataset.value};
		})`, &dom)
		if len(api.Items) != 1 || len(dom) != 1 {
			t.Fatalf("refunds: page lists %+v, API %+v; want the one refund", dom, api.Items)
		}
		r, got := api.Items[0], dom[0]
		fwd, err1 := time.Parse(time.RFC3339Nano, got.Forwarded)
		ref, err2 := time.Parse(time.RFC3339Nano, got.Refunded)
		if got.ID != pm.refunded || r.MessageID != pm.refunded || got.Scene != "job.retry_notice" || got.Recipient != pm.recipient ||
			got.Source != "api" || err1 != nil || err2 != nil || !fwd.Equal(r.ForwardedAt) || !ref.Equal(r.RefundedAt) {
			t.Errorf("refund row: page %+v, API %+v; want %s of %s refunded by the API", got, r, pm.refunded, pm.recipient)
		}
	})

	t.Run("why didn't I get it: muted by preferences", func(t *testing.T) {
		lookUp(t, pm.recipient)
		var prefs struct {
			State, Muted, Until, Text string
		}
		b.evalJSON(t, `({State: document.getElementById('lookup-prefs').dataset.state,
			Muted: document.getElementById('prefs-muted').textContent,
			Until: document.getElementById('prefs-until').dataset.time,
			Text: document.getElementById('prefs-state').textContent})`, &prefs)
		muteEnd, err := time.Parse(time.RFC3339Nano, prefs.Until)
		if prefs.State != "muted" || prefs.Muted != "alert.disk_full" || err != nil || !muteEnd.Equal(pm.until) ||
			!strings.HasPrefix(prefs.Text, "Muted now: alert.disk_full, until ") {
			t.Errorf("preferences of %s on the page: %+v; want alert.disk_full muted until %s", pm.recipient, prefs, pm.until)
		}
		api := g.suppressions(url.Values{"recipient": {pm.recipient}, "since": {since}, "until": {until}})
		var dom []struct{ ID, Reason, Limit string }
		b.evalJSON(t, `[...document.querySelectorAll('#lookup-body tr')].map(tr => {
			const f = tr.querySelector('[data-field="limit"]');
			return {ID: tr.dataset.messageId, Reason: f.dataset.reason, Limit: f.textContent};
		})`, &dom)
		if len(dom) != 2 || len(api) != 2 {
			t.Fatalf("lookup of %s: page %+v, API %+v; want the 2 muted messages", pm.recipient, dom, api)
		}
		for i, s := range api {
			if s.Reason != gate.ReasonPreference || s.Scope != gate.ScopePreference || dom[i].ID != s.MessageID ||
				dom[i].Reason != "preference" || dom[i].Limit != "muted by the recipient (preferences)" {
				t.Errorf("lookup row %d: page %+v, API %+v; want a preference suppression", i, dom[i], s)
			}
		}

		// A recipient without preferences says so.
		lookUp(t, "open_id:"+alice)
		state := eval(t, b, chromedp.AttributeValue(chromedp.ID("lookup-prefs"), "data-state")).Value
		factsShown := eval(t, b, chromedp.Evaluate[bool](`document.getElementById('prefs-facts').offsetParent !== null`))
		if state != "none" || factsShown {
			t.Errorf("preferences of alice, who set none: state %q, facts shown %v; want none and no facts", state, factsShown)
		}
	})

	// preview pastes doc into the preview panel, picks the period and runs
	// it, and waits for the panel to reach state (done or error).
	preview := func(t *testing.T, doc, period, state string) {
		t.Helper()
		b.do(t, "preview over "+period+", expecting "+state,
			chromedp.SetValue(chromedp.ID("preview-doc"), doc),
			chromedp.SetValue(chromedp.ID("preview-since"), period),
			chromedp.Click(chromedp.ID("preview-run")),
			chromedp.WaitVisible(chromedp.CSS(`#preview[data-state="`+state+`"]`)))
	}

	t.Run("preview a rule change", func(t *testing.T) {
		// Stricter: digest.weekly enforced instead of shadowed, so dan's
		// second message would be suppressed rather than forwarded.
		stricter := strings.Replace(reportRules, "    shadow: true\n", "", 1)
		if stricter == reportRules {
			t.Fatal("the stricter document is the same as the rules in force")
		}
		var api gate.RulePreview
		code, body := g.call(http.MethodPost, "/v1/rules/preview", url.Values{"since": {"24h"}}, stricter)
		if code != http.StatusOK || json.Unmarshal(body, &api) != nil {
			t.Fatalf("POST /v1/rules/preview: %d %s", code, body)
		}
		preview(t, stricter, "24h", "done")
		type counts struct{ Then, Now map[string]int64 }
		var dom map[string]counts
		b.evalJSON(t, `(() => {
			const out = {};
			for (const tr of document.querySelectorAll('#preview-table tr[data-scene]')) {
				const c = {Then: {}, Now: {}};
				for (const td of tr.querySelectorAll('td[data-then]')) {
					c.Then[td.dataset.field] = Number(td.dataset.then);
					c.Now[td.dataset.field] = Number(td.dataset.now);
				}
				out[tr.dataset.scene] = c;
			}
			return out;
		})()`, &dom)
		of := func(c gate.PreviewCounts) map[string]int64 {
			return map[string]int64{"forwarded": c.Forwarded, "suppressed": c.Suppressed, "dropped": c.Dropped,
				"deferred": c.Deferred, "digested": c.Digested}
		}
		want := map[string]counts{"*": {of(api.Total.Then), of(api.Total.Now)}}
		for _, s := range api.Scenes {
			want[s.Scene] = counts{of(s.Then), of(s.Now)}
		}
		if fmt.Sprint(dom) != fmt.Sprint(want) {
			t.Errorf("preview table: page shows %v, API says %v", dom, want)
		}
		w := want["digest.weekly"]
		if w.Then["forwarded"] != 2 || w.Now["forwarded"] != 1 || w.Then["suppressed"] != 0 || w.Now["suppressed"] != 1 {
			t.Errorf("preview of digest.weekly without shadow: %+v; want forwarded 2 then 1 now, suppressed 0 then 1 now", w)
		}
		change := eval(t, b, chromedp.Text(chromedp.CSS(`#preview-body tr[data-scene="digest.weekly"] [data-field="change"]`)))
		if change != "forwarded −1, suppressed +1" {
			t.Errorf("preview change of digest.weekly: %q, want %q", change, "forwarded −1, suppressed +1")
		}
		if same := eval(t, b, chromedp.Text(chromedp.CSS(`#preview-body tr[data-scene="job.retry_notice"] [data-field="change"]`))); same != "no change" {
			t.Errorf("preview change of job.retry_notice, whose rule is the same: %q, want %q", same, "no change")
		}
		replayed := eval(t, b, chromedp.AttributeValue(chromedp.ID("preview-summary"), "data-replayed")).Value
		summary := eval(t, b, chromedp.Text(chromedp.ID("preview-summary")))
		if replayed != fmt.Sprint(api.Replayed) || api.Replayed == 0 || !strings.Contains(summary, "Replayed "+fmt.Sprint(api.Replayed)+" of ") {
			t.Errorf("preview summary %q (replayed %s): want the API's %d replayed", summary, replayed, api.Replayed)
		}

		// A document the parser refuses: its words, verbatim.
		bad := "scenes:\n  alert.disk_full:\n    limits: [{window: 1h, max: 0}]\n    on_exceed: suppress\n"
		code, body = g.call(http.MethodPost, "/v1/rules/preview", url.Values{"since": {"7d"}}, bad)
		var refusal struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal(body, &refusal) != nil || refusal.Error == "" {
			t.Fatalf("POST /v1/rules/preview of a bad document: %d %s; want 400 with an error", code, body)
		}
		preview(t, bad, "7d", "error")
		shown := eval(t, b, chromedp.Evaluate[string](`document.getElementById('preview-error').textContent`))
		tableHidden := eval(t, b, chromedp.Evaluate[bool](`document.getElementById('preview-table').hidden`))
		if shown != refusal.Error || !tableHidden {
			t.Errorf("bad document: page shows %q (table hidden %v), want the API's %q and no table", shown, tableHidden, refusal.Error)
		}
	})

	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Errorf("the page wrote errors to the console (a CSP violation is one):\n%s", strings.Join(errs, "\n"))
	}
	png := eval(t, b, chromedp.FullScreenshot(100))
	path := filepath.Join(artifactsDir(t), "report-page.png")
	if err := os.WriteFile(path, png, 0o640); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the report page: %s", path)
}

// call sends body to the gate's API with the test's token and returns the
// status and the answer. A body is declared JSON, as the check, the refund
// and preferences require (the rule preview takes any).
func (g *gateProc) call(method, path string, q url.Values, body string) (int, []byte) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.base+path+"?"+q.Encode(), strings.NewReader(body))
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+g.vars["GATE_API_TOKEN"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
