package prometheus

import (
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/testing/testenv"
	client "github.com/prometheus/client_golang/prometheus"
)

// TestPromtool checks the rules and runs their unit tests with the real
// promtool, the way Prometheus will load them.
func TestPromtool(t *testing.T) {
	promtool := testenv.Promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		out, err := exec.CommandContext(t.Context(), promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// fqName reads a descriptor's metric name: client_golang exposes it only in
// Desc.String.
var fqName = regexp.MustCompile(`fqName: "([a-z_:]+)"`)

// TestAlertsUseGateMetrics fails on a gate_* name in alerts.yaml that the
// gate does not register: a renamed metric would otherwise leave an alert
// that never fires. Histogram series (_bucket, _sum, _count) count as their
// histogram's name.
func TestAlertsUseGateMetrics(t *testing.T) {
	m := metrics.New(client.NewRegistry())
	names := map[string]bool{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(client.Collector)
		if !ok || v.Field(i).Type() == reflect.TypeFor[*client.Registry]() {
			continue
		}
		ch := make(chan *client.Desc, 8)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if sub := fqName.FindStringSubmatch(d.String()); sub != nil {
				names[sub[1]] = true
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in metrics.Metrics: %v", len(names), names)
	}
	rules, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`\bgate_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("alerts.yaml names no gate_* metric")
	}
	for _, name := range slices.Compact(slices.Sorted(slices.Values(used))) {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && names[b] {
				base = b
			}
		}
		if !names[base] {
			t.Errorf("alerts.yaml uses %s, which the gate does not export", name)
		}
	}
}
