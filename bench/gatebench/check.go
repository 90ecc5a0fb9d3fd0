package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/antifatigue/gate/internal/testing/pgschema"
)

// The check benchmark (gatebench -check; make bench-check) measures the
// latency of POST /v1/check and of the request-reply subject gate.check on
// a gate running on Redis and PostgreSQL: at 1,000 checks per second, and
// at the highest rate the gate sustains. Load is open-loop: requests leave
// on a fixed schedule whatever the answers do, and a request's latency runs
// from when it was due to leave, so a stalled gate shows in the figures
// instead of slowing the load that measures it.

// checkStep is how long each rate is held.
const checkStep = 5 * time.Second

// Sustained means the answers kept up (at least 95 % of the target rate
// answered within the step, plus a grace of a second) with a p99 under
// checkP99Bound and no errors.
const checkP99Bound = 50 * time.Millisecond

// checkStats is what one step measured.
type checkStats struct {
	target, rate float64 // checks per second: asked, answered
	p50, p99     time.Duration
	errors       int
	answered     int
	admitted     int
}

func (s checkStats) sustained() bool {
	return s.errors == 0 && s.rate >= 0.95*s.target && s.p99 <= checkP99Bound
}

// checkTransport sends one check and reports whether it was admitted.
type checkTransport struct {
	name string
	send func(ctx context.Context, body []byte) (admitted bool, err error)
}

// runCheckBench starts nats-server and a gate on Redis and PostgreSQL and
// measures both transports.
func runCheckBench(ctx context.Context, c *config, stdout, stderr io.Writer) error {
	r := &runner{cfg: c, log: stderr, tag: fmt.Sprintf("c%x", time.Now().UnixNano()&0xffffff)}
	var err error
	if r.dir, err = os.MkdirTemp("", "gatebench-check-"); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(r.dir)
	ns, natsURL, err := startNATS(ctx, c.natsBin, r.dir)
	if err != nil {
		return err
	}
	defer func() { _ = ns.stop() }()
	dbURL, drop, err := pgschema.Create(ctx, c.databaseURL, "gatebench_"+r.tag)
	if err != nil {
		return err
	}
	defer r.dropSchema(drop)
	rulesPath := filepath.Join(r.dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rulesDoc(false)), 0o600); err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	g, err := startGate(ctx, c.gateBin, r.dir, gateEnv{
		natsURL: natsURL, redisURL: c.redisURL, databaseURL: dbURL,
		rulesPath: rulesPath, dataDir: filepath.Join(r.dir, "gate-data"), extra: c.gateEnv,
	})
	if err != nil {
		return err
	}
	defer func() { _ = g.stop() }()
	rdb, err := newRedis(c.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	defer func() { _, _ = deleteKeys(context.Background(), rdb, "gate:{open_id:ou_"+r.tag+"*") }()
	nc, err := nats.Connect(natsURL, nats.Name("gatebench-check"))
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}
	transports := []checkTransport{
		{"POST /v1/check", func(ctx context.Context, body []byte) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/check", bytes.NewReader(body))
			if err != nil {
				return false, err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			defer resp.Body.Close()
			answer, err := io.ReadAll(resp.Body)
			if err != nil {
				return false, err
			}
			if resp.StatusCode != http.StatusOK {
				return false, fmt.Errorf("%s: %s", resp.Status, answer)
			}
			return admittedIn(answer)
		}},
		{checkSubject, func(ctx context.Context, body []byte) (bool, error) {
			m, err := nc.RequestWithContext(ctx, checkSubject, body)
			if err != nil {
				return false, err
			}
			return admittedIn(m.Data)
		}},
	}
	fmt.Fprintf(stdout, "gatebench -check: open-loop load, %v per rate; sustained = ≥95 %% answered, p99 ≤ %v, no errors; %s\n",
		checkStep, checkP99Bound, machine())
	var seq atomic.Int64
	body := func() []byte {
		i := seq.Add(1)
		// A few checks per recipient, spread over the benchmark's scenes:
		// some admitted, some over a limit, as real traffic.
		sc := benchScenes[int(i)%len(benchScenes)].name
		b, _ := json.Marshal(map[string]string{"id": fmt.Sprintf("%s-%d", r.tag, i), "scene": sc,
			"receive_id_type": "open_id", "receive_id": fmt.Sprintf("ou_%s_%d", r.tag, i/3)})
		return b
	}
	fmt.Fprintf(stdout, "%-16s %10s %10s %9s %9s %7s %9s\n", "transport", "target/s", "answered/s", "p50 ms", "p99 ms", "errors", "admitted")
	line := func(t checkTransport, s checkStats) {
		fmt.Fprintf(stdout, "%-16s %10.0f %10.0f %9.2f %9.2f %7d %8.0f%%\n", t.name, s.target, s.rate, ms(s.p50), ms(s.p99), s.errors,
			100*float64(s.admitted)/float64(max(s.answered, 1)))
	}
	for _, t := range transports {
		// Warm up connections, the script cache and the gate's pools.
		if _, err := openLoop(ctx, t, 500, time.Second, body); err != nil {
			return err
		}
		at1k, err := openLoop(ctx, t, 1000, checkStep, body)
		if err != nil {
			return err
		}
		line(t, at1k)
		best := at1k
		for rate := 2000.0; rate <= 64000; rate *= 1.5 {
			s, err := openLoop(ctx, t, rate, checkStep, body)
			if err != nil {
				return err
			}
			line(t, s)
			if !s.sustained() {
				break
			}
			best = s
		}
		fmt.Fprintf(stdout, "BENCH_CHECK transport=%q at1k_p50_ms=%.2f at1k_p99_ms=%.2f max_rate=%.0f max_p50_ms=%.2f max_p99_ms=%.2f\n",
			t.name, ms(at1k.p50), ms(at1k.p99), best.rate, ms(best.p50), ms(best.p99))
	}
	return nil
}

// admittedIn reads "admitted" from a check's answer; an answer with
// "error" is an error.
func admittedIn(answer []byte) (bool, error) {
	var a struct {
		Admitted bool    `json:"admitted"`
		Error    *string `json:"error"`
	}
	if err := json.Unmarshal(answer, &a); err != nil {
		return false, fmt.Errorf("answer %q: %w", answer, err)
	}
	if a.Error != nil {
		return false, fmt.Errorf("answer: %s", *a.Error)
	}
	return a.Admitted, nil
}

// openLoop sends checks at rate for d, each on its own goroutine at its
// due time, and waits for the answers (at most a second past d).
func openLoop(ctx context.Context, t checkTransport, rate float64, d time.Duration, body func() []byte) (checkStats, error) {
	n := int(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	ctx, cancel := context.WithTimeout(ctx, d+time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, n)
		errs     int
		admitted int
		wg       sync.WaitGroup
		last     time.Time
	)
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		if ctx.Err() != nil {
			break
		}
		b := body()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := t.send(ctx, b)
			done := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				return
			}
			if ok {
				admitted++
			}
			lat = append(lat, done.Sub(due))
			last = done
		}()
	}
	wg.Wait()
	s := checkStats{target: rate, errors: errs, answered: len(lat), admitted: admitted}
	if len(lat) > 0 {
		s.rate = float64(len(lat)) / max(last.Sub(start).Seconds(), d.Seconds())
		s.p50, s.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	}
	if errs > 0 && len(lat) == 0 {
		return s, fmt.Errorf("%s at %.0f/s: all %d checks failed", t.name, rate, errs)
	}
	return s, nil
}
