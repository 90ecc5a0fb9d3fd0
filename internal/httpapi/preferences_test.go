package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// prefStore keeps preferences in memory, as the audit store does: Put
// checks them and stamps them; fail, when set, fails every call.
type prefStore struct {
	mu    sync.Mutex
	prefs map[string]gate.Preferences
	fail  error
}

func (s *prefStore) Preferences(_ context.Context, rs []string) (map[string]gate.Preferences, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	out := map[string]gate.Preferences{}
	for _, r := range rs {
		if p, ok := s.prefs[r]; ok {
			out[r] = p
		}
	}
	return out, nil
}

func (s *prefStore) PutPreferences(_ context.Context, p gate.Preferences) (gate.Preferences, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return gate.Preferences{}, s.fail
	}
	if err := p.Check(); err != nil {
		return gate.Preferences{}, err
	}
	p.UpdatedAt = time.Unix(1, 0).UTC()
	s.prefs[p.Recipient] = p
	return p, nil
}

func (s *prefStore) DeletePreferences(_ context.Context, r string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.prefs, r)
	return s.fail
}

func (s *prefStore) PreferenceChanges(context.Context, time.Time, int) ([]gate.PreferenceChange, time.Time, error) {
	return nil, time.Time{}, nil
}

func call(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	code, _, b := request(t, srv, method, path, body, true)
	return code, b
}

func TestPreferencesAPI(t *testing.T) {
	st := &prefStore{prefs: map[string]gate.Preferences{}}
	srv := httptest.NewServer(NewServer(Options{Rules: fakeRules{}, Reports: &fakeStore{}, Token: token, Preferences: st}))
	t.Cleanup(srv.Close)
	const path = "/v1/recipients/open_id:ou_1/preferences"

	if code, body := call(t, srv, "GET", path, ""); code != http.StatusNotFound || !strings.Contains(body, `"error"`) {
		t.Errorf("GET before any: %d %s, want 404 with an error", code, body)
	}
	code, body := call(t, srv, "PUT", path, `{"muted_scenes":["b","a"],"muted_until":"2026-12-01t08:00:00+01:00","digest_only":["c"]}`)
	if code != http.StatusOK {
		t.Fatalf("PUT: %d %s, want 200", code, body)
	}
	var got gate.Preferences
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := gate.Preferences{Recipient: "open_id:ou_1", MutedScenes: []string{"a", "b"}, DigestScenes: []string{"c"},
		MutedUntil: time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC), UpdatedAt: time.Unix(1, 0).UTC()}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("PUT answered %+v, want %+v", got, want)
	}
	if code, body := call(t, srv, "GET", path, ""); code != http.StatusOK || !strings.Contains(body, `"digest_only": [`) {
		t.Errorf("GET: %d %s, want 200 with digest_only", code, body)
	}
	// A recipient escaped in the path is its key unescaped.
	if code, body := call(t, srv, "PUT", "/v1/recipients/email:a%2Fb%40c/preferences", `{}`); code != http.StatusOK || !strings.Contains(body, `"email:a/b@c"`) {
		t.Errorf("PUT escaped: %d %s, want 200 for email:a/b@c", code, body)
	}
	for range 2 {
		if code, body := call(t, srv, "DELETE", path, ""); code != http.StatusNoContent || body != "" {
			t.Errorf("DELETE: %d %q, want 204 and no body, every time", code, body)
		}
	}
	if code, _ := call(t, srv, "GET", path, ""); code != http.StatusNotFound {
		t.Errorf("GET after DELETE: %d, want 404", code)
	}

	bad := []struct{ method, path, body, want string }{
		{"PUT", "/v1/recipients/ou_1/preferences", `{}`, "receive_id_type:receive_id"},
		{"GET", "/v1/recipients/phone:1/preferences", ``, "receive_id_type"},
		{"DELETE", "/v1/recipients/open_id:%01/preferences", ``, "control"},
		{"PUT", path, `{"muted_scenes":"a"}`, "JSON object"},
		{"PUT", path, `{"mute":["a"]}`, "unknown field"},
		{"PUT", path, `{} {}`, "after its JSON object"},
		{"PUT", path, `[]`, "JSON object"},
		{"PUT", path, `null`, "JSON object"},
		{"PUT", path, ``, "JSON object"},
		{"PUT", path, `{"muted_until":"tomorrow"}`, "RFC 3339"},
		{"PUT", path, `{"muted_until":""}`, "RFC 3339"},
		{"PUT", path, `{"muted_scenes":[""]}`, "muted_scenes[0]"},
		{"PUT", path, `{"digest_only":["*"]}`, "digest_only[0]"},
		{"PUT", path, `{"muted_scenes":["` + strings.Repeat("x", maxPreferencesBody) + `"]}`, "over the limit"},
		// What encoding/json would read one way and a reader downstream
		// another: a key in other case, a key twice, a byte not UTF-8.
		{"PUT", path, `{"Muted_Scenes":["a"]}`, `key \"Muted_Scenes\" is \"muted_scenes\" in other letter case`},
		{"PUT", path, `{"muted_scenes":["a"],"muted_scenes":[]}`, `key \"muted_scenes\" is given twice`},
		{"PUT", path, "{\"muted_scenes\":[\"\xff\"]}", "not valid UTF-8"},
	}
	for _, tt := range bad {
		code, body := call(t, srv, tt.method, tt.path, tt.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("%s %s %.40q: %d %s, want 400 saying %q", tt.method, tt.path, tt.body, code, body, tt.want)
		}
	}
	if code, body := call(t, srv, "POST", path, `{}`); code != http.StatusMethodNotAllowed || !strings.Contains(body, "PUT") {
		t.Errorf("POST: %d %s, want 405", code, body)
	}
	if code, _, _ := get(t, srv, "GET", path, false); code != http.StatusUnauthorized {
		t.Errorf("GET without the token: %d, want 401", code)
	}
	st.fail = fmt.Errorf("down: %w", gate.ErrUnavailable)
	if code, _ := call(t, srv, "PUT", path, `{}`); code != http.StatusServiceUnavailable {
		t.Errorf("PUT with the store down: %d, want 503", code)
	}
}
