// Built without -race, as nacos_test.go is: nacos-sdk-go races internally.

//go:build !race

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/testenv"
)

// TestRulesPushPreviews: gate rules push prints the preview of the last
// 24 hours from the gate before it publishes; without --yes on a stdin
// that is not a terminal it refuses and publishes nothing, and a gate that
// does not answer is said, and needs --yes.
func TestRulesPushPreviews(t *testing.T) {
	n := sharedNacos(t)
	dataID := testenv.Unique("gate-rules") + ".yaml"
	n.publish(dataID, previewRulesNow)
	e := nacosEnv(t, n, dataID)
	const token = "push-t0ken"
	g := e.start(map[string]string{"GATE_API_TOKEN": token})
	previewTraffic(t, e.client(), testenv.Unique("pa"), testenv.Unique("pb"))

	file := filepath.Join(t.TempDir(), "strict.yaml")
	if err := os.WriteFile(file, []byte(previewRulesStrict), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		return map[string]string{"GATE_NACOS_ADDR": n.addr, "GATE_NACOS_DATA_ID": dataID, "GATE_DATA_DIR": t.TempDir(),
			"GATE_API_TOKEN": token}[k]
	}
	push := func(stdin string, args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(t.Context(), append(append([]string{"rules", "push"}, args...), file), getenv, strings.NewReader(stdin), &out, &errOut)
		return out.String(), err
	}

	t.Run("without --yes on a non-terminal: the preview, then a refusal", func(t *testing.T) {
		out, err := push("y\n", "--server", g.base)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--yes") {
			t.Errorf("push without --yes: %v, want a usage error naming --yes", err)
		}
		if !strings.Contains(out, "preview of the last 24h") || !strings.Contains(out, "p.alert") || !strings.Contains(out, "fwd -3 sup +3") {
			t.Errorf("push printed:\n%s\nwant the preview with p.alert's change", out)
		}
		if got := n.get(dataID); got != previewRulesNow {
			t.Errorf("Nacos holds %q after a refused push, want the old document", got)
		}
	})

	t.Run("no gate answering: said, and refused without --yes", func(t *testing.T) {
		dead := "http://" + freeAddr(t)
		if _, err := push("", "--server", dead); err == nil || !strings.Contains(err.Error(), "pass --yes") || !strings.Contains(err.Error(), dead) {
			t.Errorf("push with no gate: %v, want an error naming the gate and --yes", err)
		}
		if got := n.get(dataID); got != previewRulesNow {
			t.Errorf("Nacos holds %q after a refused push, want the old document", got)
		}
	})

	t.Run("--yes publishes after the preview", func(t *testing.T) {
		out, err := push("", "--yes", "--server="+g.base)
		if err != nil {
			t.Fatalf("push --yes: %v\n%s", err, out)
		}
		if !strings.Contains(out, "fwd -3 sup +3") || !strings.Contains(out, "pushed "+file) {
			t.Errorf("push --yes printed:\n%s\nwant the preview, then pushed", out)
		}
		if got := n.get(dataID); got != previewRulesStrict {
			t.Errorf("Nacos holds %q, want the pushed document", got)
		}
		want := docVersion(t, previewRulesStrict)
		waitFor(t, 10*time.Second, func() bool { return g.rulesStatus().Version == want })
	})
}
