package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// profiler takes a CPU profile of the gate while it runs at full speed, for
// -profile: the gate serves its runtime profiles (GATE_PPROF_ADDR) and one
// profile covers most of the full-speed phase, whose length the warm-up's
// rate foretells. Only the first run's suppressing gate is profiled, so the
// profile's own cost (a few per cent of the gate's CPU) stays out of the
// other runs' figures.
type profiler struct {
	path string // where the profile is written
	addr string // the gate's GATE_PPROF_ADDR
}

// newProfiler returns the profiler of run i (from 0), or nil when the run
// takes no profile.
func newProfiler(path string, i int) (*profiler, error) {
	if path == "" || i > 0 {
		return nil, nil
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return &profiler{path: path, addr: "127.0.0.1:" + strconv.Itoa(port)}, nil
}

// env is the setting that makes the gate serve its profiles.
func (p *profiler) env() []string { return []string{"GATE_PPROF_ADDR=" + p.addr} }

// start begins a profile of about 80 % of n messages at rate (the
// warm-up's, a lower bound of the full speed's), at least one second, and
// returns a function that waits for it to be written.
func (p *profiler) start(ctx context.Context, n int, rate float64) (wait func() error) {
	secs := max(1, int(0.8*float64(n)/max(rate, 1)))
	done := make(chan error, 1)
	go func() { done <- p.take(ctx, secs) }()
	return func() error { return <-done }
}

func (p *profiler) take(ctx context.Context, secs int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+time.Minute)
	defer cancel()
	url := "http://" + p.addr + "/debug/pprof/profile?seconds=" + strconv.Itoa(secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("profile: %s: %s", resp.Status, body)
	}
	f, err := os.Create(p.path)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile: write %s: %w", p.path, err)
	}
	return f.Close()
}
