package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// fakePreviewer records what it was asked and answers err, or a preview
// that echoes the period.
type fakePreviewer struct {
	err          error
	doc          string
	since, until time.Time
	calls        int
}

func (f *fakePreviewer) Preview(_ context.Context, doc []byte, since, until time.Time) (*gate.RulePreview, error) {
	f.calls++
	f.doc, f.since, f.until = string(doc), since, until
	if f.err != nil {
		return nil, f.err
	}
	return &gate.RulePreview{Version: "v2", Since: since, Until: until, Decisions: 3, Replayed: 3,
		Scenes: []gate.ScenePreview{{Scene: "a", Then: gate.PreviewCounts{Forwarded: 3}, Now: gate.PreviewCounts{Forwarded: 1, Suppressed: 2}}},
		Total:  gate.ScenePreview{Then: gate.PreviewCounts{Forwarded: 3}, Now: gate.PreviewCounts{Forwarded: 1, Suppressed: 2}},
		Notes:  []string{"n"}}, nil
}

func previewServer(t *testing.T, p gate.Previewer) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewServer(Options{Rules: fakeRules{}, Reports: &fakeStore{}, Token: token, Preview: p}))
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, srv *httptest.Server, path, body string, withToken bool) (int, string) {
	t.Helper()
	code, _, b := request(t, srv, http.MethodPost, path, body, withToken)
	return code, b
}

func TestPreviewAnswers(t *testing.T) {
	f := &fakePreviewer{}
	srv := previewServer(t, f)
	before := time.Now()
	code, body := post(t, srv, "/v1/rules/preview?since=7d", "scenes: {}", true)
	if code != http.StatusOK {
		t.Fatalf("status %d, body %s; want 200", code, body)
	}
	var got gate.RulePreview
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	if got.Version != "v2" || len(got.Scenes) != 1 || got.Scenes[0].Now.Suppressed != 2 {
		t.Errorf("answer %+v, want the previewer's", got)
	}
	if f.doc != "scenes: {}" {
		t.Errorf("document %q, want the body", f.doc)
	}
	if d := f.until.Sub(f.since); d != 7*24*time.Hour || f.until.Before(before) {
		t.Errorf("period [%v, %v): want 7 days back from now", f.since, f.until)
	}

	code, body = post(t, srv, "/v1/rules/preview?since=2026-11-01T00:00:00Z&until=2026-11-02T00:00:00Z", "x", true)
	if code != http.StatusOK || !f.since.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) || !f.until.Equal(time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("RFC 3339 period: status %d (%s), period [%v, %v)", code, body, f.since, f.until)
	}

	code, _ = post(t, srv, "/v1/rules/preview", "x", true)
	if d := f.until.Sub(f.since); code != http.StatusOK || d != 24*time.Hour {
		t.Errorf("default period: status %d, %v long; want 200, 24h", code, d)
	}
}

func TestPreviewRefusals(t *testing.T) {
	f := &fakePreviewer{}
	srv := previewServer(t, f)
	for _, tc := range []struct {
		name, method, path, body string
		token                    bool
		code                     int
		want                     string
	}{
		{"no token", "POST", "/v1/rules/preview", "x", false, 401, "bearer token"},
		{"GET", "GET", "/v1/rules/preview", "", true, 405, "use POST"},
		{"bad since", "POST", "/v1/rules/preview?since=yesterday", "x", true, 400, "since must be a duration"},
		{"negative since", "POST", "/v1/rules/preview?since=-1h", "x", true, 400, "since must be"},
		{"bad until", "POST", "/v1/rules/preview?until=soon", "x", true, 400, "until must be an RFC 3339 time"},
		{"empty period", "POST", "/v1/rules/preview?since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z", "x", true, 400, "must be before until"},
		{"too large", "POST", "/v1/rules/preview", strings.Repeat("#", MaxPreviewBody+1), true, 413, "over 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.calls = 0
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.token {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct{ Error string }
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("status %d: body is not JSON: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tc.code || !strings.Contains(e.Error, tc.want) {
				t.Errorf("status %d, error %q; want %d and %q", resp.StatusCode, e.Error, tc.code, tc.want)
			}
			if f.calls != 0 {
				t.Errorf("the previewer was called %d times, want 0", f.calls)
			}
		})
	}
}

func TestPreviewErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		want string
	}{
		{fmt.Errorf("proposed document:3:5: max must be at least 1: %w", gate.ErrBadRequest), 400, "proposed document:3:5: max must be at least 1"},
		{fmt.Errorf("ledger: %w", gate.ErrUnavailable), 503, "unavailable"},
	} {
		srv := previewServer(t, &fakePreviewer{err: tc.err})
		code, body := post(t, srv, "/v1/rules/preview", "x", true)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("previewer error %v: status %d, body %s; want %d and %q", tc.err, code, body, tc.code, tc.want)
		}
	}
}

func TestPreviewAbsentWithoutPreviewer(t *testing.T) {
	srv := previewServer(t, nil)
	if code, body := post(t, srv, "/v1/rules/preview", "x", true); code != http.StatusNotFound {
		t.Errorf("status %d, body %s; want 404 when no previewer is configured", code, body)
	}
}
