package httpapi

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

const token = "t0ken"

// fakeStore answers report queries from memory and records what it was
// asked.
type fakeStore struct {
	rows     []gate.Suppression  // newest first
	scenes   []gate.SceneSummary // Summary's answer; nil means two small scenes
	failFrom int                 // Suppressions fails from this call on (1-based); 0 never
	calls    int
	// beforePage, when set, runs at the start of each Suppressions call
	// (1-based), and beforeSummary at the start of Summary.
	beforePage    func(call int)
	beforeSummary func()
	gotFilter     gate.SuppressionFilter
	gotTS         struct {
		since, until time.Time
		scene        string
	}
	gotTop struct {
		since, until time.Time
		limit        int
	}
}

func (f *fakeStore) Suppressions(_ context.Context, flt gate.SuppressionFilter) (gate.SuppressionPage, error) {
	f.calls++
	f.gotFilter = flt
	if f.beforePage != nil {
		f.beforePage(f.calls)
	}
	if f.failFrom > 0 && f.calls >= f.failFrom {
		return gate.SuppressionPage{}, fmt.Errorf("list: %w", gate.ErrUnavailable)
	}
	start := 0
	if flt.Cursor != "" {
		if _, err := fmt.Sscan(flt.Cursor, &start); err != nil {
			return gate.SuppressionPage{}, fmt.Errorf("cursor: %w", gate.ErrBadRequest)
		}
	}
	limit := flt.Limit
	if limit == 0 {
		limit = 100
	}
	end := min(start+limit, len(f.rows))
	page := gate.SuppressionPage{Items: f.rows[start:end]}
	if end < len(f.rows) {
		page.NextCursor = fmt.Sprint(end)
	}
	return page, nil
}

func (f *fakeStore) Summary(context.Context, time.Time, time.Time) ([]gate.SceneSummary, error) {
	if f.beforeSummary != nil {
		f.beforeSummary()
	}
	if f.scenes != nil {
		return f.scenes, nil
	}
	return []gate.SceneSummary{{Scene: "b", Received: 2, Suppressed: 1}, {Scene: "a", Received: 1, Forwarded: 1}}, nil
}

func (f *fakeStore) Timeseries(_ context.Context, since, until time.Time, scene string) ([]gate.HourSummary, error) {
	f.gotTS.since, f.gotTS.until, f.gotTS.scene = since, until, scene
	return nil, nil
}

func (f *fakeStore) TopRecipients(_ context.Context, since, until time.Time, limit int) ([]gate.RecipientCount, error) {
	f.gotTop.since, f.gotTop.until, f.gotTop.limit = since, until, limit
	return []gate.RecipientCount{{Recipient: "open_id:a", Suppressed: 3, LastSuppressedAt: time.Unix(0, 0).UTC()}}, nil
}

type fakeRules struct{}

func (fakeRules) Current() *gate.RuleSet { return &gate.RuleSet{Version: "v1"} }
func (fakeRules) Status() gate.RuleStatus {
	return gate.RuleStatus{Rules: &gate.RuleSet{Version: "v1", UnknownScene: gate.ActionForward}, Version: "v1", Source: "test", LoadedAt: time.Unix(0, 0).UTC()}
}

func newTestServer(t *testing.T, st *fakeStore) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewServer(Options{Rules: fakeRules{}, Reports: st, Token: token,
		Refunder: fakeRefunder{}, RefundLog: fakeRefundLog{}, Canceller: fakeCanceller{}, Explainer: fakeExplainer{}}))
	t.Cleanup(srv.Close)
	return srv
}

// get calls path, with the token when withToken, and returns the status,
// headers (trailers included) and body.
func get(t *testing.T, srv *httptest.Server, method, path string, withToken bool) (int, http.Header, string) {
	t.Helper()
	authorization := ""
	if withToken {
		authorization = "Bearer " + token
	}
	return send(t, srv, method, path, "", authorization)
}

// send calls path with the given Host and Authorization header, each
// when not empty, and returns the status, headers (trailers included) and
// body.
func send(t *testing.T, srv *httptest.Server, method, path, host, authorization string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %q): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	for k, v := range resp.Trailer {
		resp.Header[k] = v
	}
	return resp.StatusCode, resp.Header, string(body)
}

func TestStatusCodesAndErrorBodies(t *testing.T) {
	srv := newTestServer(t, &fakeStore{})
	tests := []struct {
		method, path string
		token        bool
		want         int
	}{
		{"GET", "/v1/reports/timeseries", false, http.StatusUnauthorized},
		{"GET", "/v1/openapi.json", false, http.StatusUnauthorized},
		{"GET", "/v1/reports/timeseries?since=2024-05-01T10:00:00Z&until=2024-05-01T09:00:00Z", true, http.StatusBadRequest},
		{"GET", "/v1/reports/timeseries?since=", true, http.StatusBadRequest},
		{"GET", "/v1/reports/summary?until=yesterday", true, http.StatusBadRequest},
		{"GET", "/v1/reports/summary?until=9999-12-31T23:00:00-05:00", true, http.StatusBadRequest},
		{"GET", "/v1/reports/top-recipients?limit=0", true, http.StatusBadRequest},
		{"GET", "/v1/reports/top-recipients?limit=1001", true, http.StatusBadRequest},
		{"GET", "/v1/reports/top-recipients?limit=", true, http.StatusBadRequest},
		{"GET", "/v1/suppressions?limit=1001", true, http.StatusBadRequest},
		{"GET", "/v1/suppressions?cursor=x", true, http.StatusBadRequest},
		// PostgreSQL refuses NUL bytes and invalid UTF-8 in a query: the
		// mistake is the caller's, not a server error.
		{"GET", "/v1/suppressions?recipient=%00", true, http.StatusBadRequest},
		{"GET", "/v1/suppressions?scene=%FF", true, http.StatusBadRequest},
		{"GET", "/v1/suppressions.csv?scene=a%00b", true, http.StatusBadRequest},
		{"GET", "/v1/reports/timeseries?scene=%00", true, http.StatusBadRequest},
		{"GET", "/v1/suppressions.csv?limit=100001", true, http.StatusBadRequest},
		// A pair r.URL.Query() would drop, with the filter it carries.
		{"GET", "/v1/suppressions?limit=5;scene=x", true, http.StatusBadRequest},
		{"GET", "/v1/suppressions.csv?scene=x;recipient=y", true, http.StatusBadRequest},
		{"GET", "/v1/reports/summary?since=%zz", true, http.StatusBadRequest},
		{"GET", "/v1/reports/top-recipients?limit=5%", true, http.StatusBadRequest},
		{"GET", "/v1/rules?a;b", true, http.StatusBadRequest},
		{"GET", "/v1/openapi.json?%", true, http.StatusBadRequest},
		{"POST", "/v1/rules", true, http.StatusMethodNotAllowed},
		{"DELETE", "/v1/suppressions.csv", true, http.StatusMethodNotAllowed},
		{"GET", "/v1/nope", true, http.StatusNotFound},
	}
	for _, tt := range tests {
		code, h, body := get(t, srv, tt.method, tt.path, tt.token)
		if code != tt.want {
			t.Errorf("%s %s: got %d %s, want %d", tt.method, tt.path, code, body, tt.want)
			continue
		}
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: body %q (%s), want a JSON {\"error\": ...}", tt.method, tt.path, body, h.Get("Content-Type"))
		}
		if code == http.StatusMethodNotAllowed && h.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q, want GET, HEAD", tt.method, tt.path, h.Get("Allow"))
		}
	}
}

func TestTimeseriesAndTopRecipients(t *testing.T) {
	st := &fakeStore{}
	srv := newTestServer(t, st)
	// RFC 3339 lets t and z be lower case.
	code, _, body := get(t, srv, "GET", "/v1/reports/timeseries?since=2024-05-01t10:00:00z&scene=alert.x", true)
	if code != http.StatusOK {
		t.Fatalf("timeseries: %d %s", code, body)
	}
	var ts Timeseries
	if err := json.Unmarshal([]byte(body), &ts); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC); !st.gotTS.since.Equal(want) || st.gotTS.scene != "alert.x" || !st.gotTS.until.IsZero() {
		t.Errorf("store asked for %+v, want since %v, scene alert.x, until open", st.gotTS, want)
	}
	if ts.Hours == nil || ts.Scene != "alert.x" || ts.Until != nil || ts.Since == nil {
		t.Errorf("timeseries body %s: want hours [], the scene, since set and until null", body)
	}
	if _, _, body := get(t, srv, "GET", "/v1/reports/timeseries", true); !strings.Contains(body, `"scene": "*"`) {
		t.Errorf("timeseries of every scene: got %s, want scene \"*\"", body)
	}

	code, _, body = get(t, srv, "GET", "/v1/reports/top-recipients", true)
	if code != http.StatusOK || st.gotTop.limit != defaultTop {
		t.Errorf("top recipients: %d %s, limit asked %d; want 200 and limit %d", code, body, st.gotTop.limit, defaultTop)
	}
	var top TopRecipients
	if err := json.Unmarshal([]byte(body), &top); err != nil || len(top.Recipients) != 1 || top.Recipients[0].Suppressed != 3 {
		t.Errorf("top recipients body %s (%v), want one recipient with 3", body, err)
	}
}

func suppressionRows(n int) []gate.Suppression {
	rows := make([]gate.Suppression, n)
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	for i := range rows {
		rows[i] = gate.Suppression{
			ID: int64(n - i), MessageID: fmt.Sprintf("m%d", n-i), Scene: "alert.disk", Recipient: "open_id:ou_a",
			Priority: gate.PriorityNormal, Scope: gate.ScopeScene, LimitWindow: gate.Duration(time.Hour), LimitMax: 1,
			CountSeen: 1, Reason: "limit", RulesVersion: "v1", DecidedAt: at.Add(-time.Duration(i) * time.Second),
			NextAllowedAt: at.Add(time.Hour), Payload: `{"text":"x"}`,
		}
	}
	return rows
}

func TestSuppressionsCSV(t *testing.T) {
	st := &fakeStore{rows: suppressionRows(2500)}
	st.rows[0].Recipient = "=HYPERLINK(\"http://evil\")"
	st.rows[1].NextAllowedAt = time.Time{}
	held := func(i int, kind gate.HoldKind, settled gate.SettleKind, fallback gate.Action, digest string) {
		r := &st.rows[i]
		r.HeldAs, r.Settled, r.Fallback, r.DigestID = kind, settled, fallback, digest
		if settled != "" {
			r.SettledAt = time.Date(2024, 5, 1, 10, 0, i, 0, time.UTC)
		}
	}
	held(3, gate.HoldDefer, gate.SettleReleased, "", "")
	held(4, gate.HoldDefer, gate.SettleFellBack, gate.ActionDrop, "")
	held(5, gate.HoldDigest, gate.SettleDigested, "", "-digest-1") // a digest id is no formula either
	held(6, gate.HoldDefer, "", "", "")
	// Held back by a calendar limit: its window says 0s, its period "day".
	st.rows[7].LimitWindow, st.rows[7].LimitMax, st.rows[7].LimitCalendar = 0, 3, gate.CalendarDay
	// Held back by a rate limit {rate: 1/10m, burst: 3}: window 0s, its
	// interval in limit_rate and its burst in limit_max.
	st.rows[8].LimitWindow, st.rows[8].LimitMax, st.rows[8].LimitRate = 0, 3, gate.Duration(10*time.Minute)
	st.rows[8].CountSeen = 3
	// Every first character a spreadsheet may read as the start of a
	// formula, each in a recipient of its own (rows 11 on).
	formulaStarts := []string{"=", "+", "-", "@", "\t", "\r", "\n"}
	for i, c := range formulaStarts {
		st.rows[10+i].Recipient = c + "cmd|' /C calc'!A0"
	}
	srv := newTestServer(t, st)

	code, h, body := get(t, srv, "GET", "/v1/suppressions.csv", true)
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/csv") {
		t.Fatalf("csv: %d %s", code, h.Get("Content-Type"))
	}
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil {
		t.Fatalf("csv does not parse: %v", err)
	}
	if len(recs) != 2501 || strings.Join(recs[0], ",") != strings.Join(csvHeader, ",") {
		t.Fatalf("csv: got %d lines, header %v; want 2501 and %v", len(recs), recs[0], csvHeader)
	}
	if got := recs[1][4]; got != `'=HYPERLINK("http://evil")` {
		t.Errorf("a formula recipient is written %q, want it behind an apostrophe", got)
	}
	for i, c := range formulaStarts {
		if got, want := recs[11+i][4], "'"+c+"cmd|' /C calc'!A0"; got != want {
			t.Errorf("a recipient starting with %q is written %q, want %q", c, got, want)
		}
	}
	if got := recs[2][13]; got != "" {
		t.Errorf("next_allowed_at of a row without one: got %q, want empty", got)
	}
	if got := recs[3]; got[7] != "1h" || got[2] != "2024-05-01T09:59:58Z" || got[13] != "2024-05-01T11:00:00Z" {
		t.Errorf("row 3: got %v, want window 1h and RFC 3339 times", got)
	}
	if h.Get(truncatedHead) != "false" {
		t.Errorf("Gate-Truncated trailer of a complete export: got %q, want false", h.Get(truncatedHead))
	}

	for i, want := range map[int][]string{
		1: {"", "", "", "", ""},
		4: {"defer", "released", "2024-05-01T10:00:03Z", "", ""},
		5: {"defer", "fell_back", "2024-05-01T10:00:04Z", "drop", ""},
		6: {"digest", "digested", "2024-05-01T10:00:05Z", "", "'-digest-1"},
		7: {"defer", "", "", "", ""},
	} {
		if got := recs[i][15:20]; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("row %d held_as..digest_id: got %q, want %q", i, got, want)
		}
	}
	// limit_calendar comes last, so that scripts reading the columns by
	// position keep working.
	if got := recs[8]; got[7] != "0s" || got[8] != "3" || got[20] != "day" || recs[1][20] != "" {
		t.Errorf("calendar row: window %q, max %q, limit_calendar %q (a rolling row's %q); want 0s, 3, day and empty",
			got[7], got[8], got[20], recs[1][20])
	}

	// limit_rate comes after limit_calendar, the last column before it.
	if got := recs[9]; len(got) != 22 || got[7] != "0s" || got[8] != "3" || got[9] != "3" || got[20] != "" || got[21] != "10m" {
		t.Errorf("rate row: %q; want 22 columns, window 0s, max 3, count 3, no calendar and limit_rate 10m", got)
	}
	if got := recs[1][21]; got != "" {
		t.Errorf("limit_rate of a rolling limit's row: got %q, want empty", got)
	}
	if got := recs[8][21]; got != "" {
		t.Errorf("limit_rate of a calendar limit's row: got %q, want empty", got)
	}

	code, _, body = get(t, srv, "GET", "/v1/suppressions?limit=9", true)
	var page struct{ Items []map[string]any }
	if err := json.Unmarshal([]byte(body), &page); code != http.StatusOK || err != nil || len(page.Items) != 9 {
		t.Fatalf("list: %d, %v, %d rows; want 200 and 9 rows", code, err, len(page.Items))
	}
	if got, ok := page.Items[0]["limit_calendar"]; ok {
		t.Errorf("a rolling limit's row has limit_calendar %v, want it omitted", got)
	}
	if got := page.Items[7]["limit_calendar"]; got != "day" {
		t.Errorf("a calendar limit's row has limit_calendar %v, want day", got)
	}
	if got, ok := page.Items[0]["limit_rate"]; ok {
		t.Errorf("a rolling limit's row has limit_rate %v, want it omitted", got)
	}
	if got := page.Items[8]["limit_rate"]; got != "10m" {
		t.Errorf("a rate limit's row has limit_rate %v, want 10m", got)
	}

	code, h, body = get(t, srv, "GET", "/v1/suppressions.csv?limit=1500", true)
	capped, err := csv.NewReader(strings.NewReader(body)).ReadAll() // records: a cell may hold a line feed
	if n := len(capped); err != nil || code != http.StatusOK || n != 1501 || h.Get(truncatedHead) != "true" {
		t.Errorf("csv capped at 1500: %d, %d records (%v), trailer %q; want 200, 1501 records, true", code, n, err, h.Get(truncatedHead))
	}
}

func TestSuppressionsCSVFailures(t *testing.T) {
	// The first page fails: a proper status and error body.
	srv := newTestServer(t, &fakeStore{rows: suppressionRows(10), failFrom: 1})
	if code, _, body := get(t, srv, "GET", "/v1/suppressions.csv", true); code != http.StatusServiceUnavailable || !strings.Contains(body, `"error"`) {
		t.Errorf("csv with the store down: %d %s, want 503 with an error body", code, body)
	}

	// A later page fails: the transfer is cut short, never ended cleanly.
	srv = newTestServer(t, &fakeStore{rows: suppressionRows(2500), failFrom: 2})
	req, _ := http.NewRequest("GET", srv.URL+"/v1/suppressions.csv", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("reading an export whose store failed midway: got %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestPageWithoutTokenAndHeaders(t *testing.T) {
	srv := newTestServer(t, &fakeStore{})
	for path, ctype := range map[string]string{"/": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css"} {
		code, h, body := get(t, srv, "GET", path, false)
		if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), ctype) || body == "" {
			t.Errorf("GET %s without token: %d %q, want 200 %s", path, code, h.Get("Content-Type"), ctype)
		}
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: CSP %q, nosniff %q; want script-src 'self' and no unsafe-inline", path, csp, h.Get("X-Content-Type-Options"))
		}
	}
	for _, path := range []string{"/ui/", "/ui/index.html", "/ui/nope.js", "/ui/../go.mod", "/nope"} {
		if code, _, _ := get(t, srv, "GET", path, false); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
	_, _, page := get(t, srv, "GET", "/", false)
	if strings.Contains(page, "<script>") || strings.Contains(page, " style=") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("the page has inline script or style, or loads something from elsewhere")
	}
}

// TestNameFilters checks that the scene and recipient filters refuse what
// a message's scene and recipient refuse, with 400 and the reason, and
// pass any other text through unchanged.
func TestNameFilters(t *testing.T) {
	st := &fakeStore{}
	srv := newTestServer(t, st)
	bad := []struct{ query, want string }{
		{"scene=a%C2%85b", "control character (U+0085"},         // C1: NEL
		{"scene=a%C2%9Bb", "control character (U+009B"},         // C1: CSI
		{"recipient=open_id:%E2%80%AEgpj.exe", "bidirectional"}, // right-to-left override
		{"recipient=open_id:a%E2%81%A6b", "bidirectional"},      // left-to-right isolate
		{"scene=%00", "control character (U+0000"},              // NUL
		{"scene=%FF%FE", "not valid UTF-8"},                     // invalid UTF-8
		{"recipient=%20%20", "missing or empty"},                // blank
		{"scene=" + strings.Repeat("s", gate.MaxSceneBytes+1), "over the limit of 256"},
		{"recipient=open_id:" + strings.Repeat("r", maxRecipientBytes), "over the limit"},
	}
	for _, path := range []string{"/v1/suppressions", "/v1/suppressions.csv", "/v1/reports/timeseries"} {
		for _, tt := range bad {
			if path == "/v1/reports/timeseries" && strings.HasPrefix(tt.query, "recipient=") {
				continue // timeseries filters by scene only
			}
			code, _, body := get(t, srv, "GET", path+"?"+tt.query, true)
			var e struct {
				Error string `json:"error"`
			}
			_ = json.Unmarshal([]byte(body), &e)
			if code != http.StatusBadRequest || !strings.Contains(e.Error, tt.want) {
				t.Errorf("GET %s?%.40s: got %d %s, want 400 with an error naming %q", path, tt.query, code, body, tt.want)
			}
		}
	}
	// Text a message may carry passes unchanged; empty means every one.
	code, _, body := get(t, srv, "GET", "/v1/suppressions?scene=%E5%91%8A%E8%AD%A6.%D7%A2%D7%91&recipient=email:a%2Bb@x.y", true)
	if want := (gate.SuppressionFilter{Scene: "告警.עב", Recipient: "email:a+b@x.y", Limit: 100}); code != http.StatusOK ||
		st.gotFilter.Scene != want.Scene || st.gotFilter.Recipient != want.Recipient {
		t.Errorf("valid filters: %d %s, store asked for %+v; want 200 and %+v", code, body, st.gotFilter, want)
	}
	if code, _, body := get(t, srv, "GET", "/v1/suppressions?scene=&recipient=", true); code != http.StatusOK || st.gotFilter.Scene != "" || st.gotFilter.Recipient != "" {
		t.Errorf("empty filters: %d %s, store asked for %+v; want 200 and no filter", code, body, st.gotFilter)
	}
}

func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	srv := newTestServer(t, &fakeStore{})
	for _, h := range []string{"Bearer " + token, "bearer " + token, "BEARER " + token, "bEaReR " + token, "Bearer   " + token} {
		if code, _, body := send(t, srv, "GET", "/v1/rules", "", h); code != http.StatusOK {
			t.Errorf("Authorization %q: got %d %s, want 200", h, code, body)
		}
	}
	for _, h := range []string{"", "Bearer", "Bearer " + token + "x", "Bearer" + token, "Basic " + token, "Bearers " + token, token} {
		if code, _, _ := send(t, srv, "GET", "/v1/rules", "", h); code != http.StatusUnauthorized {
			t.Errorf("Authorization %q: got %d, want 401", h, code)
		}
	}
}

func TestHostAllowList(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		host    string
		want    bool
	}{
		{"loopback name", nil, "localhost", true},
		{"loopback name with port", nil, "localhost:8080", true},
		{"loopback name, any case, final dot", nil, "LocalHost.:8080", true},
		{"IPv4 loopback", nil, "127.0.0.1:9", true},
		{"IPv6 loopback", nil, "[::1]:8080", true},
		{"IPv6 loopback, long form", nil, "[0:0:0:0:0:0:0:1]", true},
		{"rebinding name", nil, "attacker.example:8080", false},
		{"a name that starts like localhost", nil, "localhost.attacker.example", false},
		{"another address of the machine", nil, "10.0.0.5:8080", false},
		{"configured name", []string{"gate.example.com"}, "GATE.example.com:443", true},
		{"configured name, loopback still allowed", []string{"gate.example.com"}, "127.0.0.1", true},
		{"configured address", []string{"10.0.0.5"}, "10.0.0.5:8080", true},
		{"configured IPv6 address", []string{"[fd00::1]"}, "[fd00:0::1]:8080", true},
		{"not configured", []string{"gate.example.com"}, "gate.example.org", false},
		{"a subdomain of a configured name", []string{"example.com"}, "gate.example.com", false},
		{"any host", []string{"*"}, "attacker.example", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(NewServer(Options{Rules: fakeRules{}, Reports: &fakeStore{}, Token: token, AllowedHosts: tt.allowed}))
			defer srv.Close()
			for _, path := range []string{"/v1/rules", "/", "/ui/app.js", "/v1/nope"} {
				code, _, body := send(t, srv, "GET", path, tt.host, "Bearer "+token)
				if tt.want && code == http.StatusForbidden {
					t.Errorf("GET %s with Host %q, allowed %v: got 403 %s, want it served", path, tt.host, tt.allowed, body)
				}
				if !tt.want && (code != http.StatusForbidden || !strings.Contains(body, `"error"`) || !strings.Contains(body, "GATE_HTTP_ALLOWED_HOSTS")) {
					t.Errorf("GET %s with Host %q, allowed %v: got %d %s, want 403 with a JSON error naming the setting", path, tt.host, tt.allowed, code, body)
				}
			}
			// Probes and scrapers reach the gate by any name.
			for _, path := range []string{"/healthz", "/readyz"} {
				if code, _, body := send(t, srv, "GET", path, tt.host, ""); code != http.StatusOK {
					t.Errorf("GET %s with Host %q: got %d %s, want 200", path, tt.host, code, body)
				}
			}
		})
	}
}

// TestExportOutlivesWriteTimeout checks that the CSV export is exempt from
// the server's WriteTimeout while other answers are bound by it: each
// store call below returns only once the WriteTimeout has passed since it
// was made, so a response still bound by it is cut.
func TestExportOutlivesWriteTimeout(t *testing.T) {
	const writeTimeout = 100 * time.Millisecond
	pastWriteTimeout := func() { time.Sleep(3 * writeTimeout) }
	st := &fakeStore{rows: suppressionRows(2500)}
	st.beforePage = func(call int) {
		if call > 1 { // after the first page went out
			pastWriteTimeout()
		}
	}
	st.beforeSummary = pastWriteTimeout
	srv := httptest.NewUnstartedServer(NewServer(Options{Rules: fakeRules{}, Reports: st, Token: token}))
	srv.Config.WriteTimeout = writeTimeout
	srv.Start()
	defer srv.Close()

	code, h, body := get(t, srv, "GET", "/v1/suppressions.csv", true)
	if n := strings.Count(body, "\n"); code != http.StatusOK || n != 2501 || h.Get(truncatedHead) != "false" {
		t.Errorf("export slower than WriteTimeout: %d, %d lines, trailer %q; want 200, 2501 lines, false", code, n, h.Get(truncatedHead))
	}

	// The control: the same wait in a JSON report loses its answer.
	req, _ := http.NewRequest("GET", srv.URL+"/v1/reports/summary", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Errorf("summary slower than WriteTimeout: got %d %s, want the connection cut", resp.StatusCode, b)
	}
}

// TestExportPageTimeout checks that an export the client stops reading is
// cut once a page cannot be written within ExportPageTimeout, though the
// server has no WriteTimeout at all.
func TestExportPageTimeout(t *testing.T) {
	st := &fakeStore{rows: suppressionRows(8)}
	for i := range st.rows {
		st.rows[i].Payload = strings.Repeat("p", 4<<20) // 32 MiB in all: more than the socket buffers hold
	}
	h := NewServer(Options{Rules: fakeRules{}, Reports: st, Token: token, ExportPageTimeout: 200 * time.Millisecond})
	served := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /v1/suppressions.csv HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\n\r\n", token); err != nil {
		t.Fatal(err)
	}
	// Read nothing: the export must give up on its own.
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		t.Fatal("the export still writes to a client that stopped reading 30s ago")
	}
	n, _ := io.Copy(io.Discard, conn)
	if n >= 32<<20 {
		t.Errorf("read %d bytes of an export the client stopped reading; want it cut short", n)
	}
}

// TestSummaryCountsHeldMessages: the summary carries the counters of held
// messages per scene and adds them up in the total, under the names the
// OpenAPI document gives them.
func TestSummaryCountsHeldMessages(t *testing.T) {
	st := &fakeStore{scenes: []gate.SceneSummary{
		{Scene: "ci.build", Received: 5, Forwarded: 1, Digested: 4, Released: 1},
		{Scene: "alert.disk", Received: 6, Forwarded: 2, Suppressed: 1, Deferred: 3, Released: 2, FellBack: 1},
	}}
	srv := newTestServer(t, st)
	code, _, body := get(t, srv, "GET", "/v1/reports/summary", true)
	if code != http.StatusOK {
		t.Fatalf("summary: %d %s", code, body)
	}
	var sum struct {
		Scenes []map[string]any `json:"scenes"`
		Total  map[string]any   `json:"total"`
	}
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"received": 11, "forwarded": 3, "suppressed": 1, "deferred": 3, "digested": 4, "released": 3, "fell_back": 1}
	for k, v := range want {
		if sum.Total[k] != v {
			t.Errorf("total %s = %v, want %v (body %s)", k, sum.Total[k], v, body)
		}
	}
	if len(sum.Scenes) != 2 || sum.Scenes[0]["scene"] != "alert.disk" || sum.Scenes[0]["deferred"] != 3.0 || sum.Scenes[1]["digested"] != 4.0 {
		t.Errorf("scenes %v: want alert.disk first with 3 deferred, then ci.build with 4 digested", sum.Scenes)
	}
}
