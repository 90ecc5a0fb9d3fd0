package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Envelopes go with the header fast path's headers only with
// GATE_BENCH_HEADERS=1 or -headers.
func TestConfigHeaders(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env  string
		args []string
		want bool
	}{
		{"", nil, false},
		{"1", nil, true},
		{"0", nil, false},
		{"0", []string{"-headers"}, true},
		{"", []string{"-headers=false"}, false},
	} {
		getenv := func(k string) string {
			switch k {
			case "GATE_BENCH_HEADERS":
				return tt.env
			case "GATE_BENCH_DATABASE_URL":
				return "postgres://unused"
			}
			return ""
		}
		args := append([]string{"-gate-bin", bin, "-nats-bin", bin}, tt.args...)
		c, err := parseConfig(args, getenv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.headers != tt.want {
			t.Errorf("GATE_BENCH_HEADERS=%q %v: headers %t, want %t (%s)", tt.env, tt.args, c.headers, tt.want, c.mode())
		}
	}
}

// -gate-env adds settings of the gate process after the bench's own, and
// refuses what is not KEY=VALUE.
func TestConfigGateEnv(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "GATE_BENCH_DATABASE_URL" {
			return "postgres://unused"
		}
		return ""
	}
	c, err := parseConfig([]string{"-gate-bin", bin, "-nats-bin", bin, "-gate-env", "GOGC=200, GATE_BATCH=128"}, getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"GATE_BATCH=256", "GATE_MAX_ACK_PENDING=1000", "GOGC=200", "GATE_BATCH=128"}; !slices.Equal(c.gateEnv, want) {
		t.Errorf("gateEnv = %q, want %q", c.gateEnv, want)
	}
	if _, err := parseConfig([]string{"-gate-bin", bin, "-nats-bin", bin, "-gate-env", "GOGC"}, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), `-gate-env: want KEY=VALUE, got "GOGC"`) {
		t.Errorf("-gate-env GOGC: err = %v, want a refusal", err)
	}
}
