package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/pgschema"
	"github.com/jackc/pgx/v5"
)

// phase is what one publishing phase measured.
type phase struct {
	n        int
	rate     float64 // outcomes per second, first publish to last outcome
	p50, p99 time.Duration
	naks     int
	repeats  int // acks of a sequence already acked, not counted again
	cpu      cpuUse
	stages   stageStats // from the gate's own metrics; gate phases only
}

// perMsg is the CPU time of component per message of the phase.
func (p phase) perMsg(component string) time.Duration {
	if p.n == 0 {
		return 0
	}
	return p.cpu.used[component] / time.Duration(p.n)
}

// fixedRates are the open-loop rates at which make bench also measures the
// gate's latency, fixedN messages each per run (issue 27, item 7): the
// summary's median over three runs is then 3 x 10,000 messages per rate.
var fixedRates = [2]float64{1000, 4000}

// gateResult is the gate's part of a run.
type gateResult struct {
	max, half phase
	fixed     [len(fixedRates)]phase // at fixedRates; empty when not measured
	expected  outcomes               // from the simulation
	counted   outcomes               // from the gate's hourly counters
}

// measure publishes msgs at pace (0: full speed) and waits until every
// message's stream sequence has been acked (or terminated).
func measure(ctx context.Context, pub *publisher, subject string, watch *ackWatch, meter *cpuMeter, msgs messages, pace float64) (phase, error) {
	data := msgs.data
	reached := watch.expect(len(data))
	before := meter.read()
	first, err := pub.publish(ctx, subject, msgs, pace)
	if err != nil {
		return phase{}, err
	}
	timeout := time.NewTimer(time.Minute + time.Duration(len(data))*time.Millisecond)
	defer timeout.Stop()
	select {
	case <-reached:
	case <-timeout.C:
		_, got, naks, _, _ := watch.seen()
		return phase{}, fmt.Errorf("%d of %d outcomes seen (%d naks) before the timeout", got, len(data), naks)
	case <-ctx.Done():
		return phase{}, ctx.Err()
	}
	after := meter.read()
	lat, got, naks, repeats, last := watch.seen()
	p := phase{n: got, naks: naks, repeats: repeats, cpu: before.to(after)}
	p.rate = float64(got) / last.Sub(first).Seconds()
	p.p50, p.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return p, nil
}

// percentile returns the q-quantile of ds (which it sorts).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// gateWork is a run's messages, in the order they are published, and the
// rules the gate runs them under. half is empty when the run measures full
// speed only.
type gateWork struct {
	warm, full, half messages
	fixed            [len(fixedRates)]messages // published at fixedRates after half; empty: not measured
	// deferred: the scenes that suppress defer instead (rulesDoc).
	deferred bool
}

// runGate measures the gate binary: a warm-up, N messages at full speed,
// then N/2 at half the rate it reached. The gate's own counters must then
// agree with the simulation, or the figures mean nothing. A deferring gate
// holds what a suppressing one suppresses or drops, so one simulation serves
// both.
func (r *runner) runGate(ctx context.Context, rs *gate.RuleSet, work gateWork) (gateResult, error) {
	var res gateResult
	dbURL, drop, err := pgschema.Create(ctx, r.cfg.databaseURL, "gatebench_"+r.tag)
	if err != nil {
		return res, err
	}
	defer r.dropSchema(drop)
	rulesPath := filepath.Join(r.dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rulesDoc(work.deferred)), 0o600); err != nil {
		return res, fmt.Errorf("write rules: %w", err)
	}
	sim := newSimulator(rs)
	for _, m := range append([]messages{work.warm, work.full, work.half}, work.fixed[:]...) {
		if _, err := sim.decide(m.data, false); err != nil {
			return res, err
		}
	}
	res.expected = sim.got
	if work.deferred {
		// What a suppressing gate suppresses or drops, a deferring one defers.
		res.expected = outcomes{forward: sim.got.forward, suppress: sim.got.suppress + sim.got.drop}
	}

	prof := r.prof
	if work.deferred {
		prof = nil // the suppressing gate's profile only
	}
	extra := r.cfg.gateEnv
	if prof != nil {
		extra = append(slices.Clip(extra), prof.env()...)
	}
	g, err := startGate(ctx, r.cfg.gateBin, r.dir, gateEnv{
		natsURL: r.natsURL, redisURL: r.cfg.redisURL, databaseURL: dbURL,
		rulesPath: rulesPath, dataDir: filepath.Join(r.dir, "gate-data"), extra: extra,
	})
	if err != nil {
		return res, err
	}
	defer func() {
		if err := g.stop(); err != nil {
			r.logf("%v", err)
		}
	}()
	watch, err := watchAcks(r.nc, "GATE_IN", "gate")
	if err != nil {
		return res, err
	}
	defer watch.close()
	meter := r.meter(g.pid())

	if _, err := measure(ctx, r.pub, inSubject, watch, meter, work.warm, 0); err != nil {
		return res, fmt.Errorf("gate warm-up: %w", err)
	}
	stopProfile := func() ([]string, error) { return nil, nil }
	if prof != nil {
		stopProfile = prof.start(ctx)
	}
	before, err := scrapeGate(g.url + "/metrics")
	if err != nil {
		return res, err
	}
	if res.max, err = measure(ctx, r.pub, inSubject, watch, meter, work.full, 0); err != nil {
		return res, fmt.Errorf("gate at full speed: %w", err)
	}
	afterMax, err := scrapeGate(g.url + "/metrics")
	if err != nil {
		return res, err
	}
	res.max.stages = afterMax.since(before)
	if files, err := stopProfile(); err != nil {
		return res, err
	} else if len(files) > 0 {
		r.logf("run %s: CPU profile of the gate at full speed in %d files: go tool pprof -top %s %s.*", r.tag, len(files), r.cfg.gateBin, prof.path)
	}
	if len(work.half.data) == 0 {
		res.counted, err = countedOutcomes(ctx, dbURL)
		return res, err
	}
	second := res.max.rate / 2
	if r.cfg.secondRate > 0 {
		second = r.cfg.secondRate
	}
	if res.half, err = measure(ctx, r.pub, inSubject, watch, meter, work.half, second); err != nil {
		return res, fmt.Errorf("gate at half rate: %w", err)
	}
	afterHalf, err := scrapeGate(g.url + "/metrics")
	if err != nil {
		return res, err
	}
	res.half.stages = afterHalf.since(afterMax)
	for i, msgs := range work.fixed {
		if len(msgs.data) == 0 {
			continue
		}
		if res.fixed[i], err = measure(ctx, r.pub, inSubject, watch, meter, msgs, fixedRates[i]); err != nil {
			return res, fmt.Errorf("gate at %.0f msgs/s: %w", fixedRates[i], err)
		}
	}
	if res.counted, err = countedOutcomes(ctx, dbURL); err != nil {
		return res, err
	}
	return res, nil
}

// countedOutcomes sums the gate's hourly counters. Deferred messages count
// as held back, as suppressed ones do.
func countedOutcomes(ctx context.Context, dbURL string) (outcomes, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return outcomes{}, fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.Background())
	var o outcomes
	err = conn.QueryRow(ctx, `SELECT coalesce(sum(forwarded), 0), coalesce(sum(suppressed + deferred), 0), coalesce(sum(dropped), 0) FROM scene_counters`).
		Scan(&o.forward, &o.suppress, &o.drop)
	if err != nil {
		return outcomes{}, fmt.Errorf("read counters: %w", err)
	}
	return o, nil
}
