package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestDo checks what every command's request carries and how an answer
// other than 200 is reported: the command's name, the status, the
// server's error text, and for 401 where the token comes from.
func TestDo(t *testing.T) {
	var gotAuth, gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotQuery = r.Header.Get("Authorization"), r.URL.RawQuery
		switch r.URL.Path {
		case "/v1/suppressions":
			w.Write([]byte(`{"items":[{"message_id":"m1"}],"next_cursor":"c2"}`))
		case "/v1/reports/summary":
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"missing or wrong bearer token"}`))
		default:
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"bad since"}`))
		}
	}))
	defer srv.Close()
	ctx := context.Background()

	c := New(strings.TrimPrefix(srv.URL, "http://")+"/", Options{Token: "t0k"})
	if c.Base() != srv.URL {
		t.Errorf("Base() = %q, want %q (scheme added, trailing slash dropped)", c.Base(), srv.URL)
	}
	page, err := c.Suppressions(ctx, url.Values{"limit": {"5"}})
	if err != nil || len(page.Items) != 1 || page.Items[0].MessageID != "m1" || page.NextCursor != "c2" {
		t.Errorf("Suppressions = %+v, %v; want one row m1 and cursor c2", page, err)
	}
	if gotAuth != "Bearer t0k" || gotQuery != "limit=5" {
		t.Errorf("request carried Authorization %q and query %q, want Bearer t0k and limit=5", gotAuth, gotQuery)
	}

	_, err = c.Summary(ctx, nil)
	if want := "report: 401 Unauthorized: missing or wrong bearer token (set GATE_API_TOKEN)"; err == nil || err.Error() != want {
		t.Errorf("Summary on 401: %v, want %q", err, want)
	}

	p := New(srv.URL, Options{Name: "preview"})
	if _, err := p.Preview(ctx, []byte("scenes: {}"), "7d"); err == nil || err.Error() != "preview: 400 Bad Request: bad since" {
		t.Errorf("Preview on 400: %v, want %q", err, "preview: 400 Bad Request: bad since")
	}
	if gotAuth != "" || gotQuery != "since=7d" {
		t.Errorf("preview carried Authorization %q and query %q, want none and since=7d", gotAuth, gotQuery)
	}

	srv.Close()
	if _, err := c.Summary(ctx, nil); err == nil || !strings.Contains(err.Error(), "report: is the gate running at "+srv.URL+"?") {
		t.Errorf("Summary with no gate: %v, want it to ask whether the gate runs at %s", err, srv.URL)
	}
}
