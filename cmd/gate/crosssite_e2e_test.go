package main

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/antifatigue/gate/internal/testing/testenv"
)

// attackPage is a page of another site that, once loaded, posts a check
// and a refund to the gate as a page may without asking anyone: mode
// no-cors, a text/plain body, no preflight. It marks the body data-done
// when both requests have been answered (the answers are opaque to it).
var attackPage = template.Must(template.New("attack").Parse(`<!doctype html>
<title>cute cats</title>
<body>
<script>
const post = (path, body) => fetch({{.Gate}} + path,
  {method: 'POST', mode: 'no-cors', headers: {'Content-Type': 'text/plain'}, body: body});
Promise.allSettled([post('/v1/check', {{.Check}}), post('/v1/refund', {{.Refund}})])
  .then(rs => { document.body.dataset.done = rs.map(r => r.status).join(','); });
</script>
</body>`))

// serveAttack serves attackPage on addr (host:0) with the gate's base URL
// and the bodies to post, and returns the page's URL.
func serveAttack(t *testing.T, addr, gateURL, check, refund string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s for the attacking page: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = attackPage.Execute(w, map[string]string{"Gate": gateURL, "Check": check, "Refund": refund})
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCrossSitePageCannotSpendSlots: a gate without a token (the default),
// on 127.0.0.1. Pages of two other sites, one on 127.0.0.2 (cross-site)
// and one on another port of 127.0.0.1 (same-site), open in a real
// browser, post a check that would take a recipient's only slot of the
// hour and a refund that would hand back another recipient's. The gate
// refuses all four with 403; the first recipient's next real message is
// forwarded and the second's is still held back.
func TestCrossSitePageCannotSpendSlots(t *testing.T) {
	chromium := requiredTool(t, "chromium", "GATE_TEST_CHROMIUM", "scripts/browser.sh", "/usr/bin/chromium", "/usr/bin/chromium-browser")
	e := newEnv(t, stackReal, refundRules)
	g := e.start(nil)
	c := e.client()
	checked, refunded := testenv.Unique("victim-check"), testenv.Unique("victim-refund")
	first := msg{ID: refunded + "-A", Scene: "r.alert", To: refunded}
	c.send(first)
	if got, _ := c.forwarded(refunded); !slices.Equal(got, []string{first.ID}) {
		t.Fatalf("forwarded %v, want %s", got, first.ID)
	}

	b := newBrowser(t, chromium)
	sites := map[string]string{"cross-site": "127.0.0.2:0", "same-site": "127.0.0.1:0"}
	for site, addr := range sites {
		check := fmt.Sprintf(`{"id":%q,"scene":"r.alert","receive_id_type":"open_id","receive_id":%q}`, "attack-"+site+"-"+checked, checked)
		page := serveAttack(t, addr, g.base, check, fmt.Sprintf(`{"id":%q}`, first.ID))
		b.do(t, "open the "+site+" page", chromedp.Navigate(page), chromedp.WaitReady(`body[data-done]`))
		if done := eval(t, b, chromedp.Evaluate[string](`document.body.dataset.done`)); done != "fulfilled,fulfilled" {
			t.Fatalf("the %s page's requests: %s, want both sent and answered", site, done)
		}
	}
	// Each request reached the gate and was refused there, not by the
	// browser: otherwise the test would pass without the gate's guard.
	for _, route := range []string{"POST /v1/check", "POST /v1/refund"} {
		series := `gate_http_requests_total{code="403",route="` + route + `"}`
		if got := g.metric(series); got != float64(len(sites)) {
			t.Errorf("%s = %v, want %d: one refusal per page", series, got, len(sites))
		}
	}

	next := msg{ID: checked + "-real", Scene: "r.alert", To: checked}
	c.send(next, msg{ID: refunded + "-B", Scene: "r.alert", To: refunded})
	if got, _ := c.forwarded(checked); !slices.Equal(got, []string{next.ID}) {
		t.Errorf("%s's first real message: forwarded %v, want %s: a page took the slot", checked, got, next.ID)
	}
	if got, _ := c.forwarded(refunded); !slices.Equal(got, []string{first.ID}) {
		t.Errorf("%s: forwarded %v, want %s alone: a page refunded it and freed the slot", refunded, got, first.ID)
	}
}

// rebindPage is a page of evil.example that, once its name points at the
// gate (DNS rebinding), is the gate's origin as far as the browser knows:
// attack() posts a check that would take a recipient's only slot of the
// hour and mutes another, as same-origin JSON requests, and
// resolves to each answer's status and error as JSON.
var rebindPage = template.Must(template.New("rebind").Parse(`<!doctype html>
<title>cute cats, again</title>
<body>
<script>
const send = async (method, path, body) => {
  const r = await fetch(path, {method, headers: {'Content-Type': 'application/json'}, body});
  let error = '';
  try { error = (await r.json()).error || ''; } catch (_) { /* no JSON body */ }
  return {status: r.status, error};
};
window.attack = async () => JSON.stringify([
  await send('POST', '/v1/check', {{.Check}}),
  await send('PUT', {{.Prefs}}, '{"muted_scenes":["r.alert"]}'),
]);
</script>
</body>`))

// TestRebindingPageCannotSpendSlots: a gate without a token on 127.0.0.1
// with GATE_HTTP_ALLOWED_HOSTS=*, in a real browser whose resolver maps
// evil.example to 127.0.0.1. The page of http://evil.example:PORT is
// loaded from the attacker's server on the gate's address and port; that
// server then goes away and the gate starts there, as when evil.example's
// address changes to the gate's. The page's check and mute, same-origin
// to the browser (Host and Origin both evil.example:PORT), are refused
// with 403 naming DNS rebinding; the first recipient's next real message
// is forwarded and the second has no preferences. The same requests from the gate's
// own page on 127.0.0.1 pass, and the gate warned at start what * means.
func TestRebindingPageCannotSpendSlots(t *testing.T) {
	chromium := requiredTool(t, "chromium", "GATE_TEST_CHROMIUM", "scripts/browser.sh", "/usr/bin/chromium", "/usr/bin/chromium-browser")
	e := newEnv(t, stackReal, refundRules)
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	victim, muted := testenv.Unique("rebind-victim"), testenv.Unique("rebind-muted")
	check := func(id, to string) string {
		return fmt.Sprintf(`{"id":%q,"scene":"r.alert","receive_id_type":"open_id","receive_id":%q}`, id, to)
	}
	prefs := "/v1/recipients/open_id:" + muted + "/preferences"

	// The attacker's server, on the address the gate will listen on.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s for the rebinding page: %v", addr, err)
	}
	attacker := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = rebindPage.Execute(w, map[string]string{"Check": check("rebind-"+victim, victim), "Prefs": prefs})
	}))
	attacker.Listener = ln
	attacker.Start()
	b := newBrowser(t, chromium, chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"))
	page := "http://evil.example:" + port + "/"
	b.do(t, "open the page of evil.example", chromedp.Navigate(page), chromedp.WaitReady(`body`))
	if got := eval(t, b, chromedp.Evaluate[string](`location.origin + ' ' + typeof window.attack`)); got != "http://evil.example:"+port+" function" {
		t.Fatalf("the page at %s: %q, want the rebinding page on its origin", page, got)
	}
	attacker.Close() // evil.example now points at the gate
	g := e.start(map[string]string{"GATE_HTTP_ADDR": addr, "GATE_HTTP_ALLOWED_HOSTS": "*"})

	var answers []struct {
		Status int    `json:"status"`
		Error  string `json:"error"`
	}
	raw := eval(t, b, chromedp.Evaluate[string](`attack()`, chromedp.EvalAwaitPromise))
	if err := json.Unmarshal([]byte(raw), &answers); err != nil || len(answers) != 2 {
		t.Fatalf("the page's answers %s: %v", raw, err)
	}
	for i, what := range []string{"POST /v1/check", "PUT " + prefs} {
		if a := answers[i]; a.Status != http.StatusForbidden || !strings.Contains(a.Error, "DNS rebinding") {
			t.Errorf("%s from the rebound page: %d %q, want 403 naming DNS rebinding", what, a.Status, a.Error)
		}
	}

	c := e.client()
	next := msg{ID: victim + "-real", Scene: "r.alert", To: victim}
	c.send(next)
	if got, _ := c.forwarded(victim); !slices.Equal(got, []string{next.ID}) {
		t.Errorf("%s's first real message: forwarded %v, want %s: the rebound page took the slot", victim, got, next.ID)
	}
	if code, body := g.apiCall(http.MethodGet, prefs, "", ""); code != http.StatusNotFound {
		t.Errorf("GET %s: %d %s, want 404: the rebound page muted %s", prefs, code, body, muted)
	}

	// The gate's own page, on a loopback name, still may.
	own := testenv.Unique("rebind-own")
	b.do(t, "open the gate's own page", chromedp.Navigate(g.base+"/"), chromedp.WaitReady(`body`))
	status := eval(t, b, chromedp.Evaluate[int](fmt.Sprintf(`fetch('/v1/check', {method: 'POST', `+
		`headers: {'Content-Type': 'application/json'}, body: %q}).then(r => r.status)`, check(own+"-A", own)), chromedp.EvalAwaitPromise))
	if status != http.StatusOK {
		t.Errorf("POST /v1/check from the gate's own page at %s: %d, want 200", g.base, status)
	}

	warned := false
	for line := range strings.Lines(g.log.String()) {
		warned = warned || strings.Contains(line, "level=WARN") && strings.Contains(line, "GATE_HTTP_ALLOWED_HOSTS holds *")
	}
	if !warned {
		t.Errorf("a gate with GATE_HTTP_ALLOWED_HOSTS=* does not warn at start:\n%s", g.log.String())
	}
}

// TestServeRefusesOpenAPIBeyondLoopback: a gate whose HTTP API listens
// beyond loopback without GATE_API_TOKEN refuses to start, saying how to
// go on, unless GATE_HTTP_ALLOW_NO_TOKEN (or --http-allow-no-token) says
// so; it then starts and logs a warning. Loopback addresses need neither.
func TestServeRefusesOpenAPIBeyondLoopback(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		args []string
		ok   bool
	}{
		{env: nil, ok: true}, // 127.0.0.1:8080
		{env: map[string]string{"GATE_HTTP_ADDR": "localhost:8080"}, ok: true},
		{env: map[string]string{"GATE_HTTP_ADDR": "[::1]:8080"}, ok: true},
		{env: map[string]string{"GATE_HTTP_ADDR": "0.0.0.0:8080"}},
		{env: map[string]string{"GATE_HTTP_ADDR": ":8080"}},
		{env: map[string]string{"GATE_HTTP_ADDR": "10.1.2.3:8080"}},
		{env: map[string]string{"GATE_HTTP_ADDR": "gate.example.com:8080"}},
		{env: map[string]string{"GATE_HTTP_ADDR": "0.0.0.0:8080", "GATE_HTTP_ALLOW_NO_TOKEN": "false"}},
		{env: map[string]string{"GATE_HTTP_ADDR": "0.0.0.0:8080", "GATE_API_TOKEN": "s3cret"}, ok: true},
		{env: map[string]string{"GATE_HTTP_ADDR": "0.0.0.0:8080", "GATE_HTTP_ALLOW_NO_TOKEN": "true"}, ok: true},
		{env: map[string]string{"GATE_HTTP_ADDR": "0.0.0.0:8080"}, args: []string{"--http-allow-no-token", "true"}, ok: true},
	} {
		_, err := parseConfig(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		switch {
		case tt.ok && err != nil:
			t.Errorf("%v %v: %v, want the gate to start", tt.env, tt.args, err)
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), "GATE_API_TOKEN is empty") || !strings.Contains(err.Error(), "GATE_HTTP_ALLOW_NO_TOKEN=true")):
			t.Errorf("%v %v: %v, want a refusal naming GATE_API_TOKEN and GATE_HTTP_ALLOW_NO_TOKEN", tt.env, tt.args, err)
		}
	}

	e := newEnv(t, stackEmbedded, refundRules)
	addr := "0.0.0.0:" + strconv.Itoa(testenv.FreePort(t))
	vars := e.settings(map[string]string{"GATE_HTTP_ADDR": addr})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, nil, io.Discard, io.Discard)
	}()
	var err error
	waitFor(t, 30*time.Second, func() bool {
		select {
		case err = <-done:
			return true
		default:
		}
		if resp, herr := http.Get("http://" + addr + "/healthz"); herr == nil {
			resp.Body.Close()
			cancel()
			t.Fatalf("gate serve on %s without a token started and serves", addr)
		}
		return false
	})
	if err == nil || !strings.Contains(err.Error(), "GATE_API_TOKEN is empty") {
		t.Fatalf("gate serve on %s without a token: %v, want a refusal", addr, err)
	}

	g := e.start(map[string]string{"GATE_HTTP_ADDR": addr, "GATE_HTTP_ALLOW_NO_TOKEN": "true"})
	for line := range strings.Lines(g.log.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "without a token") {
			return
		}
	}
	t.Errorf("a gate open beyond loopback by choice does not warn:\n%s", g.log.String())
}
