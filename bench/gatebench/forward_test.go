package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestVMRSS(t *testing.T) {
	status := "Name:\tnats-server\nVmPeak:\t 2000 kB\nVmRSS:\t   51200 kB\nRssAnon:\t 40000 kB\n"
	got, err := vmRSS(status)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(51200 << 10); got != want {
		t.Fatalf("vmRSS = %d, want %d", got, want)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tmany kB\n"} {
		if _, err := vmRSS(bad); err == nil {
			t.Errorf("vmRSS(%q): no error", bad)
		}
	}
}

func TestMedianOf(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		xs := append([]float64(nil), tc.xs...)
		if got := medianOf(tc.xs); got != tc.want {
			t.Errorf("medianOf(%v) = %v, want %v", tc.xs, got, tc.want)
		}
		for i := range xs {
			if xs[i] != tc.xs[i] {
				t.Fatalf("medianOf reordered its input: %v", tc.xs)
			}
		}
	}
}

func TestParseConfigForwardNeedsOnlyNATS(t *testing.T) {
	nats := filepath.Join(t.TempDir(), "nats-server")
	if err := os.WriteFile(nats, nil, 0o700); err != nil {
		t.Fatal(err)
	}
	getenv := func(string) string { return "" }
	c, err := parseConfig([]string{"-forward", "-nats-bin", nats, "-gate-bin", "/nonexistent/gate"}, getenv, io.Discard)
	if err != nil {
		t.Fatalf("parseConfig -forward without a database or gate binary: %v", err)
	}
	if !c.forward {
		t.Fatal("-forward not set")
	}
	if _, err := parseConfig([]string{"-forward", "-nats-bin", "/nonexistent/nats-server"}, getenv, io.Discard); err == nil {
		t.Fatal("parseConfig -forward without nats-server: no error")
	}
}
