package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// fakeChecker parses the body as the real checker does and answers with
// answer, or fails with err.
type fakeChecker struct {
	answer gate.CheckAnswer
	err    error
	got    *[]byte
}

func (f fakeChecker) Check(_ context.Context, body []byte) (gate.CheckAnswer, error) {
	if f.got != nil {
		*f.got = body
	}
	if _, err := gate.ParseCheck(body); err != nil {
		return gate.CheckAnswer{}, err
	}
	return f.answer, f.err
}

func checkServer(t *testing.T, c Checker) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewServer(Options{Rules: fakeRules{}, Reports: &fakeStore{}, Token: token, Checker: c}))
	t.Cleanup(srv.Close)
	return srv
}

func postCheck(t *testing.T, srv *httptest.Server, body string, withToken bool) (int, http.Header, string) {
	t.Helper()
	return request(t, srv, http.MethodPost, "/v1/check", body, withToken)
}

// request sends body to path with method, with the API token when
// withToken, and returns the answer's status, headers and body: what the
// tests of the check, preview, preferences and refund paths call. A POST
// or PUT says its body is JSON, as those endpoints require.
func request(t *testing.T, srv *httptest.Server, method, path, body string, withToken bool) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost || method == http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	if withToken {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

const validCheck = `{"id":"c1","scene":"s","receive_id":"u"}`

func TestCheckEndpoint(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	answer := gate.CheckAnswer{Decision: gate.OutcomeForward, Admitted: true, Count: 1, RulesVersion: "v1", DecidedAt: at}
	srv := checkServer(t, fakeChecker{answer: answer})
	code, hdr, body := postCheck(t, srv, validCheck, true)
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("got %d %s: %s", code, hdr.Get("Content-Type"), body)
	}
	var got gate.CheckAnswer
	if err := json.Unmarshal([]byte(body), &got); err != nil || !reflect.DeepEqual(got, answer) {
		t.Errorf("got %s (%v), want %+v", body, err, answer)
	}
	if code, _, _ := postCheck(t, srv, validCheck, false); code != http.StatusUnauthorized {
		t.Errorf("without the token: got %d, want 401", code)
	}
	code, hdr, body = get(t, srv, http.MethodGet, "/v1/check", true)
	if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "POST" || !strings.Contains(body, `"error"`) {
		t.Errorf("GET: got %d Allow %q %s, want 405 with Allow: POST", code, hdr.Get("Allow"), body)
	}
}

func TestCheckEndpointErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		body string
		want int
	}{
		{"not JSON", nil, `not json`, http.StatusBadRequest},
		{"empty", nil, ``, http.StatusBadRequest},
		{"unknown field", nil, `{"id":"c1","scene":"s","receive_id":"u","dryrun":true}`, http.StatusBadRequest},
		{"over the bound", nil, `{"id":"c1","scene":"s","receive_id":"u","tz":"` + strings.Repeat("x", gate.MaxCheckBytes) + `"}`, http.StatusBadRequest},
		{"store down", fmt.Errorf("redis: %w", gate.ErrUnavailable), validCheck, http.StatusServiceUnavailable},
		{"bug", errors.New("nil map"), validCheck, http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []byte
			srv := checkServer(t, fakeChecker{err: tt.err, got: &got})
			code, _, body := postCheck(t, srv, tt.body, true)
			var e struct {
				Error string `json:"error"`
			}
			if code != tt.want || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
				t.Errorf("got %d %s, want %d with an error body", code, body, tt.want)
			}
			if len(got) > gate.MaxCheckBytes+1 {
				t.Errorf("the checker was handed %d bytes, over the bound", len(got))
			}
			if strings.Contains(body, "redis") || strings.Contains(body, "nil map") {
				t.Errorf("the answer quotes the store's words: %s", body)
			}
		})
	}
}

func TestCheckEndpointWithoutChecker(t *testing.T) {
	srv := checkServer(t, nil)
	if code, _, body := postCheck(t, srv, validCheck, true); code != http.StatusNotFound {
		t.Errorf("got %d %s, want 404", code, body)
	}
}

// TestOpenAPICheckSchemas keeps the check's schemas in step with the types:
// the answer's and limit's properties are what they encode, and every
// property the request schema names is one a check accepts.
func TestOpenAPICheckSchemas(t *testing.T) {
	doc := loadOpenAPI(t)
	for name, v := range map[string]any{"CheckAnswer": gate.CheckAnswer{}, "CheckLimit": gate.CheckLimit{}} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Fatalf("schema %s is missing", name)
		}
		all, optional := jsonFields(reflect.TypeOf(v))
		props := slices.Sorted(func(yield func(string) bool) {
			for p := range s.Properties {
				if !yield(p) {
					return
				}
			}
		})
		sort.Strings(all)
		if !slices.Equal(all, props) {
			t.Errorf("schema %s has %v; %T encodes %v", name, props, v, all)
		}
		var required []string
		for _, f := range all {
			if !slices.Contains(optional, f) {
				required = append(required, f)
			}
		}
		if got := slices.Sorted(slices.Values(s.Required)); !slices.Equal(got, required) {
			t.Errorf("schema %s requires %v; %T always writes %v", name, got, v, required)
		}
	}
	req := doc.Components.Schemas["CheckRequest"]
	body := map[string]any{}
	values := map[string]any{"id": "c", "scene": "s", "receive_id": "u", "receive_id_type": "email",
		"priority": "low", "tz": "Asia/Shanghai", "dry_run": true}
	for p := range req.Properties {
		v, ok := values[p]
		if !ok {
			t.Errorf("CheckRequest names %q, which this test does not know", p)
		}
		body[p] = v
	}
	b, _ := json.Marshal(body)
	if _, err := gate.ParseCheck(b); err != nil {
		t.Errorf("a check with every property of CheckRequest is refused: %v", err)
	}
	if req.AdditionalProperties == nil || *req.AdditionalProperties {
		t.Error("CheckRequest must say additionalProperties: false, as the check refuses unknown fields")
	}
}
