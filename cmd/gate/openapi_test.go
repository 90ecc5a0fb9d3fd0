package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpenAPIConformance runs schemathesis (PyPI) against the OpenAPI
// document of a real gate (NATS, Redis, Postgres) that holds decided
// traffic, held messages settled included: every operation is called with generated valid and invalid
// parameters, and any 5xx, any answer that does not match its documented
// status, content type, headers or schema, any invalid request accepted,
// or an API open without the token fails the test. Settings:
// testdata/schemathesis.toml. Bounded to 40 examples per operation and
// 3 minutes.
func TestOpenAPIConformance(t *testing.T) {
	bin := requiredTool(t, "schemathesis", "GATE_TEST_SCHEMATHESIS", "scripts/schemathesis.sh")
	config, err := filepath.Abs(filepath.Join("testdata", "schemathesis.toml"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, stackReal, reportRules)
	const token = "schemathesis-s3cret"
	g := e.start(map[string]string{"GATE_API_TOKEN": token, "GATE_LOG_LEVEL": "warn"})
	// Settled held messages, so that their rows' fields meet the schema too.
	waitHeldSettled(t, g, reportTraffic(t, e.client()))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, bin, "--config-file", config, "run", g.base+"/v1/openapi.json",
		"--checks", "all", "--max-examples", "40", "--workers", "1", "--generation-database", "none",
		"--no-color", "--report", "junit", "--report-dir", dir)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GATE_SCHEMATHESIS_TOKEN="+token,
		// Keep schemathesis and hypothesis from writing into the home folder.
		"HOME="+dir, "XDG_CACHE_HOME="+dir)
	out, err := cmd.CombinedOutput()
	summary := string(out)
	if i := strings.LastIndex(summary, "SUMMARY"); i > 0 {
		summary = summary[i:]
	}
	if err != nil {
		t.Fatalf("schemathesis found problems (%v):\n%s", err, out)
	}
	t.Logf("schemathesis %s:\n%s", g.base, summary)
}
