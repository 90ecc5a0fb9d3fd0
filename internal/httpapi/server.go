package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/webui"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness probe: nil when the dependency answers.
type Check func(ctx context.Context) error

// Options are the server's dependencies. Rules and Reports are required.
type Options struct {
	Rules   gate.RuleSource
	Reports gate.Reports
	// Trends serves the timeseries and top-recipients reports. Nil means
	// Reports, when it implements gate.Trends; otherwise those endpoints
	// answer 404.
	Trends gate.Trends
	// Checks are run by /readyz, by name (nats, streams, window_store,
	// audit_store, rules).
	Checks map[string]Check
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every /v1/* request. The report page at / is served without it; the
	// page asks the reader for the token and sends it on its API calls.
	Token string
	// ReadToken, when set beside Token, is accepted in Token's place on
	// the endpoints that only read: every GET under /v1/ and the rule
	// preview, which replays past decisions and changes nothing. On an
	// endpoint that changes state (check, refund, a PUT or DELETE of
	// preferences) it gets 403, so that whoever reads the reports (the
	// report page, a dashboard) cannot take or hand back a slot. Without
	// Token the API is open and ReadToken counts for nothing; gate serve
	// refuses to start so.
	ReadToken string
	// AllowedHosts are the host names, besides the loopback names
	// (localhost, 127.0.0.1, ::1), that a request's Host may carry, any
	// port; "*" allows every host. A browser sends the name of the page's
	// site as Host, so a page that rebinds its own name to the gate's
	// address (DNS rebinding) is refused: without this check it could read
	// the API from the operator's browser. /healthz, /readyz and /metrics
	// are exempt: probes and scrapers address the gate by whatever name or
	// address the platform gives it, and those paths hold no payloads.
	// With "*" such a page reads what needs no token, but a browser's
	// request that changes state is still taken only from a loopback name
	// or a host named here (browser.go).
	AllowedHosts []string
	// ExportPageTimeout bounds the writing of each page of the CSV export:
	// the export is exempt from the server's WriteTimeout, and its write
	// deadline moves forward by this much before each page, so an export
	// of any length finishes while the client keeps reading, and one the
	// client stops reading is cut. Zero means one minute.
	ExportPageTimeout time.Duration
	Metrics           *metrics.Metrics
	Log               *slog.Logger
	// Refunder and RefundLog, when set, serve POST /v1/refund and GET
	// /v1/refunds.
	Refunder  gate.Refunder
	RefundLog RefundLister
	// Canceller serves POST /v1/cancel; nil answers it 404.
	Canceller gate.Canceller
	// Checker serves POST /v1/check; nil answers it 404.
	Checker Checker
	// Preview serves POST /v1/rules/preview; nil answers it 404.
	Preview gate.Previewer
	// Preferences serves GET, PUT and DELETE
	// /v1/recipients/{recipient}/preferences; nil answers them 404.
	Preferences gate.PreferenceStore
	// Explainer serves GET /v1/explain; nil answers it 404.
	Explainer Explainer
}

// defaultExportPageTimeout is ExportPageTimeout when unset.
const defaultExportPageTimeout = time.Minute

// NewServer returns the gate's HTTP handler.
func NewServer(o Options) http.Handler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Trends == nil {
		o.Trends, _ = o.Reports.(gate.Trends)
	}
	if o.ExportPageTimeout <= 0 {
		o.ExportPageTimeout = defaultExportPageTimeout
	}
	s := &server{o: o, originHosts: originHosts(o.AllowedHosts), hostNames: hostNames(o.AllowedHosts)}
	mux := http.NewServeMux()
	// Every route refuses a cross-site request that may change state
	// (browser.go), before its token check.
	handle := func(pattern string, h http.Handler) {
		mux.Handle(pattern, s.count(pattern, s.sameSite(h)))
	}
	handle("GET /healthz", http.HandlerFunc(s.healthz))
	handle("GET /readyz", http.HandlerFunc(s.readyz))
	if o.Metrics != nil {
		handle("GET /metrics", promhttp.HandlerFor(o.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	handle("GET /{$}", webui.Page())
	handle("GET "+webui.AssetPrefix, webui.Assets())

	api := map[string]apiFunc{
		"/v1/rules":                  s.rules,
		"/v1/suppressions":           s.suppressions,
		"/v1/suppressions.csv":       s.suppressionsCSV,
		"/v1/reports/summary":        s.summary,
		"/v1/openapi.json":           s.openapi,
		"/v1/reports/timeseries":     nil,
		"/v1/reports/top-recipients": nil,
	}
	if o.RefundLog != nil {
		api["/v1/refunds"] = s.refunds
	}
	if o.Explainer != nil {
		api["/v1/explain"] = s.explain
	}
	if o.Trends != nil {
		api["/v1/reports/timeseries"] = s.timeseries
		api["/v1/reports/top-recipients"] = s.topRecipients
	}
	// Each route states what its token must allow (auth): reads or
	// writes. A 405 or 404 answer changes nothing, so it takes either.
	for path, h := range api {
		if h != nil {
			handle("GET "+path, s.auth(reads, s.errors(h)))
		}
	}
	handle("POST /v1/check", s.auth(writes, jsonBody(http.HandlerFunc(s.check))))
	handle("/v1/check", s.auth(reads, http.HandlerFunc(notPost)))
	handle("/v1/rules/preview", s.auth(reads, s.errors(s.preview)))
	s.routePreferences(handle)
	if o.Refunder != nil {
		handle("POST /v1/refund", s.auth(writes, jsonBody(http.HandlerFunc(s.refund))))
		handle("/v1/refund", s.auth(reads, http.HandlerFunc(notPost)))
	}
	if o.Canceller != nil {
		handle("POST /v1/cancel", s.auth(writes, jsonBody(http.HandlerFunc(s.cancel))))
		handle("/v1/cancel", s.auth(reads, http.HandlerFunc(notPost)))
	}
	// Every other /v1/ request: 405 on a known path, 404 elsewhere, both
	// with the JSON error body of the API.
	handle("/v1/", s.auth(reads, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := api[r.URL.Path]; ok && h != nil {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+": use GET")
			return
		}
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})))
	return s.hosts(mux)
}

type server struct {
	o Options
	// originHosts are the allowed hosts an Origin may name (sameSite).
	originHosts map[string]bool
	// hostNames are the names a Host may carry, "*" aside: the loopback
	// names and those of Options.AllowedHosts (hosts, sameSite).
	hostNames map[string]bool
}

// apiFunc is a handler that returns its error; errors maps it to a status.
// q is the request's query, already parsed: a malformed one never reaches
// the handler.
type apiFunc func(w http.ResponseWriter, r *http.Request, q url.Values) error

// errors answers the error of an apiFunc (see fail): a 503 says the audit
// store did not answer. It parses the query first: r.URL.Query() drops a
// pair it cannot read (limit=5;scene=x loses both), and a query run without
// the filter the caller asked for answers a question nobody asked.
func (s *server) errors(h apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			err = badRequest("malformed query string: %v (separate parameters with &, escape %%, & and ; as %%25, %%26 and %%3B)", err)
		} else {
			err = h(w, r, q)
		}
		if err != nil {
			s.fail(w, r, err, message(err, "audit store unavailable, try again"))
		}
	})
}

// access is what a route lets a token do.
type access int

const (
	// reads: the route changes nothing; the reading token is enough.
	reads access = iota
	// writes: the route may change state; only the writing token will do.
	writes
)

// auth requires a bearer token that allows need: Options.Token for any
// route, Options.ReadToken for one that only reads. A missing or unknown
// token gets 401; the reading token where writing is needed gets 403
// (RFC 6750's insufficient_scope), which tells its holder that asking
// again with it is pointless. Tokens are compared in constant time. The
// scheme name is case-insensitive (RFC 9110, section 11.1): bearer and
// BEARER are Bearer.
func (s *server) auth(need access, h http.Handler) http.Handler {
	if s.o.Token == "" {
		return h
	}
	write, read := []byte(s.o.Token), []byte(s.o.ReadToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := bearer(r)
		writer := ok && subtle.ConstantTimeCompare(got, write) == 1
		reader := ok && len(read) > 0 && subtle.ConstantTimeCompare(got, read) == 1
		switch {
		case writer, reader && need == reads:
			h.ServeHTTP(w, r)
		case reader:
			w.Header().Set("WWW-Authenticate", `Bearer realm="gate", error="insufficient_scope"`)
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s %s needs the writing token (GATE_API_TOKEN): the reading token "+
				"(GATE_API_READ_TOKEN) is accepted only on the endpoints that only read", r.Method, r.URL.Path))
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="gate"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
		}
	})
}

// bearer is the token of r's Authorization header, and whether it names
// the Bearer scheme at all.
func bearer(r *http.Request) ([]byte, bool) {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return []byte(strings.TrimLeft(token, " ")), strings.EqualFold(scheme, "Bearer")
}

// probePaths answer whatever the Host: see Options.AllowedHosts.
var probePaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// hosts refuses a request whose Host is neither a loopback name nor one of
// Options.AllowedHosts, with 403 and the API's JSON error body.
func (s *server) hosts(h http.Handler) http.Handler {
	if slices.Contains(s.o.AllowedHosts, "*") {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hostNames[hostName(r.Host)] || probePaths[r.URL.Path] {
			h.ServeHTTP(w, r)
			return
		}
		s.o.Log.Debug("request refused: host not allowed", "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, fmt.Sprintf("host %q is not allowed: the gate answers to localhost, 127.0.0.1, ::1 "+
			"and the names in GATE_HTTP_ALLOWED_HOSTS", r.Host))
	})
}

// hostNames are the names of the loopback interface and those of allowed,
// each as hostName writes it; "*" is no name.
func hostNames(allowed []string) map[string]bool {
	names := map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}
	for name := range originHosts(allowed) {
		names[name] = true
	}
	return names
}

// hostName is the host of a Host header or an allowed name, compared
// without its port, brackets, case or final dot, and an IP address in its
// canonical form ([0:0::1] is ::1).
func hostName(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().String()
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

func (s *server) count(route string, h http.Handler) http.Handler {
	if s.o.Metrics == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		s.o.Metrics.HTTPRequests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

func (s *server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz runs every check in parallel, each bounded to 2 s, and answers 503
// naming what is down.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	results := make(map[string]string, len(s.o.Checks))
	ready := true
	for name, check := range s.o.Checks {
		wg.Go(func() {
			err := check(ctx)
			mu.Lock()
			defer mu.Unlock()
			if s.o.Metrics != nil {
				up := 1.0
				if err != nil {
					up = 0
				}
				s.o.Metrics.DependencyUp.WithLabelValues(name).Set(up)
			}
			if err != nil {
				ready = false
				results[name] = err.Error()
				return
			}
			results[name] = "ok"
		})
	}
	wg.Wait()
	status, code := "ready", http.StatusOK
	if !ready {
		status, code = "not ready", http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]any{"status": status, "checks": results})
}

func (s *server) rules(w http.ResponseWriter, _ *http.Request, _ url.Values) error {
	writeJSON(w, http.StatusOK, s.o.Rules.Status())
	return nil
}

func (s *server) suppressions(w http.ResponseWriter, r *http.Request, q url.Values) error {
	return listPage(w, q, func(f gate.SuppressionFilter) (any, error) {
		page, err := s.o.Reports.Suppressions(r.Context(), f)
		page.Items = nonNil(page.Items)
		return page, err
	})
}

// listPage answers one page of a list endpoint (/v1/suppressions,
// /v1/refunds): the page that read returns for the request's filters,
// cursor and limit (at most maxPage rows).
func listPage(w http.ResponseWriter, q url.Values, read func(gate.SuppressionFilter) (any, error)) error {
	f, err := suppressionFilter(q)
	if err != nil {
		return err
	}
	f.Cursor = q.Get("cursor")
	if f.Limit, err = parseLimit(q, maxPage, 0); err != nil {
		return err
	}
	page, err := read(f)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// Summary is the body of GET /v1/reports/summary.
type Summary struct {
	Since  *time.Time          `json:"since"`
	Until  *time.Time          `json:"until"`
	Scenes []gate.SceneSummary `json:"scenes"`
	Total  gate.SceneSummary   `json:"total"`
}

func (s *server) summary(w http.ResponseWriter, r *http.Request, q url.Values) error {
	since, until, err := timeRange(q)
	if err != nil {
		return err
	}
	scenes, err := s.o.Reports.Summary(r.Context(), since, until)
	if err != nil {
		return err
	}
	sort.Slice(scenes, func(i, j int) bool { return scenes[i].Scene < scenes[j].Scene })
	writeJSON(w, http.StatusOK, Summary{Since: orNull(since), Until: orNull(until), Scenes: nonNil(scenes), Total: Total(scenes)})
	return nil
}

// Total adds up scene summaries.
func Total(scenes []gate.SceneSummary) gate.SceneSummary {
	t := gate.SceneSummary{Scene: "*"}
	sum := t.Counters()
	for _, s := range scenes {
		for i, v := range s.Counters() {
			*sum[i] += *v
		}
	}
	return t
}

func parseTime(q map[string][]string, name string) (time.Time, error) {
	vs, ok := q[name]
	if !ok {
		return time.Time{}, nil
	}
	v := first(vs)
	// RFC 3339 lets T and Z be lower case; Go's layout does not.
	t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(v))
	if err != nil {
		return time.Time{}, badRequest("%s must be an RFC 3339 time such as 2026-11-22T08:00:00Z, got %q", name, v)
	}
	// Answers echo the range back, and JSON times stop at year 9999.
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return time.Time{}, badRequest("%s must fall in the years 1 to 9999 (UTC), got %q", name, v)
	}
	return t.UTC(), nil
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

type requestError struct{ msg string }

func (e *requestError) Error() string        { return e.msg }
func (e *requestError) Is(target error) bool { return target == gate.ErrBadRequest }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to do
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
