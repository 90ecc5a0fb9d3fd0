package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
	// Checks are run by /readyz, by name (nats, window_store, audit_store,
	// rules).
	Checks map[string]Check
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every /v1/* request. The report page at / is served without it; the
	// page asks the reader for the token and sends it on its API calls.
	Token   string
	Metrics *metrics.Metrics
	Log     *slog.Logger
}

// NewServer returns the gate's HTTP handler.
func NewServer(o Options) http.Handler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Trends == nil {
		o.Trends, _ = o.Reports.(gate.Trends)
	}
	s := &server{o: o}
	mux := http.NewServeMux()
	handle := func(pattern string, h http.Handler) {
		mux.Handle(pattern, s.count(pattern, h))
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
	if o.Trends != nil {
		api["/v1/reports/timeseries"] = s.timeseries
		api["/v1/reports/top-recipients"] = s.topRecipients
	}
	for path, h := range api {
		if h != nil {
			handle("GET "+path, s.auth(s.errors(h)))
		}
	}
	// Every other /v1/ request: 405 on a known path, 404 elsewhere, both
	// with the JSON error body of the API.
	handle("/v1/", s.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := api[r.URL.Path]; ok && h != nil {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+": use GET")
			return
		}
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})))
	return mux
}

type server struct{ o Options }

// apiFunc is a handler that returns its error; errors maps it to a status.
type apiFunc func(w http.ResponseWriter, r *http.Request) error

// errors is the one place that maps domain errors to HTTP status codes.
func (s *server) errors(h apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		switch {
		case errors.Is(err, gate.ErrBadRequest):
			writeError(w, http.StatusBadRequest, err.Error())
		case errors.Is(err, gate.ErrNotFound):
			writeError(w, http.StatusNotFound, err.Error())
		case errors.Is(err, gate.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
			s.o.Log.Warn("report query failed", "path", r.URL.Path, "err", err)
			writeError(w, http.StatusServiceUnavailable, "audit store unavailable, try again")
		default:
			s.o.Log.Error("report query failed", "path", r.URL.Path, "err", err)
			writeError(w, http.StatusInternalServerError, "internal error")
		}
	})
}

func (s *server) auth(h http.Handler) http.Handler {
	if s.o.Token == "" {
		return h
	}
	want := []byte("Bearer " + s.o.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gate"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		h.ServeHTTP(w, r)
	})
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

func (s *server) rules(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, s.o.Rules.Status())
	return nil
}

func (s *server) suppressions(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f, err := suppressionFilter(q)
	if err != nil {
		return err
	}
	f.Cursor = q.Get("cursor")
	if f.Limit, err = parseLimit(q, maxPage); err != nil {
		return err
	}
	page, err := s.o.Reports.Suppressions(r.Context(), f)
	if err != nil {
		return err
	}
	page.Items = nonNil(page.Items)
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

func (s *server) summary(w http.ResponseWriter, r *http.Request) error {
	since, until, err := timeRange(r.URL.Query())
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
