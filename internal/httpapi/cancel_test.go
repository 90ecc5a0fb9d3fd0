package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
)

// fakeCanceller answers a cancel by its key: "two" cancels 2, "down" fails
// as a store down, any other key cancels nothing.
type fakeCanceller struct{}

func (fakeCanceller) Cancel(_ context.Context, body []byte, src gate.CancelSource) (gate.CancelResult, error) {
	req, err := gate.ParseCancel(body)
	if err != nil {
		return gate.CancelResult{}, err
	}
	if src != gate.CancelSourceAPI {
		return gate.CancelResult{}, fmt.Errorf("source %q, want api", src)
	}
	switch req.Key {
	case "two":
		return gate.CancelResult{Count: 2}, nil
	case "down":
		return gate.CancelResult{}, fmt.Errorf("cancel: %w", gate.ErrUnavailable)
	}
	return gate.CancelResult{}, nil
}

// TestCancelStatuses: every answer of a cancel has its status, and a body
// that is not a cancel request is a 400 with an error, never a 500.
func TestCancelStatuses(t *testing.T) {
	srv := newTestServer(t, &fakeStore{})
	for _, tt := range []struct {
		body string
		code int
		want string // in the answer
	}{
		{`{"cancel_key":"two"}`, 200, `"count": 2`},
		{`{"cancel_key":"none"}`, 200, `"count": 0`},
		{`{"cancel_key":"two","receive_id_type":"email","receive_id":"A@b.c"}`, 200, `"count": 2`},
		{`{"cancel_key":"down"}`, 503, "ask again"},
		{``, 400, "error"},
		{`[]`, 400, "error"},
		{`{}`, 400, `no \"cancel_key\"`},
		{`{"cancel_key":""}`, 400, "missing or empty"},
		{`{"cancel_key":7}`, 400, "error"},
		{`{"cancel_key":"x","receive_id":"ou_1"}`, 400, "together"},
		{`{"cancel_key":"x","receive_id_type":"open_id"}`, 400, "together"},
		{`{"cancel_key":"x","receive_id_type":"phone","receive_id":"1"}`, 400, "receive_id_type"},
		{`{"cancel_key":"x","scene":"s"}`, 400, "unknown field"},
		{`{"cancel_key":"x","cancel_key":"y"}`, 400, "given twice"},
		{`{"Cancel_Key":"x"}`, 400, "other letter case"},
		{`{"cancel_key":"` + strings.Repeat("k", 257) + `"}`, 400, "over the limit"},
		{`{"cancel_key":"a\u0007b"}`, 400, "contains"},
		{"{\"cancel_key\":\"\xff\"}", 400, "UTF-8"},
		{`{"cancel_key":"\ud800"}`, 400, "error"},
		{`{"cancel_key":"x"} {}`, 400, "after"},
	} {
		code, _, body := request(t, srv, http.MethodPost, "/v1/cancel", tt.body, true)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("POST /v1/cancel %s: %d %s, want %d with %q", tt.body, code, body, tt.code, tt.want)
		}
	}
	if code, _, _ := request(t, srv, http.MethodGet, "/v1/cancel", "", true); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/cancel: %d, want 405", code)
	}
}
