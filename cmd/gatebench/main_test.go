package main

import (
	"io"
	"os"
	"path/filepath"
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
