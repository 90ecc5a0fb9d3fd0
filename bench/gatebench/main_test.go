package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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

// The soak's duration, rate and retention come from GATE_SOAK_DURATION,
// GATE_SOAK_RATE and GATE_SOAK_RETENTION (30m, 1,000/s and 10m by
// default), and a flag wins over the variable.
func TestConfigSoak(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env      map[string]string
		args     []string
		duration time.Duration
		rate     float64
		ret      time.Duration
	}{
		{nil, nil, 30 * time.Minute, 1000, 10 * time.Minute},
		{map[string]string{"GATE_SOAK_DURATION": "4m", "GATE_SOAK_RATE": "300", "GATE_SOAK_RETENTION": "30m"}, nil, 4 * time.Minute, 300, 30 * time.Minute},
		{map[string]string{"GATE_SOAK_DURATION": "4m"}, []string{"-soak-duration", "6m", "-soak-rate", "50"}, 6 * time.Minute, 50, 10 * time.Minute},
	} {
		getenv := func(k string) string {
			if k == "GATE_BENCH_DATABASE_URL" {
				return "postgres://unused"
			}
			return tt.env[k]
		}
		c, err := parseConfig(append([]string{"-gate-bin", bin, "-nats-bin", bin, "-soak"}, tt.args...), getenv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if !c.soak || c.soakDuration != tt.duration || c.soakRate != tt.rate || c.soakRetention != tt.ret {
			t.Errorf("%v %v: soak %t, %v at %v/s, retention %v; want %v at %v/s, retention %v", tt.env, tt.args, c.soak, c.soakDuration, c.soakRate, c.soakRetention, tt.duration, tt.rate, tt.ret)
		}
	}
	// The gate runs with 10-minute partitions, the retention for both
	// tables, and a prune every minute.
	got := strings.Join(soakSettings(10*time.Minute), " ")
	for _, want := range []string{"GATE_PARTITION_WIDTH=10m", "GATE_LEDGER_RETENTION=10m0s", "GATE_AUDIT_RETENTION=10m0s", "GATE_PRUNE_INTERVAL=1m"} {
		if !strings.Contains(got, want) {
			t.Errorf("soak settings %q: no %s", got, want)
		}
	}
	if n := soakRecipients(1000); n != 10_800 {
		t.Errorf("recipients at 1,000/s: %d, want 10,800 (half a deferring message per 10-second window each)", n)
	}
}
