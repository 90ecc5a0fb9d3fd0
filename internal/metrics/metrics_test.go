package metrics

import (
	"strings"
	"testing"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
)

// OtherScenes must never be a scene's own name: rule scene names hold no
// whitespace, and it does.
func TestOtherScenesIsNoSceneName(t *testing.T) {
	if strings.IndexFunc(OtherScenes, unicode.IsSpace) < 0 {
		t.Errorf("OtherScenes %q holds no whitespace: a rule could name a scene so", OtherScenes)
	}
}

// Every collector of the gate's own is named gate_*, and every metric the
// pipeline labels by scene has that label, so that OtherScenes applies.
func TestNames(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.Decisions.WithLabelValues(OtherScenes, "forward", "false").Inc()
	m.Invalid.WithLabelValues(OtherScenes).Inc()
	m.Unchecked.WithLabelValues(OtherScenes).Inc()
	m.Recovered.WithLabelValues("parse").Inc()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range fams {
		name := f.GetName()
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		seen++
		if !strings.HasPrefix(name, "gate_") {
			t.Errorf("collector %s is not named gate_*", name)
		}
	}
	if seen < 4 {
		t.Errorf("gathered %d gate_* families, want at least the 4 just written", seen)
	}
}
