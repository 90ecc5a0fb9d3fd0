package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// The two HTTP tokens of TestServeReadToken.
const (
	apiWriteToken = "wr1te-s3cret"
	apiReadToken  = "r3ad-s3cret"
)

// apiCall sends method path to g with the bearer token tok and a JSON body
// (none when empty), and returns the status and the body.
func (g *gateProc) apiCall(method, path, tok, body string) (int, string) {
	g.t.Helper()
	req, err := http.NewRequest(method, g.base+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeReadToken: a gate with GATE_API_TOKEN and GATE_API_READ_TOKEN
// (real NATS, Redis and PostgreSQL). The reading token reads the reports,
// the rules, the refunds, a preview and preferences; on the check, the
// refund and a PUT of preferences it gets 403 naming the writing token,
// and changes nothing: the refused refund hands back no slot and the
// refused check takes none. The writing token then does both. Another
// token gets 401.
func TestServeReadToken(t *testing.T) {
	e := newEnv(t, stackReal, refundRules)
	g := e.start(map[string]string{"GATE_API_TOKEN": apiWriteToken, "GATE_API_READ_TOKEN": apiReadToken})
	c := e.client()
	to, checked := testenv.Unique("read-token"), testenv.Unique("read-token-check")
	m := func(name string) msg { return msg{ID: to + "-" + name, Scene: "r.alert", To: to} }
	c.send(m("A"), m("B"))
	if got, _ := c.forwarded(to); !slices.Equal(got, []string{m("A").ID}) {
		t.Fatalf("forwarded %v, want A alone under 1/h", got)
	}

	q := url.Values{"recipient": {"open_id:" + to}}.Encode()
	for _, path := range []string{"/v1/suppressions?" + q, "/v1/suppressions.csv?" + q, "/v1/reports/summary",
		"/v1/reports/timeseries", "/v1/reports/top-recipients", "/v1/rules", "/v1/refunds", "/v1/openapi.json"} {
		if code, body := g.apiCall(http.MethodGet, path, apiReadToken, ""); code != http.StatusOK {
			t.Errorf("GET %s with the reading token: %d %s, want 200", path, code, body)
		}
	}
	var page gate.SuppressionPage
	if code, body := g.apiCall(http.MethodGet, "/v1/suppressions?"+q, apiReadToken, ""); code != http.StatusOK ||
		json.Unmarshal([]byte(body), &page) != nil || len(page.Items) != 1 || page.Items[0].MessageID != m("B").ID {
		t.Errorf("suppressions of %s with the reading token: %d %s, want B's row", to, code, body)
	}
	// gate report, which only reads, takes the reading token.
	var report, reportErr strings.Builder
	if err := run(t.Context(), []string{"report", "suppressions", "--recipient", "open_id:" + to, "--server", g.base},
		func(k string) string { return map[string]string{"GATE_API_READ_TOKEN": apiReadToken}[k] }, nil, &report, &reportErr); err != nil ||
		!strings.Contains(report.String(), m("B").ID) {
		t.Errorf("gate report with GATE_API_READ_TOKEN alone: %v %s\n%s, want B's row", err, reportErr.String(), report.String())
	}
	if code, body := g.postPreview("since=1h", refundRules, apiReadToken); code != http.StatusOK {
		t.Errorf("POST /v1/rules/preview with the reading token: %d %s, want 200", code, body)
	}
	prefs := "/v1/recipients/open_id:" + to + "/preferences"
	if code, body := g.apiCall(http.MethodGet, prefs, apiReadToken, ""); code != http.StatusNotFound {
		t.Errorf("GET preferences with the reading token: %d %s, want 404 (none set; past the token)", code, body)
	}

	refused := []struct{ method, path, body string }{
		{http.MethodPost, "/v1/refund", `{"id":"` + m("A").ID + `"}`},
		{http.MethodPost, "/v1/check", fmt.Sprintf(`{"id":%q,"scene":"r.alert","receive_id_type":"open_id","receive_id":%q}`, checked+"-X", checked)},
		{http.MethodPut, prefs, `{"muted_scenes":["r.alert"]}`},
		{http.MethodDelete, prefs, ""},
	}
	for _, rq := range refused {
		code, body := g.apiCall(rq.method, rq.path, apiReadToken, rq.body)
		if code != http.StatusForbidden || !strings.Contains(body, "needs the writing token (GATE_API_TOKEN)") {
			t.Errorf("%s %s with the reading token: %d %s, want 403 naming the writing token", rq.method, rq.path, code, body)
		}
		if code, body := g.apiCall(rq.method, rq.path, "n0t-a-token", rq.body); code != http.StatusUnauthorized {
			t.Errorf("%s %s with another token: %d %s, want 401", rq.method, rq.path, code, body)
		}
	}
	if code, body := g.apiCall(http.MethodGet, "/v1/rules", "n0t-a-token", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/rules with another token: %d %s, want 401", code, body)
	}

	// The refused refund handed back no slot: C is held back by A.
	c.send(m("C"))
	if got, _ := c.forwarded(to); !slices.Equal(got, []string{m("A").ID}) {
		t.Fatalf("forwarded %v, want A alone: the reading token's refund freed A's slot", got)
	}
	// The refused check took no slot: the writing token's check has it.
	code, body := g.apiCall(http.MethodPost, "/v1/check", apiWriteToken,
		fmt.Sprintf(`{"id":%q,"scene":"r.alert","receive_id_type":"open_id","receive_id":%q}`, checked+"-Y", checked))
	var answer gate.CheckAnswer
	if code != http.StatusOK || json.Unmarshal([]byte(body), &answer) != nil || !answer.Admitted {
		t.Errorf("check of %s with the writing token: %d %s, want admitted: the reading token's check took the slot", checked, code, body)
	}
	// The writing token refunds A, and D takes the slot back.
	if code, body := g.apiCall(http.MethodPost, "/v1/refund", apiWriteToken, `{"id":"`+m("A").ID+`"}`); code != http.StatusOK {
		t.Fatalf("refund of A with the writing token: %d %s, want 200", code, body)
	}
	c.send(m("D"))
	if got, _ := c.forwarded(to); !slices.Equal(got, []string{m("A").ID, m("D").ID}) {
		t.Errorf("forwarded %v, want A then D after the writing token's refund", got)
	}
	if code, body := g.apiCall(http.MethodPut, prefs, apiWriteToken, `{"muted_scenes":["r.alert"]}`); code != http.StatusOK {
		t.Errorf("PUT preferences with the writing token: %d %s, want 200", code, body)
	}
	if code, body := g.apiCall(http.MethodGet, prefs, apiReadToken, ""); code != http.StatusOK || !strings.Contains(body, "r.alert") {
		t.Errorf("GET preferences with the reading token after the PUT: %d %s, want 200 with the muted scene", code, body)
	}
}

// TestReadTokenSettings: GATE_API_READ_TOKEN (or --api-read-token) without
// GATE_API_TOKEN, or equal to it, is a usage error naming both variables
// and quoting neither token, and gate serve refuses to start so (exit
// status 2); with a writing token of its own it is taken.
func TestReadTokenSettings(t *testing.T) {
	for _, tt := range []struct {
		env      map[string]string
		args     []string
		wantErr  string
		wantRead string // the reading token taken, when no error
	}{
		{env: map[string]string{"GATE_API_READ_TOKEN": "r3ad"}, wantErr: "GATE_API_READ_TOKEN is set but GATE_API_TOKEN is empty"},
		{args: []string{"--api-read-token", "r3ad"}, wantErr: "GATE_API_READ_TOKEN is set but GATE_API_TOKEN is empty"},
		{env: map[string]string{"GATE_API_READ_TOKEN": "s4me", "GATE_API_TOKEN": "s4me"}, wantErr: "GATE_API_READ_TOKEN equals GATE_API_TOKEN"},
		{env: map[string]string{"GATE_API_TOKEN": "s4me"}, args: []string{"--api-read-token", " s4me "}, wantErr: "GATE_API_READ_TOKEN equals GATE_API_TOKEN"},
		{env: map[string]string{"GATE_API_READ_TOKEN": "r3ad", "GATE_API_TOKEN": "wr1te"}, wantRead: "r3ad"},
		{env: map[string]string{"GATE_API_READ_TOKEN": "r3ad", "GATE_API_TOKEN": "wr1te"}, args: []string{"--api-read-token", "fl4g"}, wantRead: "fl4g"},
		{env: map[string]string{"GATE_API_TOKEN": "wr1te"}},
	} {
		c, err := parseConfig(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		var ue *usageError
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%v %v: %v, want it taken", tt.env, tt.args, err)
		case tt.wantErr == "" && c.APIReadToken != tt.wantRead:
			t.Errorf("%v %v: reading token %q, want %q", tt.env, tt.args, c.APIReadToken, tt.wantRead)
		case tt.wantErr != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%v %v: %v, want a usage error saying %q", tt.env, tt.args, err, tt.wantErr)
		case err != nil && (strings.Contains(err.Error(), "r3ad") || strings.Contains(err.Error(), "s4me")):
			t.Errorf("%v %v: the error quotes a token: %v", tt.env, tt.args, err)
		}
	}

	// gate serve itself: refused before it listens or connects to anything.
	e := newEnv(t, stackEmbedded, refundRules)
	vars := e.settings(map[string]string{"GATE_API_READ_TOKEN": "r3ad"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, nil, io.Discard, io.Discard)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "GATE_API_TOKEN is empty") {
		t.Fatalf("gate serve with only GATE_API_READ_TOKEN: %v, want a usage error (exit status 2)", err)
	}
	if resp, err := http.Get("http://" + vars["GATE_HTTP_ADDR"] + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("gate serve with only GATE_API_READ_TOKEN answers on %s", vars["GATE_HTTP_ADDR"])
	}
}
