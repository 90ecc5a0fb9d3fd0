package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/rs/zerolog"
	"gopkg.in/yaml.v3"
)

// dashboardPath is the Grafana dashboard docker-compose.yml provisions.
const dashboardPath = "../../deploy/grafana/gate.json"

// dashboardRules give every panel of the dashboard a series to show: a
// limit that suppresses, one that defers and releases within a second, and
// one that fails open when Redis is cut.
const dashboardRules = `
scenes:
  dash.limit:
    limits: [{window: 1h, max: 1}]
    on_exceed: suppress
  dash.defer:
    limits: [{window: 1s, max: 1}]
    on_exceed: defer
  dash.open:
    limits: [{window: 1h, max: 100}]
    on_store_error: forward
`

// TestDashboardQueriesMatchMetrics: the dashboard is valid JSON, and every
// metric its queries name is in the /metrics of a gate that has decided,
// held, released, rejected a rules document and lost its window store: a
// renamed metric shows up here, not as an empty panel in production.
func TestDashboardQueriesMatchMetrics(t *testing.T) {
	t.Parallel()
	want := dashboardMetrics(t, dashboardExprs(t, dashboardPath))

	e := newEnv(t, stackReal, dashboardRules)
	// The gate reaches Redis through a proxy the test stops later, to
	// make the window store's errors and the fail-open forwards.
	redisURL, err := url.Parse(e.vars["GATE_REDIS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	redis := toxiproxy.NewProxy(toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()), "redis", "127.0.0.1:0", redisURL.Host)
	if err := redis.Start(); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(redis.Stop)
	redisURL.Host = redis.Listen
	e.vars["GATE_REDIS_URL"] = redisURL.String()
	g := e.start(map[string]string{"GATE_STORE_TIMEOUT": "200ms"})
	c := e.client()
	to := testenv.Unique("dash")
	c.send(msg{ID: to + "-1", Scene: "dash.limit", To: to}, msg{ID: to + "-2", Scene: "dash.limit", To: to},
		msg{ID: to + "-3", Scene: "dash.defer", To: to}, msg{ID: to + "-4", Scene: "dash.defer", To: to},
		msg{ID: to + "-5", Scene: "dash.unruled", To: to})
	c.publish([]byte("not json"))
	e.writeRules("scenes: [this is not a rules document")
	waitMetric(t, g, "gate_rules_reload_errors_total")
	e.writeRules(dashboardRules)
	waitMetric(t, g, "gate_held_settled_total")

	redis.Stop()
	c.send(msg{ID: to + "-6", Scene: "dash.open", To: to})
	waitMetric(t, g, "gate_store_errors_total")

	got := scrapeNames(t, g)
	var missing []string
	for _, name := range want {
		if !got[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the dashboard queries metrics the gate does not export: %v", missing)
	}
}

// dashboardExprs returns every PromQL expression of the dashboard at path:
// the panels' targets (rows' nested panels included), the templating
// queries and the annotations. It fails the test when the file is not
// valid JSON or holds no query.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s is not valid JSON: %v", path, err)
	}
	var exprs []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			// expr: a target's or annotation's query; query and
			// definition: a templating variable's.
			if key == "expr" || (key == "query" || key == "definition") && strings.Contains(v, "(") {
				exprs = append(exprs, v)
			}
		}
	}
	walk(doc, "")
	if len(exprs) == 0 {
		t.Fatalf("%s holds no query", path)
	}
	return exprs
}

var (
	// promString is a PromQL string literal, whose text (a label value, a
	// regexp) is not a metric name.
	promString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	// promGateName is an identifier of the gate's namespace.
	promGateName = regexp.MustCompile(`\bgate_[a-zA-Z0-9_]*\b`)
)

// dashboardMetrics returns the series names exprs use, sorted: every
// gate_* identifier outside string literals (a histogram's as its _bucket,
// _sum or _count). The gate's label names are never prefixed gate_, so
// each such identifier is a metric.
func dashboardMetrics(t *testing.T, exprs []string) []string {
	t.Helper()
	set := map[string]bool{}
	for _, e := range exprs {
		for _, name := range promGateName.FindAllString(promString.ReplaceAllString(e, `""`), -1) {
			set[name] = true
		}
	}
	if len(set) == 0 {
		t.Fatal("the dashboard queries no gate_* metric")
	}
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// scrapeNames returns the series names in g's /metrics: each family's
// name, and for histograms also its _bucket, _sum and _count.
func scrapeNames(t *testing.T, g *gateProc) map[string]bool {
	t.Helper()
	resp, err := http.Get(g.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	names := map[string]bool{}
	for name, f := range fams {
		if len(f.GetMetric()) == 0 {
			continue
		}
		names[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
	return names
}

// waitMetric waits until g's /metrics holds a series of name.
func waitMetric(t *testing.T, g *gateProc, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !scrapeNames(t, g)[name] {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in /metrics after 20s", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDashboardMetricsFromExprs: the extraction finds metric names, a
// histogram's series among them, and skips what string literals hold.
func TestDashboardMetricsFromExprs(t *testing.T) {
	got := dashboardMetrics(t, []string{
		`sum by (scene) (rate(gate_decisions_total{outcome=~"gate_not_a_metric|x"}[5m])) / ignoring(x) gate_batch_size_count`,
		`histogram_quantile(0.99, sum by (le) (rate(gate_store_call_seconds_bucket[$__rate_interval])))`,
	})
	want := []string{"gate_batch_size_count", "gate_decisions_total", "gate_store_call_seconds_bucket"}
	if !slices.Equal(got, want) {
		t.Errorf("dashboardMetrics = %v, want %v", got, want)
	}
}

// grafanaVar is a Grafana variable or macro in a dashboard query:
// $scene, ${scene}, $__rate_interval.
var grafanaVar = regexp.MustCompile(`\$\{?(\w+)\}?`)

// TestDashboardPromQL: every query of the dashboard parses as PromQL, as
// promtool reads it, with Grafana's variables put in: a range where one
// stands for a range, a regexp matching everything where one stands in a
// label matcher. Grafana's label_values() of the variables is not PromQL,
// and its metric is checked by TestDashboardQueriesMatchMetrics.
func TestDashboardPromQL(t *testing.T) {
	promtool := testenv.Promtool(t)
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	for i, e := range dashboardExprs(t, dashboardPath) {
		if strings.HasPrefix(e, "label_values(") {
			continue
		}
		e = grafanaVar.ReplaceAllStringFunc(e, func(v string) string {
			switch strings.Trim(v, "${}") {
			case "__rate_interval", "__interval", "__range":
				return "5m"
			default:
				return ".*"
			}
		})
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: e})
	}
	doc, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(t.Context(), promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s\nqueries:\n%s", err, out, doc)
	}
}
