package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
)

// reached counts the calls that got past the guards to the check and the
// refund.
type reached struct{ checks, refunds atomic.Int64 }

type countingChecker struct {
	fakeChecker
	n *atomic.Int64
}

func (c countingChecker) Check(ctx context.Context, body []byte) (gate.CheckAnswer, error) {
	c.n.Add(1)
	return c.fakeChecker.Check(ctx, body)
}

type countingRefunder struct {
	fakeRefunder
	n *atomic.Int64
}

func (r countingRefunder) Refund(ctx context.Context, body []byte, src gate.RefundSource) (gate.RefundResult, error) {
	r.n.Add(1)
	return r.fakeRefunder.Refund(ctx, body, src)
}

// browserServer is a gate API with every endpoint that changes state, the
// given token (empty: none, the default) and allowed hosts.
func browserServer(t *testing.T, tok string, allowed ...string) (*httptest.Server, *reached) {
	t.Helper()
	n := &reached{}
	srv := httptest.NewServer(NewServer(Options{
		Rules: fakeRules{}, Reports: &fakeStore{}, Token: tok, AllowedHosts: allowed,
		Checker:     countingChecker{fakeChecker{answer: gate.CheckAnswer{Decision: gate.OutcomeForward, Admitted: true}}, &n.checks},
		Refunder:    countingRefunder{n: &n.refunds},
		Preferences: &prefStore{prefs: map[string]gate.Preferences{}},
		Preview:     &fakePreviewer{},
	}))
	t.Cleanup(srv.Close)
	return srv, n
}

// sendHeaders sends one request with the given headers (Host among them, when
// set) and returns the status and the error body's message.
func sendHeaders(t *testing.T, srv *httptest.Server, method, path, body string, headers map[string][]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range headers {
		if k == "Host" {
			req.Host = vs[0]
			continue
		}
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&e) // 204 has no body
	return resp.StatusCode, e.Error
}

// stateChanging are the requests of a gate's API that change state, each
// valid as it stands (a JSON body declared so), with the status it gets
// when nothing refuses it.
var stateChanging = []struct {
	method, path, body string
	ok                 int
}{
	{http.MethodPost, "/v1/check", validCheck, http.StatusOK},
	{http.MethodPost, "/v1/refund", `{"id":"done"}`, http.StatusOK},
	{http.MethodPut, "/v1/recipients/open_id:u1/preferences", `{"muted_scenes":["s"]}`, http.StatusOK},
	{http.MethodDelete, "/v1/recipients/open_id:u1/preferences", "", http.StatusNoContent},
	{http.MethodPost, "/v1/rules/preview", "scenes: {}\n", http.StatusOK},
}

// TestCrossSiteRequestsRefused: every request that may change state is
// refused with 403 and the API's error body when a browser marks it as
// coming from another site's page (Sec-Fetch-Site cross-site or same-site)
// or its Origin is not the gate's own (null, another host, another port),
// and never reaches the check or the refund; the gate's own page and
// clients outside a browser pass. A GET is not refused.
func TestCrossSiteRequestsRefused(t *testing.T) {
	srv, n := browserServer(t, "")
	own := srv.URL // http://127.0.0.1:port
	port := own[strings.LastIndex(own, ":")+1:]
	json := []string{"application/json"}
	refused := []map[string][]string{
		{"Sec-Fetch-Site": {"cross-site"}},
		{"Sec-Fetch-Site": {"same-site"}, "Origin": {own}},
		{"Sec-Fetch-Site": {"Cross-Site"}},
		{"Origin": {"http://evil.example"}},
		{"Origin": {"null"}},
		{"Origin": {"http://127.0.0.1:1"}},
		{"Origin": {"http://127.0.0.2:" + port}},
		{"Origin": {"http://localhost:" + port}}, // the page is on another host than the one it posts to
		{"Origin": {own, "http://evil.example"}},
		{"Origin": {own + "/path"}},
		{"Origin": {"file://"}},
	}
	for _, rq := range stateChanging {
		for _, h := range refused {
			h["Content-Type"] = json
			code, msg := sendHeaders(t, srv, rq.method, rq.path, rq.body, h)
			if code != http.StatusForbidden || !strings.Contains(msg, "refused") {
				t.Errorf("%s %s with %v: %d %q, want 403 saying it is refused", rq.method, rq.path, h, code, msg)
			}
		}
	}
	if c, r := n.checks.Load(), n.refunds.Load(); c != 0 || r != 0 {
		t.Fatalf("refused requests reached %d checks and %d refunds, want none", c, r)
	}

	passed := []map[string][]string{
		{}, // curl, a service's client
		{"Sec-Fetch-Site": {"same-origin"}, "Origin": {own}},
		{"Sec-Fetch-Site": {"none"}},
		{"Origin": {"HTTP://127.0.0.1:" + port}},
	}
	for _, rq := range stateChanging {
		for _, h := range passed {
			h["Content-Type"] = json
			if code, msg := sendHeaders(t, srv, rq.method, rq.path, rq.body, h); code != rq.ok {
				t.Errorf("%s %s with %v: %d %q, want %d", rq.method, rq.path, h, code, msg, rq.ok)
			}
		}
	}
	if code, _ := sendHeaders(t, srv, http.MethodGet, "/v1/rules", "", map[string][]string{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"null"}}); code != http.StatusOK {
		t.Errorf("GET /v1/rules from another site: %d, want 200 (the page cannot read it)", code)
	}
}

// TestCrossSiteBeforeToken: the cross-site refusal comes before the token
// check: a page of another site learns nothing of the token, and a stolen
// token sent from a page is refused all the same.
func TestCrossSiteBeforeToken(t *testing.T) {
	srv, n := browserServer(t, token)
	for _, auth := range []string{"", "Bearer " + token} {
		h := map[string][]string{"Origin": {"http://evil.example"}, "Content-Type": {"application/json"}}
		if auth != "" {
			h["Authorization"] = []string{auth}
		}
		if code, msg := sendHeaders(t, srv, http.MethodPost, "/v1/check", validCheck, h); code != http.StatusForbidden {
			t.Errorf("POST /v1/check from evil.example, Authorization %q: %d %q, want 403", auth, code, msg)
		}
	}
	if n.checks.Load() != 0 {
		t.Fatal("a cross-site check reached the checker")
	}
}

// TestOriginOfAllowedHosts: an Origin whose host is in AllowedHosts is the
// gate's own at any port and scheme (a proxy in front may change both, and
// the Host), and one that names the Host the request was sent to is the
// gate's own when the ports agree, a missing port being the scheme's
// default. * lets any Host through, not any Origin.
func TestOriginOfAllowedHosts(t *testing.T) {
	tests := []struct {
		allowed      []string
		host, origin string
		want         bool
	}{
		{[]string{"gate.example.com"}, "gate.example.com", "https://gate.example.com", true},
		{[]string{"gate.example.com"}, "10.0.0.5:8080", "https://GATE.example.com.:8443", true},
		{nil, "gate.example.com", "https://gate.example.com", true},
		{nil, "gate.example.com", "http://gate.example.com", true},
		{nil, "gate.example.com:8443", "https://gate.example.com:8443", true},
		{nil, "gate.example.com:8443", "https://gate.example.com", false},
		{nil, "[::1]:8080", "http://[0:0::1]:8080", true},
		{nil, "[::1]:8080", "http://[::1]:8081", false},
		{nil, "gate.example.com", "https://evil.example.com", false},
		{[]string{"*"}, "gate.example.com", "https://evil.example.com", false},
		{[]string{"gate.example.com"}, "gate.example.com", "ftp://gate.example.com", false},
		{[]string{"gate.example.com"}, "gate.example.com", "https://user@gate.example.com", false},
		{[]string{"gate.example.com"}, "gate.example.com", "null", false},
		{[]string{"gate.example.com"}, "gate.example.com", "", false},
	}
	for _, tt := range tests {
		if got := ownOrigin(tt.origin, tt.host, originHosts(tt.allowed)); got != tt.want {
			t.Errorf("allowed %v, Host %q, Origin %q: own %v, want %v", tt.allowed, tt.host, tt.origin, got, tt.want)
		}
	}
	// Through the server: the Host check lets the allowed name in, and
	// the Origin of that name passes.
	srv, _ := browserServer(t, "", "gate.example.com")
	h := map[string][]string{"Host": {"gate.example.com"}, "Origin": {"https://gate.example.com"},
		"Sec-Fetch-Site": {"same-origin"}, "Content-Type": {"application/json"}}
	if code, msg := sendHeaders(t, srv, http.MethodPost, "/v1/check", validCheck, h); code != http.StatusOK {
		t.Errorf("POST /v1/check from the allowed host's page: %d %q, want 200", code, msg)
	}
}

// TestJSONBodyRequired: the check, the refund and a PUT of preferences
// take only a body declared application/json (parameters allowed), and
// answer 415 saying so otherwise, before reaching the check or the
// refund; the rule preview takes a rule document as any text, and a
// DELETE has no body.
func TestJSONBodyRequired(t *testing.T) {
	srv, n := browserServer(t, "")
	for _, rq := range stateChanging {
		takesJSON := rq.method != http.MethodDelete && rq.path != "/v1/rules/preview"
		checks, refunds := n.checks.Load(), n.refunds.Load()
		for _, ct := range []string{"", "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded",
			"multipart/form-data; boundary=x", "application/json-patch+json", "application/jsonx", "application/json; charset"} {
			h := map[string][]string{}
			if ct != "" {
				h["Content-Type"] = []string{ct}
			}
			code, msg := sendHeaders(t, srv, rq.method, rq.path, rq.body, h)
			switch {
			case takesJSON && (code != http.StatusUnsupportedMediaType || !strings.Contains(msg, "Content-Type: application/json")):
				t.Errorf("%s %s with Content-Type %q: %d %q, want 415 naming application/json", rq.method, rq.path, ct, code, msg)
			case !takesJSON && code != rq.ok:
				t.Errorf("%s %s with Content-Type %q: %d %q, want %d", rq.method, rq.path, ct, code, msg, rq.ok)
			}
		}
		if c, r := n.checks.Load()-checks, n.refunds.Load()-refunds; c != 0 || r != 0 {
			t.Fatalf("%s %s: bodies not declared JSON reached %d checks and %d refunds, want none", rq.method, rq.path, c, r)
		}
		for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;charset=UTF-8"} {
			if code, msg := sendHeaders(t, srv, rq.method, rq.path, rq.body, map[string][]string{"Content-Type": {ct}}); code != rq.ok {
				t.Errorf("%s %s with Content-Type %q: %d %q, want %d", rq.method, rq.path, ct, code, msg, rq.ok)
			}
		}
	}
}

// TestWildcardHostVouchesForNoOrigin: with * among the allowed hosts any
// Host gets in, so a page that points its own name at the gate (DNS
// rebinding) sends that name as both Host and Origin. Such a request that
// may change state is refused and never reaches the check or the refund,
// whether it carries an Origin or only Sec-Fetch-Site; one sent to a
// loopback name or a named host, or from a named host's page, passes, and
// so does a client outside a browser on any Host. Reads stay open to any
// Host: that is what * says.
func TestWildcardHostVouchesForNoOrigin(t *testing.T) {
	srv, n := browserServer(t, "", "*", "gate.example.com")
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	evil := "evil.example:" + port
	json := []string{"application/json"}
	refused := []map[string][]string{
		{"Host": {evil}, "Origin": {"http://" + evil}},
		{"Host": {evil}, "Origin": {"http://" + evil}, "Sec-Fetch-Site": {"same-origin"}},
		{"Host": {evil}, "Sec-Fetch-Site": {"same-origin"}},
		{"Host": {"evil.example"}, "Origin": {"http://evil.example"}},
		{"Host": {"10.0.0.5:" + port}, "Origin": {"http://10.0.0.5:" + port}},
	}
	for _, rq := range stateChanging {
		for _, h := range refused {
			h["Content-Type"] = json
			code, msg := sendHeaders(t, srv, rq.method, rq.path, rq.body, h)
			if code != http.StatusForbidden || !strings.Contains(msg, "DNS rebinding") {
				t.Errorf("%s %s with %v: %d %q, want 403 naming DNS rebinding", rq.method, rq.path, h, code, msg)
			}
		}
	}
	if c, r := n.checks.Load(), n.refunds.Load(); c != 0 || r != 0 {
		t.Fatalf("rebound pages reached %d checks and %d refunds, want none", c, r)
	}

	passed := []map[string][]string{
		{"Host": {evil}}, // curl, a service's client: no browser headers
		{"Host": {"localhost:" + port}, "Origin": {"http://localhost:" + port}, "Sec-Fetch-Site": {"same-origin"}},
		{"Host": {"127.0.0.1:" + port}, "Origin": {"http://127.0.0.1:" + port}},
		{"Host": {"[::1]:" + port}, "Sec-Fetch-Site": {"same-origin"}},
		{"Host": {"gate.example.com"}, "Origin": {"https://gate.example.com"}},
		{"Host": {"10.0.0.5:" + port}, "Origin": {"https://gate.example.com:8443"}}, // behind a proxy that rewrites Host
	}
	for _, rq := range stateChanging {
		for _, h := range passed {
			h["Content-Type"] = json
			if code, msg := sendHeaders(t, srv, rq.method, rq.path, rq.body, h); code != rq.ok {
				t.Errorf("%s %s with %v: %d %q, want %d", rq.method, rq.path, h, code, msg, rq.ok)
			}
		}
	}
	if code, msg := sendHeaders(t, srv, http.MethodGet, "/v1/rules", "", map[string][]string{"Host": {evil}, "Origin": {"http://" + evil}}); code != http.StatusOK {
		t.Errorf("GET /v1/rules with Host %s: %d %q, want 200 (* lets any host read)", evil, code, msg)
	}
}

// TestAllowedHostOriginAnyPort: an allowed host given without a port is
// the gate's own origin at any port and scheme, whatever port the request
// was sent to (a proxy in front may listen on another, and rewrite Host),
// through the server; a loopback name, not named, is the gate's own only
// at the port the request was sent to.
func TestAllowedHostOriginAnyPort(t *testing.T) {
	srv, n := browserServer(t, "", "gate.example.com")
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	for _, tt := range []struct {
		host, origin string
		want         int
	}{
		{"gate.example.com:" + port, "https://gate.example.com:8443", http.StatusOK},
		{"gate.example.com:" + port, "http://gate.example.com:1", http.StatusOK},
		{"gate.example.com:" + port, "https://gate.example.com", http.StatusOK},
		{"gate.example.com", "http://gate.example.com:8080", http.StatusOK},
		{"localhost:" + port, "https://GATE.example.com.:9443", http.StatusOK},
		{"localhost:" + port, "http://localhost:1", http.StatusForbidden},
		{"localhost:" + port, "http://gate.example.org:" + port, http.StatusForbidden},
	} {
		before := n.checks.Load()
		h := map[string][]string{"Host": {tt.host}, "Origin": {tt.origin}, "Content-Type": {"application/json"}}
		code, msg := sendHeaders(t, srv, http.MethodPost, "/v1/check", validCheck, h)
		if code != tt.want {
			t.Errorf("POST /v1/check to Host %s from Origin %s: %d %q, want %d", tt.host, tt.origin, code, msg, tt.want)
		}
		wantReached := int64(0)
		if tt.want == http.StatusOK {
			wantReached = 1
		}
		if reached := n.checks.Load() - before; reached != wantReached {
			t.Errorf("POST /v1/check to Host %s from Origin %s reached the checker %d times, want %d", tt.host, tt.origin, reached, wantReached)
		}
	}
}
