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

// fakeExplainer checks the question as the pipeline's does and explains a
// fixed state; the scene "down" fails as a store that did not answer.
type fakeExplainer struct{}

func (fakeExplainer) Explain(_ context.Context, recipient, scene, priority, tz string) (gate.Explanation, error) {
	m, err := gate.ParseExplain("explain:x", recipient, scene, priority, tz)
	if err != nil {
		return gate.Explanation{}, err
	}
	if scene == "down" {
		return gate.Explanation{}, fmt.Errorf("explain: %w", gate.ErrUnavailable)
	}
	w := gate.Duration(time.Hour)
	now := time.Unix(1000, 0).UTC()
	return gate.Explanation{Recipient: m.Recipient(), Scene: m.Scene, Priority: m.Priority, KnownScene: true,
		Decision: gate.ExplainDecision{Outcome: gate.OutcomeForward}, NextAt: &now, Why: "Every limit has room.",
		Limits:     []gate.LimitState{{CheckLimit: gate.CheckLimit{Scope: gate.ScopeScene, Window: &w, Max: 3}, Count: 1, Left: 2, FreeAt: now}},
		HeldQueues: []gate.HeldQueueSummary{{Queue: m.Scene, Kind: gate.HoldDefer}}, HeldQueuesKnown: true,
		RulesVersion: "v1", At: now}, nil
}

func TestExplainAnswers(t *testing.T) {
	srv := httptest.NewServer(NewServer(Options{Rules: fakeRules{}, Reports: &fakeStore{}, Token: token, ReadToken: "reader",
		Explainer: fakeExplainer{}}))
	t.Cleanup(srv.Close)
	const ok = "/v1/explain?recipient=open_id:ou_1&scene=build&priority=high&tz=Asia/Shanghai"
	for _, auth := range []string{"Bearer " + token, "Bearer reader"} {
		code, _, body := send(t, srv, http.MethodGet, ok, "", auth)
		if code != http.StatusOK {
			t.Fatalf("GET %s with %q: %d %s, want 200", ok, auth, code, body)
		}
		var e map[string]any
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"decision", "next_at", "why", "limits", "held_queues", "preferences", "quiet_hours", "rules_version"} {
			if _, ok := e[f]; !ok {
				t.Errorf("answer lacks %s: %s", f, body)
			}
		}
		if lim := e["limits"].([]any)[0].(map[string]any); lim["left"] != 2.0 || lim["window"] != "1h" {
			t.Errorf("limit %v, want window 1h, left 2", lim)
		}
	}
	if code, _, _ := send(t, srv, http.MethodGet, ok, "", ""); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d, want 401", code)
	}
	if code, h, _ := send(t, srv, http.MethodPost, ok, "", "Bearer "+token); code != http.StatusMethodNotAllowed || h.Get("Allow") == "" {
		t.Errorf("POST: %d (Allow %q), want 405 with Allow", code, h.Get("Allow"))
	}
	if code, _, body := send(t, srv, http.MethodGet, "/v1/explain?recipient=open_id:ou_1&scene=down", "", "Bearer "+token); code != http.StatusServiceUnavailable {
		t.Errorf("store down: %d %s, want 503", code, body)
	}
}

func TestExplainRefusesBadQuestions(t *testing.T) {
	srv := newTestServer(t, &fakeStore{})
	for _, tt := range []struct{ query, want string }{
		{"recipient=open_id:u&scene=s&limit=5", "unknown query parameter"},
		{"recipient=open_id:u&scene=s&scene=t", "scene is given 2 times"},
		{"scene=s", "recipient is required"},
		{"recipient=open_id:u", "scene is required"},
		{"recipient=open_id:u&scene=", "scene is required"},
		{"recipient=ou_1&scene=s", "not receive_id_type:receive_id"},
		{"recipient=fax:1&scene=s", "receive_id_type"},
		{"recipient=email:Alice@Example.com&scene=s", "lower case"},
		{"recipient=open_id:u&scene=s&priority=loud", "priority"},
		{"recipient=open_id:u&scene=s&priority=", "priority is empty"},
		{"recipient=open_id:u&scene=s&tz=Mars/Base", "Mars/Base"},
		{"recipient=open_id:u&scene=" + strings.Repeat("x", 300), "scene"},
	} {
		code, _, body := get(t, srv, http.MethodGet, "/v1/explain?"+tt.query, true)
		if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("GET /v1/explain?%.60s: %d %s, want 400 naming %q", tt.query, code, body, tt.want)
		}
	}
}
