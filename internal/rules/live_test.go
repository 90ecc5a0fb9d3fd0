package rules

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// docMax is a one-scene document whose max tells documents apart.
func docMax(max int) []byte {
	return fmt.Appendf(nil, "scenes:\n  a:\n    limits: [{window: 1h, max: %d}]\n", max)
}

func maxOf(rs *gate.RuleSet) int { return rs.Scenes["a"].Limits[0].Max }

func newTestLive(t *testing.T, source string, max int) (*Live, *metrics.Metrics) {
	t.Helper()
	rs, err := Parse(source, docMax(max))
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	live, err := NewLive(source, rs, m, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	return live, m
}

// TestLiveApplyDocConcurrent offers documents 1..n from n goroutines in a
// shuffled order, as Nacos callbacks may arrive; the newest must win every
// time, whatever order they reach Live in.
func TestLiveApplyDocConcurrent(t *testing.T) {
	const n = 40
	for round := range 10 {
		live, _ := newTestLive(t, "nacos:GATE/gate-rules.yaml", 1000)
		live.log = slog.New(slog.DiscardHandler)
		var wg sync.WaitGroup
		for _, i := range rand.Perm(n) {
			seq := uint64(i + 1)
			wg.Go(func() {
				err := live.ApplyDoc("nacos:GATE/gate-rules.yaml", seq, docMax(int(seq)))
				if err != nil && !errors.Is(err, ErrStale) {
					t.Errorf("ApplyDoc(%d): %v", seq, err)
				}
			})
		}
		wg.Wait()
		if got := maxOf(live.Current()); got != n {
			t.Fatalf("round %d: rules in force have max %d, want the newest document's %d", round, got, n)
		}
	}
}

func TestLiveRejectKeepsRules(t *testing.T) {
	const src = "nacos:GATE/gate-rules.yaml"
	live, m := newTestLive(t, src, 1)
	good := live.Current()

	err := live.ApplyDoc(src, live.NextSeq(), []byte("scenes:\n  a:\n    limits: [{window: 0s, max: 1}]\n"))
	if err == nil {
		t.Fatal("ApplyDoc of an invalid document succeeded")
	}
	if live.Current() != good {
		t.Error("an invalid document replaced the rules in force")
	}
	st := live.Status()
	want := src + ":3:23: scenes.a.limits[0].window: must be positive"
	if !strings.HasPrefix(st.LastError, want) || st.LastErrorAt.IsZero() {
		t.Errorf("Status().LastError = %q at %v, want %q...", st.LastError, st.LastErrorAt, want)
	}
	if st.Version != good.Version || st.Rules != good || st.Source != src {
		t.Errorf("Status() = %+v, want the good rules from %s", st, src)
	}

	// An empty document is what Nacos sends on delete: never in force.
	if err := live.ApplyDoc(src, live.NextSeq(), nil); !errors.Is(err, ErrNoRules) {
		t.Errorf("ApplyDoc(empty) = %v, want ErrNoRules", err)
	}
	if got := value(t, m.RulesReloadErrs.WithLabelValues(src)); got != 2 {
		t.Errorf("reload errors = %v, want 2", got)
	}

	// Reverting to the same rules clears the error without a reload.
	loadedAt := live.Status().LoadedAt
	if err := live.ApplyDoc(src, live.NextSeq(), docMax(1)); err != nil {
		t.Fatal(err)
	}
	if st := live.Status(); st.LastError != "" || !st.LastErrorAt.IsZero() || !st.LoadedAt.Equal(loadedAt) {
		t.Errorf("after reverting: Status() = %+v, want no error and the original loaded_at", st)
	}

	if err := live.ApplyDoc(src, live.NextSeq(), docMax(2)); err != nil {
		t.Fatal(err)
	}
	if got := maxOf(live.Current()); got != 2 {
		t.Errorf("max = %d, want 2", got)
	}
	if got := value(t, m.RulesReloads.WithLabelValues(src)); got != 2 {
		t.Errorf("reloads = %v, want 2 (the initial set and one change)", got)
	}
	if n := seriesCount(t, m, "gate_rules_info"); n != 1 {
		t.Errorf("gate_rules_info has %d series, want only the version in force", n)
	}
	if got := value(t, m.RulesInfo.WithLabelValues(live.Current().Version, src)); got != 1 {
		t.Errorf("gate_rules_info{version in force} = %v, want 1", got)
	}
}

// value reads a counter or gauge. (prometheus/testutil would need a module
// go.sum does not have.)
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}

func seriesCount(t *testing.T, m *metrics.Metrics, name string) int {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

func TestLiveStale(t *testing.T) {
	live, _ := newTestLive(t, "test", 1)
	if err := live.ApplyDoc("test", 5, docMax(5)); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{5, 4, 0} {
		if err := live.ApplyDoc("test", seq, docMax(int(seq)+10)); !errors.Is(err, ErrStale) {
			t.Errorf("ApplyDoc(seq %d) = %v, want ErrStale", seq, err)
		}
	}
	// A late failure of an old document must not show as the current error.
	if err := live.Reject("test", 3, errors.New("old")); !errors.Is(err, ErrStale) {
		t.Errorf("Reject(stale) = %v, want ErrStale", err)
	}
	if st := live.Status(); st.LastError != "" || maxOf(st.Rules) != 5 {
		t.Errorf("Status() = %+v, want max 5 and no error", st)
	}
	if seq := live.NextSeq(); seq != 6 {
		t.Errorf("NextSeq() = %d, want 6, past the highest seen", seq)
	}
	// A newer invalid document blocks an older valid one that arrives late.
	if err := live.ApplyDoc("test", 8, []byte("scenes: [")); err == nil {
		t.Fatal("invalid document accepted")
	}
	if err := live.ApplyDoc("test", 7, docMax(7)); !errors.Is(err, ErrStale) {
		t.Errorf("ApplyDoc(7 after 8) = %v, want ErrStale", err)
	}
}

func TestLiveReload(t *testing.T) {
	live, _ := newTestLive(t, "test", 1)
	if err := live.Reload("test", func() ([]byte, error) { return docMax(3), nil }); err != nil {
		t.Fatal(err)
	}
	if got := maxOf(live.Current()); got != 3 {
		t.Errorf("max = %d, want 3", got)
	}
	down := errors.New("connection refused")
	if err := live.Reload("test", func() ([]byte, error) { return nil, down }); !errors.Is(err, down) {
		t.Errorf("Reload = %v, want the fetch error", err)
	}
	if st := live.Status(); !strings.Contains(st.LastError, "connection refused") || maxOf(st.Rules) != 3 {
		t.Errorf("Status() = %+v, want the fetch error and max 3", st)
	}
}

func TestNewLive(t *testing.T) {
	if _, err := NewLive("test", nil, nil, nil); err == nil {
		t.Error("NewLive(nil rules) succeeded, want an error: a gate must not start without rules")
	}
	rs, err := Parse("test", docMax(1))
	if err != nil {
		t.Fatal(err)
	}
	live, err := NewLive("test", rs, nil, nil) // metrics and logger are optional
	if err != nil {
		t.Fatal(err)
	}
	if err := live.ApplyDoc("test", live.NextSeq(), []byte("x")); err == nil {
		t.Error("invalid document accepted")
	}
	if err := live.ApplyDoc("test", live.NextSeq(), docMax(2)); err != nil {
		t.Fatal(err)
	}
	if err := live.Apply("test", live.NextSeq(), nil); err == nil {
		t.Error("Apply(nil) succeeded")
	}
}
