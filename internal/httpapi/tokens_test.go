package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
)

const readToken = "r3ad-only"

// tokenServer is a gate API with every endpoint, the writing token token
// and the reading token readToken.
func tokenServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewServer(Options{
		Rules: fakeRules{}, Reports: &fakeStore{}, Token: token, ReadToken: readToken,
		Checker:     fakeChecker{answer: gate.CheckAnswer{Decision: gate.OutcomeForward, Admitted: true}},
		Refunder:    fakeRefunder{},
		RefundLog:   fakeRefundLog{},
		Canceller:   fakeCanceller{},
		Preferences: &prefStore{prefs: map[string]gate.Preferences{}},
		Preview:     &fakePreviewer{},
	}))
	t.Cleanup(srv.Close)
	return srv
}

// operation is one method and path of the OpenAPI document, with the
// schemes its security accepts, sorted.
type operation struct {
	method, path string
	schemes      []string
}

// apiOperations lists the document's /v1/ operations.
func apiOperations(t *testing.T) []operation {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	var ops []operation
	for path, methods := range doc.Paths {
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		for method, raw := range methods {
			var op struct {
				Security *[]map[string][]string `json:"security"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			if op.Security == nil {
				t.Errorf("%s %s states no security of its own: each /v1/ operation names the tokens it accepts", method, path)
				continue
			}
			var schemes []string
			for _, req := range *op.Security {
				for name := range req {
					schemes = append(schemes, name)
				}
			}
			sort.Strings(schemes)
			ops = append(ops, operation{strings.ToUpper(method), path, schemes})
		}
	}
	return ops
}

// callToken sends method path with the bearer token tok (none when empty) and a
// JSON body, and returns the status, the WWW-Authenticate header and the
// error body's message.
func callToken(t *testing.T, srv *httptest.Server, method, path, tok string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+strings.ReplaceAll(path, "{recipient}", "open_id:u1"), strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e struct{ Error string }
	_ = json.NewDecoder(resp.Body).Decode(&e) // 200s of other shapes and 204 leave it empty
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), e.Error
}

// TestReadTokenReadsOnly: on every /v1/ operation of the OpenAPI
// document, the writing token gets past the token check; the reading token
// gets past it on the operations that only read, and on the check, the
// refund and a PUT or DELETE of preferences gets 403 saying the writing
// token is needed; no token, or another, gets 401. Each operation's
// security in the document lists exactly the tokens the server accepts.
func TestReadTokenReadsOnly(t *testing.T) {
	srv := tokenServer(t)
	var writing []string
	for _, op := range apiOperations(t) {
		name := op.method + " " + op.path
		for _, tok := range []string{"", "wrong", strings.ToUpper(readToken)} {
			if code, _, msg := callToken(t, srv, op.method, op.path, tok); code != http.StatusUnauthorized {
				t.Errorf("%s with token %q: %d %q, want 401", name, tok, code, msg)
			}
		}
		if code, _, msg := callToken(t, srv, op.method, op.path, token); code == http.StatusUnauthorized || code == http.StatusForbidden {
			t.Errorf("%s with the writing token: %d %q, want it past the token check", name, code, msg)
		}
		code, auth, msg := callToken(t, srv, op.method, op.path, readToken)
		want := []string{"readToken", "writeToken"}
		switch {
		case code == http.StatusForbidden:
			writing = append(writing, name)
			want = []string{"writeToken"}
			if !strings.Contains(msg, "needs the writing token (GATE_API_TOKEN)") || !strings.Contains(auth, `error="insufficient_scope"`) {
				t.Errorf("%s with the reading token: 403 %q, WWW-Authenticate %q; want the message to name the writing token and insufficient_scope", name, msg, auth)
			}
		case code == http.StatusUnauthorized:
			t.Errorf("%s with the reading token: 401 %q, want it accepted or refused with 403", name, msg)
		}
		if !slices.Equal(op.schemes, want) {
			t.Errorf("%s: the document's security lists %v; the server accepts %v", name, op.schemes, want)
		}
	}
	sort.Strings(writing)
	wantWriting := []string{"DELETE " + preferencesPath, "POST /v1/cancel", "POST /v1/check", "POST /v1/refund", "PUT " + preferencesPath}
	if !slices.Equal(writing, wantWriting) {
		t.Errorf("the reading token is refused on %v, want exactly the endpoints that change state %v", writing, wantWriting)
	}
}

// TestReadTokenOnRequests: through the server, the reading token reads the
// reports, previews a rule document and reads preferences (the scheme name
// in any case), and cannot check, refund, or change preferences, which
// the writing token then can.
func TestReadTokenOnRequests(t *testing.T) {
	srv := tokenServer(t)
	do := func(method, path, scheme, tok, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", scheme+" "+tok)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}
	for _, rq := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/suppressions", ""},
		{http.MethodGet, "/v1/suppressions.csv", ""},
		{http.MethodGet, "/v1/reports/summary", ""},
		{http.MethodGet, "/v1/rules", ""},
		{http.MethodGet, "/v1/refunds", ""},
		{http.MethodPost, "/v1/rules/preview", "scenes: {}\n"},
	} {
		for _, scheme := range []string{"Bearer", "bearer"} {
			if code, msg := do(rq.method, rq.path, scheme, readToken, rq.body); code != http.StatusOK {
				t.Errorf("%s %s with %s and the reading token: %d %q, want 200", rq.method, rq.path, scheme, code, msg)
			}
		}
	}
	for _, rq := range stateChanging {
		if rq.path == "/v1/rules/preview" {
			continue // it changes nothing: above
		}
		if code, msg := do(rq.method, rq.path, "Bearer", readToken, rq.body); code != http.StatusForbidden || !strings.Contains(msg, "writing token") {
			t.Errorf("%s %s with the reading token: %d %q, want 403 naming the writing token", rq.method, rq.path, code, msg)
		}
		if code, msg := do(rq.method, rq.path, "Bearer", token, rq.body); code != rq.ok {
			t.Errorf("%s %s with the writing token: %d %q, want %d", rq.method, rq.path, code, msg, rq.ok)
		}
	}
	// The preferences the writing token set (and then deleted) are readable
	// with the reading one in between.
	if code, msg := do(http.MethodPut, "/v1/recipients/open_id:u2/preferences", "Bearer", token, `{"muted_scenes":["s"]}`); code != http.StatusOK {
		t.Fatalf("PUT preferences with the writing token: %d %q", code, msg)
	}
	if code, msg := do(http.MethodGet, "/v1/recipients/open_id:u2/preferences", "Bearer", readToken, ""); code != http.StatusOK {
		t.Errorf("GET preferences with the reading token: %d %q, want 200", code, msg)
	}
}

// TestEmptyReadTokenOpensNothing: a gate with a writing token and no
// reading token takes no empty bearer token anywhere, and one without a
// writing token is open whatever ReadToken says (gate serve refuses to
// start so: writes would be open while reads are closed).
func TestEmptyReadTokenOpensNothing(t *testing.T) {
	srv := newTestServer(t, &fakeStore{})
	for _, auth := range []string{"Bearer", "Bearer ", "Bearer  "} {
		if code, _, body := send(t, srv, http.MethodGet, "/v1/rules", "", auth); code != http.StatusUnauthorized {
			t.Errorf("GET /v1/rules with Authorization %q: %d %s, want 401", auth, code, body)
		}
	}
	open := httptest.NewServer(NewServer(Options{Rules: fakeRules{}, Reports: &fakeStore{}, ReadToken: readToken}))
	defer open.Close()
	if code, _, msg := callToken(t, open, http.MethodGet, "/v1/rules", ""); code != http.StatusOK {
		t.Errorf("GET /v1/rules of a gate without a writing token: %d %q, want 200", code, msg)
	}
}
