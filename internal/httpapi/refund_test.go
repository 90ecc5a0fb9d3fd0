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

// fakeRefunder answers a refund by its id: "done", "again", "unknown",
// "suppressed", "down"; any other id panics the test through a 500.
type fakeRefunder struct{}

func (fakeRefunder) Refund(_ context.Context, body []byte, src gate.RefundSource) (gate.RefundResult, error) {
	id, err := gate.ParseRefund(body)
	if err != nil {
		return gate.RefundResult{}, err
	}
	row := gate.Refund{MessageID: id, Scene: "s", Recipient: "open_id:u", Source: src,
		ForwardedAt: time.Unix(100, 0).UTC(), RefundedAt: time.Unix(200, 0).UTC()}
	switch id {
	case "done":
		return gate.RefundResult{Refund: row}, nil
	case "again":
		return gate.RefundResult{Refund: row, AlreadyRefunded: true}, nil
	case "unknown":
		return gate.RefundResult{}, fmt.Errorf("refund: %w: the id was never decided by this gate", gate.ErrNeverDecided)
	case "suppressed":
		return gate.RefundResult{}, fmt.Errorf("refund: %w: the message was suppressed, not forwarded", gate.ErrNotForwarded)
	case "down":
		return gate.RefundResult{}, fmt.Errorf("refund: %w", gate.ErrUnavailable)
	}
	return gate.RefundResult{}, fmt.Errorf("unexpected id %q", id)
}

// fakeRefundLog lists one refund, and checks the filter it is given.
type fakeRefundLog struct{}

func (fakeRefundLog) Refunds(_ context.Context, f gate.RefundFilter) (gate.RefundPage, error) {
	if f.Cursor == "bad" {
		return gate.RefundPage{}, fmt.Errorf("list refunds: %w: malformed cursor", gate.ErrBadRequest)
	}
	return gate.RefundPage{Items: []gate.Refund{{MessageID: "m-" + f.Scene, Scene: f.Scene, Source: gate.RefundSourceAPI}}}, nil
}

func postRefund(t *testing.T, srv *httptest.Server, path, body string) (int, map[string]any) {
	t.Helper()
	code, _, b := request(t, srv, http.MethodPost, path, body, true)
	var out map[string]any
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatalf("POST %s %s: body is not JSON: %v", path, body, err)
	}
	return code, out
}

// TestRefundStatuses: every answer of a refund has its status, and a body
// that is not {"id": …} is a 400 with an error, never a 500.
func TestRefundStatuses(t *testing.T) {
	srv := newTestServer(t, &fakeStore{})
	for _, tt := range []struct {
		body string
		code int
		want string // a key of the answer
	}{
		{`{"id":"done"}`, 200, "refunded_at"},
		{`{"id":"done","scene":"ignored","receive_id":"x"}`, 200, "refunded_at"},
		{`{"id":"again"}`, 200, "already_refunded"},
		{`{"id":"unknown"}`, 404, "error"},
		{`{"id":"suppressed"}`, 409, "error"},
		{`{"id":"down"}`, 503, "error"},
		{``, 400, "error"},
		{`[]`, 400, "error"},
		{`{"id":7}`, 400, "error"},
		{`{"id":""}`, 400, "error"},
		{`{"id":"  "}`, 400, "error"},
		{`{"id":null}`, 400, "error"},
		{`{}`, 400, "error"},
		{`{"id":"done"} {"id":"done"}`, 400, "error"},
		{`{"id":"` + strings.Repeat("x", gate.MaxIDBytes+1) + `"}`, 400, "error"},
		{`{"id":"a\u0000b"}`, 400, "error"},
		{`{"id":"done","pad":"` + strings.Repeat("x", gate.MaxRefundBytes) + `"}`, 400, "error"},
	} {
		code, out := postRefund(t, srv, "/v1/refund", tt.body)
		if _, ok := out[tt.want]; code != tt.code || !ok {
			t.Errorf("POST /v1/refund %.60s: %d %v, want %d with %q", tt.body, code, out, tt.code, tt.want)
		}
	}
	code, out := postRefund(t, srv, "/v1/refund", `{"id":"again"}`)
	if code != 200 || out["already_refunded"] != true || out["source"] != "api" {
		t.Errorf("second refund: %d %v, want already_refunded true, source api", code, out)
	}
	if code, _, body := get(t, srv, http.MethodGet, "/v1/refund", true); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/refund: %d %s, want 405", code, body)
	}
	if code, _, body := get(t, srv, http.MethodPost, "/v1/refund", false); code != http.StatusUnauthorized {
		t.Errorf("POST /v1/refund without the token: %d %s, want 401", code, body)
	}
}

// TestRefundsList: GET /v1/refunds passes its filters on and maps a bad
// cursor to 400.
func TestRefundsList(t *testing.T) {
	srv := newTestServer(t, &fakeStore{})
	code, _, body := get(t, srv, http.MethodGet, "/v1/refunds?scene=alert&limit=5", true)
	var page gate.RefundPage
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil || len(page.Items) != 1 || page.Items[0].Scene != "alert" {
		t.Errorf("GET /v1/refunds?scene=alert: %d %s, want the row of scene alert", code, body)
	}
	for _, q := range []string{"cursor=bad", "limit=0", "since=yesterday", "scene=%00"} {
		if code, _, body := get(t, srv, http.MethodGet, "/v1/refunds?"+q, true); code != http.StatusBadRequest {
			t.Errorf("GET /v1/refunds?%s: %d %s, want 400", q, code, body)
		}
	}
}

// TestRefundsRefusesUnknownParameters: a refund row has no reason, so
// reason= (which /v1/suppressions takes) is refused, as is any parameter
// the endpoint does not take, with a 400 that names it and the ones it
// takes, rather than a list that ignores the filter.
func TestRefundsRefusesUnknownParameters(t *testing.T) {
	srv := newTestServer(t, &fakeStore{})
	const takes = `GET /v1/refunds takes scene, recipient, since, until, limit, cursor`
	for q, want := range map[string]string{
		"reason=limit":                  `unknown query parameter "reason": ` + takes,
		"scene=alert&reason=":           `unknown query parameter "reason": ` + takes,
		"limit=5&sort=asc&Scene=alert":  `unknown query parameters "Scene", "sort": ` + takes,
		"scene=alert&recipient=u:1&x=1": `unknown query parameter "x": ` + takes,
	} {
		code, _, body := get(t, srv, http.MethodGet, "/v1/refunds?"+q, true)
		var e struct{ Error string }
		if err := json.Unmarshal([]byte(body), &e); code != http.StatusBadRequest || err != nil || e.Error != want {
			t.Errorf("GET /v1/refunds?%s: %d %s, want 400 saying %q", q, code, body, want)
		}
	}
	q := "scene=alert&recipient=open_id:ou_1&since=2026-11-22T08:00:00Z&until=2026-11-23T08:00:00Z&limit=5&cursor="
	if code, _, body := get(t, srv, http.MethodGet, "/v1/refunds?"+q, true); code != http.StatusOK {
		t.Errorf("GET /v1/refunds?%s: %d %s, want 200: it takes every one of them", q, code, body)
	}
}
