package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// profiler takes a CPU profile of the gate while it runs at full speed, for
// -profile: the gate serves its runtime profiles (GATE_PPROF_ADDR) and
// gatebench takes one-second profiles, one after the other, from the
// phase's start until it ends, written to path.1, path.2, ... (go tool
// pprof merges the files it is given). The phase's length is not known in
// advance, and a profile cannot be stopped early. Only the first run's
// suppressing gate is profiled, so the profile's own cost (a few per cent
// of the gate's CPU) stays out of the other runs' figures.
type profiler struct {
	path string // the profiles are path.1, path.2, ...
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

// start takes one-second profiles until stop is called; stop waits for the
// last one and returns the files written and the first error.
func (p *profiler) start(ctx context.Context) (stop func() ([]string, error)) {
	var (
		stopped atomic.Bool
		files   []string
		err     error
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := 1; !stopped.Load() && ctx.Err() == nil; i++ {
			f := p.path + "." + strconv.Itoa(i)
			if err = p.take(ctx, f, 1); err != nil {
				return
			}
			files = append(files, f)
		}
	}()
	return func() ([]string, error) {
		stopped.Store(true)
		<-done
		return files, err
	}
}

func (p *profiler) take(ctx context.Context, path string, secs int) error {
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
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile: write %s: %w", path, err)
	}
	return f.Close()
}
