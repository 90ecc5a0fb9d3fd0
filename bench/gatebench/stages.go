package main

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// calls names the gate's calls to its dependencies, as gate_store_call_seconds
// labels them ("store op"), in the order they are printed.
var calls = []string{"window admit", "audit commit", "nats forward", "audit decided", "audit waiting", "audit check_answer"}

// histo is one cumulative Prometheus histogram.
type histo struct {
	count, sum float64
	le, cum    []float64 // bucket bounds and cumulative counts
}

// minus is what h gained since before.
func (h histo) minus(before histo) histo {
	d := histo{count: h.count - before.count, sum: h.sum - before.sum, le: h.le, cum: slices.Clone(h.cum)}
	for i := range d.cum {
		if i < len(before.cum) {
			d.cum[i] -= before.cum[i]
		}
	}
	return d
}

// quantile is the upper bound of the first bucket holding the q-quantile.
func (h histo) quantile(q float64) float64 {
	for i, c := range h.cum {
		if c >= q*h.count {
			return h.le[i]
		}
	}
	return math.Inf(1)
}

// snapshot is the gate's batch and call histograms at one moment, by name:
// "batch" or one of calls.
type snapshot map[string]histo

// scrapeGate reads the gate's /metrics.
func scrapeGate(url string) (snapshot, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scrape the gate: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape the gate: %w", err)
	}
	s := snapshot{}
	if f := families["gate_batch_size"]; f != nil && len(f.Metric) == 1 {
		s["batch"] = toHisto(f.Metric[0].GetHistogram())
	}
	if f := families["gate_store_call_seconds"]; f != nil {
		for _, m := range f.Metric {
			var store, op string
			for _, l := range m.Label {
				switch l.GetName() {
				case "store":
					store = l.GetValue()
				case "op":
					op = l.GetValue()
				}
			}
			s[store+" "+op] = toHisto(m.GetHistogram())
		}
	}
	return s, nil
}

func toHisto(h *dto.Histogram) histo {
	out := histo{count: float64(h.GetSampleCount()), sum: h.GetSampleSum()}
	for _, b := range h.Bucket {
		out.le = append(out.le, b.GetUpperBound())
		out.cum = append(out.cum, float64(b.GetCumulativeCount()))
	}
	return out
}

// stageStats are one phase's figures from the gate's metrics: the mean
// batch size, and the mean and p99 (a bucket bound) of each call, in ms.
type stageStats map[string]float64

func (s snapshot) since(before snapshot) stageStats {
	st := stageStats{}
	if b, ok := s["batch"]; ok {
		if d := b.minus(before["batch"]); d.count > 0 {
			st["batch"] = d.sum / d.count
		}
	}
	for _, c := range calls {
		h, ok := s[c]
		if !ok {
			continue
		}
		d := h.minus(before[c])
		if d.count == 0 {
			continue
		}
		st[c+" mean"] = 1000 * d.sum / d.count
		st[c+" p99"] = 1000 * d.quantile(0.99)
	}
	return st
}

// printStages prints where the gate's batches spend their time, at full
// speed and at half rate.
func printStages(w io.Writer, full, half stageStats) {
	if len(full) == 0 && len(half) == 0 {
		return
	}
	fmt.Fprintf(w, "the gate's batches (its metrics): mean size %.0f at full speed, %.0f at half rate; per call, mean / p99 ms (p99 is a bucket bound):", full["batch"], half["batch"])
	var parts []string
	for _, c := range calls {
		if _, ok := full[c+" mean"]; !ok {
			if _, ok := half[c+" mean"]; !ok {
				continue
			}
		}
		parts = append(parts, fmt.Sprintf(" %s %.1f / %.1f | %.1f / %.1f", c, full[c+" mean"], full[c+" p99"], half[c+" mean"], half[c+" p99"]))
	}
	fmt.Fprintln(w, strings.Join(parts, ";"))
}

// printCheckStages prints where a gate's batches of checks spent their time
// at 1,000 checks/s: its calls to the stores, one per batch each.
func printCheckStages(w io.Writer, st stageStats) {
	var parts []string
	for _, c := range calls {
		if m, ok := st[c+" mean"]; ok {
			parts = append(parts, fmt.Sprintf("%s %.2f / %.1f", c, m, st[c+" p99"]))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "    its batches' calls at 1,000 checks/s, mean / p99 ms (p99 a bucket bound): %s\n", strings.Join(parts, "; "))
	}
}

// printDeferStages prints where the deferring gate's batches spend their
// time at full speed, its Waiting lookup among them.
func printDeferStages(w io.Writer, st stageStats) {
	if len(st) == 0 {
		return
	}
	parts := []string{fmt.Sprintf("the deferring gate's batches: mean size %.0f; per call, mean / p99 ms:", st["batch"])}
	for _, c := range calls {
		if _, ok := st[c+" mean"]; ok {
			parts = append(parts, fmt.Sprintf(" %s %.1f / %.1f", c, st[c+" mean"], st[c+" p99"]))
		}
	}
	fmt.Fprintln(w, strings.Join(parts, ";"))
}
