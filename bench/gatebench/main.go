package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/procstat"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gatebench:", err)
		os.Exit(1)
	}
}

// config is what a benchmark run needs; every setting is a flag with an
// environment variable as its default.
type config struct {
	n, runs, recipients, seedN, memPairs int
	fixedN                               int // messages per fixed-rate phase (fixedRates); 0: none
	batch, workers, maxAckPending        int
	secondRate                           float64
	redisURL, databaseURL                string
	gateBin, natsBin                     string
	gateEnv                              []string
	keep                                 bool
	headers                              bool   // publish with the header fast path's headers
	check                                bool   // measure the check API instead (check.go)
	envoyBin                             string // -envoy-bin: envoy's ratelimit, the check benchmark's peer (envoy.go)
	forward                              bool   // measure nats-server's cost of the forward instead (forward.go)
	gates                                bool   // only the two gates at full speed: suppressing, then deferring
	profile                              string // where the first run's gate writes a CPU profile (profile.go)
	moreGateEnv                          string // -gate-env: more KEY=VALUE settings of the gate alone

	soak          bool          // run the soak instead (soak.go)
	soakDuration  time.Duration // GATE_SOAK_DURATION
	soakRate      float64       // GATE_SOAK_RATE: requests per second, a tenth of them checks
	soakRetention time.Duration // GATE_SOAK_RETENTION: the gate's ledger and audit retention in the soak
	redisBin      string        // the soak's own redis-server

	scale           bool    // measure 1, 2 and 3 gates on a NATS cluster instead (scale.go)
	scaleRate       float64 // -scale-rate: the publishing rate of the scale measure; 0: full speed
	redisClusterURL string  // GATE_TEST_REDIS_CLUSTER_URL
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("gatebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	envInt := func(key string, def int) int {
		n, err := strconv.Atoi(env(key, strconv.Itoa(def)))
		if err != nil {
			return def
		}
		return n
	}
	envFloat := func(key string, def float64) float64 {
		f, err := strconv.ParseFloat(env(key, ""), 64)
		if err != nil {
			return def
		}
		return f
	}
	c := &config{}
	fs.IntVar(&c.n, "n", envInt("GATE_BENCH_N", 200_000), "messages at full speed (GATE_BENCH_N); half as many follow at half the rate")
	fs.IntVar(&c.runs, "runs", envInt("GATE_BENCH_RUNS", 3), "runs; the summary gives each figure's median (GATE_BENCH_RUNS)")
	fs.IntVar(&c.recipients, "recipients", envInt("GATE_BENCH_RECIPIENTS", 0), "distinct recipients; 0 means n/2, at most 100,000, which holds back about 30 % (GATE_BENCH_RECIPIENTS)")
	fs.IntVar(&c.fixedN, "fixed-n", envInt("GATE_BENCH_FIXED_N", 10_000), "messages per run at each fixed open-loop rate, 1,000 and 4,000 msgs/s, after the half-rate phase; 0 skips them (GATE_BENCH_FIXED_N)")
	fs.IntVar(&c.seedN, "seed-n", envInt("GATE_BENCH_SEED_N", 10_000), "messages for the seed baseline (GATE_BENCH_SEED_N)")
	fs.IntVar(&c.memPairs, "mem-pairs", envInt("GATE_BENCH_MEM_PAIRS", 100_000), "(recipient, scene) pairs for the memory figure (GATE_BENCH_MEM_PAIRS)")
	fs.IntVar(&c.batch, "batch", envInt("GATE_BATCH", defaultBatch), "the gate's batch size (GATE_BATCH), also used by the ceilings")
	fs.IntVar(&c.maxAckPending, "max-ack-pending", envInt("GATE_MAX_ACK_PENDING", 1000), "the consumers' MaxAckPending (GATE_MAX_ACK_PENDING)")
	fs.IntVar(&c.workers, "workers", envInt("GATE_BENCH_WORKERS", 4), "goroutines driving the Redis and audit ceilings (GATE_BENCH_WORKERS)")
	fs.StringVar(&c.redisURL, "redis-url", env("GATE_BENCH_REDIS_URL", env("GATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")), "Redis (shared: only the run's own keys are touched)")
	fs.StringVar(&c.databaseURL, "database-url", env("GATE_BENCH_DATABASE_URL", env("GATE_TEST_DATABASE_URL", "")), "PostgreSQL; each run uses fresh schemas")
	fs.StringVar(&c.gateBin, "gate-bin", env("GATE_BENCH_GATE_BIN", "bin/gate"), "the gate binary")
	fs.StringVar(&c.natsBin, "nats-bin", env("GATE_BENCH_NATS_BIN", "bin/nats-server"), "the nats-server binary, run as a process of its own")
	fs.Float64Var(&c.secondRate, "second-rate", envFloat("GATE_BENCH_SECOND_RATE", 0), "the rate of the second phase, in messages per second; 0 means half the rate of the first (GATE_BENCH_SECOND_RATE). A fixed rate compares two gates at equal load")
	fs.BoolVar(&c.headers, "headers", getenv("GATE_BENCH_HEADERS") == "1", "publish each envelope with the headers Nats-Msg-Id, Gate-Scene, Gate-Recipient, Gate-Priority, so the gate decides without decoding the body; by default bodies go alone, as the contract's producers send them (GATE_BENCH_HEADERS=1)")
	fs.BoolVar(&c.keep, "keep", getenv("GATE_BENCH_KEEP") != "", "keep each run's folder: the logs of the gate and nats-server, and the stream store (GATE_BENCH_KEEP)")
	fs.StringVar(&c.profile, "profile", env("GATE_BENCH_PROFILE", ""), "write CPU profiles of the first run's gate at full speed, one per second, to FILE.1, FILE.2, ...: go tool pprof -top bin/gate FILE.* (GATE_BENCH_PROFILE)")
	fs.StringVar(&c.moreGateEnv, "gate-env", env("GATE_BENCH_GATE_ENV", ""), "more settings of the gate process alone, comma-separated KEY=VALUE (GOGC=200,GATE_BATCH=128), to compare two settings run after run (GATE_BENCH_GATE_ENV)")
	fs.BoolVar(&c.forward, "forward", false, "measure nats-server's CPU per forwarded message instead: GATE_OUT's writes with and without de-duplication, PubAcks and atomic batches, and the duplicate window's memory (needs only -nats-bin)")
	fs.BoolVar(&c.gates, "gates", getenv("GATE_BENCH_GATES") == "1", "run only the two gates at full speed, suppressing then deferring (no half rate, ceilings, seed or memory), to compare the deferring row of two gate binaries quickly; the other figures read 0 (GATE_BENCH_GATES=1)")
	fs.BoolVar(&c.check, "check", false, "measure the latency and CPU of POST /v1/check and gate.check instead, at 1,000 checks/s and at the highest rate sustained, beside envoy's ratelimit when -envoy-bin is given; -runs rounds, the sides in turn (make bench-check)")
	fs.StringVar(&c.envoyBin, "envoy-bin", env("GATE_BENCH_ENVOY_BIN", ""), "envoyproxy/ratelimit's server binary, measured beside the gate by -check (make bench-check builds it from bench/envoyrl); empty: the gate alone (GATE_BENCH_ENVOY_BIN)")
	envDuration := func(key string, def time.Duration) time.Duration {
		d, err := time.ParseDuration(env(key, ""))
		if err != nil {
			return def
		}
		return d
	}
	fs.BoolVar(&c.soak, "soak", false, "run the soak instead (make soak): the gate at a fixed rate for GATE_SOAK_DURATION, per-minute latency, RSS and table sizes, and a verdict")
	fs.DurationVar(&c.soakDuration, "soak-duration", envDuration("GATE_SOAK_DURATION", 30*time.Minute), "how long the soak runs, in whole minutes (GATE_SOAK_DURATION); the verdict's windows scale with it")
	fs.Float64Var(&c.soakRate, "soak-rate", envFloat("GATE_SOAK_RATE", 1000), "the soak's requests per second, one in ten a check (GATE_SOAK_RATE)")
	fs.DurationVar(&c.soakRetention, "soak-retention", envDuration("GATE_SOAK_RETENTION", 10*time.Minute), "the gate's GATE_LEDGER_RETENTION and GATE_AUDIT_RETENTION in the soak (GATE_SOAK_RETENTION); with 10-minute partitions, 10m drops the first one at about minute 20")
	fs.StringVar(&c.redisBin, "redis-bin", env("GATE_BENCH_REDIS_BIN", "redis-server"), "the redis-server binary the soak runs a server of its own with (GATE_BENCH_REDIS_BIN)")
	fs.BoolVar(&c.scale, "scale", false, "measure the gate's CPU per message with 1, 2 and 3 gates on a three-node JetStream cluster (GATE_STREAM_REPLICAS=3) and the Redis Cluster instead (docs/scaling.md); -n messages per measure, -runs rounds")
	fs.Float64Var(&c.scaleRate, "scale-rate", envFloat("GATE_BENCH_SCALE_RATE", 0), "the scale measure's publishing rate in msgs/s; 0 is full speed (GATE_BENCH_SCALE_RATE)")
	fs.StringVar(&c.redisClusterURL, "redis-cluster-url", env("GATE_BENCH_REDIS_CLUSTER_URL", env("GATE_TEST_REDIS_CLUSTER_URL", "")), "the Redis Cluster of the scale measure (GATE_TEST_REDIS_CLUSTER_URL, as scripts/redis-cluster.sh prints it)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.recipients == 0 {
		c.recipients = min(max(c.n/2, 1), 100_000)
	}
	var problems []string
	if c.databaseURL == "" && !c.forward {
		problems = append(problems, "set GATE_BENCH_DATABASE_URL or GATE_TEST_DATABASE_URL (make bench does)")
	}
	if c.n < 1000 || c.runs < 1 || c.recipients < 1 || c.seedN < 1 || c.fixedN < 0 || c.memPairs < 1 || c.batch < 1 || c.workers < 1 {
		problems = append(problems, "n must be at least 1000, and runs, recipients, seed-n, mem-pairs, batch and workers at least 1")
	}
	for _, bin := range []string{c.gateBin, c.natsBin} {
		if _, err := os.Stat(bin); err != nil && (bin == c.natsBin || !c.forward) {
			problems = append(problems, fmt.Sprintf("%s: %v (make bench builds it)", bin, err))
		}
	}
	// The gate under test gets the same batch and in-flight bound.
	c.gateEnv = []string{"GATE_BATCH=" + strconv.Itoa(c.batch), "GATE_MAX_ACK_PENDING=" + strconv.Itoa(c.maxAckPending)}
	for kv := range strings.SplitSeq(c.moreGateEnv, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			problems = append(problems, fmt.Sprintf("-gate-env: want KEY=VALUE, got %q", kv))
			continue
		}
		c.gateEnv = append(c.gateEnv, kv)
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return c, nil
}

// mode says how the envelopes are published.
func (c *config) mode() string {
	m := "headers off (bodies alone: the gate decodes each body)"
	if c.headers {
		m = "headers on (Nats-Msg-Id, Gate-Scene, Gate-Recipient, Gate-Priority: the gate's header fast path)"
	}
	if c.secondRate > 0 {
		m += fmt.Sprintf("; the \"half rate\" phase runs at a fixed %.0f msgs/s", c.secondRate)
	}
	return m
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if c.check {
		return runCheckBench(ctx, c, stdout, stderr)
	}
	if c.soak {
		return runSoak(ctx, c, stdout, stderr)
	}
	if c.scale {
		return runScale(ctx, c, stdout, stderr)
	}
	if c.forward {
		return runForwardBench(ctx, c, stdout, stderr)
	}
	rdb, err := newRedis(c.redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	redisPID, err := redisInt(ctx, rdb, "server", "process_id")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "gatebench: %d runs of %d messages (%d bytes) to %d recipients; batch %d; %s; %s\n",
		c.runs, c.n, msgSize, c.recipients, c.batch, c.mode(), machine())
	var results []runResult
	for i := range c.runs {
		prof, err := newProfiler(c.profile, i)
		if err != nil {
			return err
		}
		r := &runner{cfg: c, redis: rdb, redisPID: int(redisPID), log: stderr, prof: prof}
		res, err := r.run(ctx)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		results = append(results, res)
		printRun(stdout, i+1, res)
	}
	fs := make([]figures, len(results))
	for i, r := range results {
		fs[i] = r.figures()
	}
	printSummary(stdout, c, fs)
	// The figures stand only on runs that decided every message as the
	// simulation says, and handed none back.
	return verdict(fs)
}

// runner is one run: its tag, its services and the figures it collects.
type runner struct {
	cfg      *config
	tag      string // in every key, schema and recipient of the run
	seed     uint64
	dir      string
	redis    *redis.Client
	redisPID int
	natsPID  int
	natsURL  string
	nc       *nats.Conn // the publisher's and the ack watcher's
	pub      *publisher
	log      io.Writer
	prof     *profiler // nil: no profile this run
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.log, "gatebench: "+format+"\n", args...)
}

// dropSchema drops a run's schema, and says so when it cannot.
func (r *runner) dropSchema(drop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := drop(ctx); err != nil {
		r.logf("%v", err)
	}
}

func (r *runner) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(r.natsURL, nats.Name(name))
	if err != nil {
		return nil, fmt.Errorf("connect to nats: %w", err)
	}
	return nc, nil
}

// meter reads the CPU of the run's processes; gatePID is 0 when no gate
// runs.
func (r *runner) meter(gatePID int) *cpuMeter {
	self := os.Getpid()
	m := &cpuMeter{cpu: map[string]func() time.Duration{
		"nats":     func() time.Duration { return procstat.CPU(r.natsPID) },
		"redis":    func() time.Duration { return procstat.CPU(r.redisPID) },
		"postgres": func() time.Duration { return procstat.CPUNamed("postgres") },
		"bench":    func() time.Duration { return procstat.CPU(self) },
	}}
	if gatePID != 0 {
		m.cpu["gate"] = func() time.Duration { return procstat.CPU(gatePID) }
	}
	return m
}

// runResult is everything one run measured.
type runResult struct {
	tag      string
	gate     gateResult
	deferred gateResult // the gate again, its suppressing scenes deferring; full speed only
	ceil     ceilings
	seed     seedResult
	memory   memoryResult
	duration time.Duration
}

func (r *runner) run(ctx context.Context) (res runResult, err error) {
	began := time.Now()
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	r.seed = binary.LittleEndian.Uint64(raw[:])
	r.tag = hex.EncodeToString(raw[:4])
	res.tag = r.tag
	if r.dir, err = os.MkdirTemp("", "gatebench-"+r.tag+"-"); err != nil {
		return res, fmt.Errorf("temp dir: %w", err)
	}
	if r.cfg.keep {
		r.logf("run %s: keeping %s", r.tag, r.dir)
	} else {
		defer os.RemoveAll(r.dir)
	}
	ns, natsURL, err := startNATS(ctx, r.cfg.natsBin, r.dir)
	if err != nil {
		return res, err
	}
	defer func() {
		if err := ns.stop(); err != nil {
			r.logf("%v", err)
		}
	}()
	r.natsPID, r.natsURL = ns.pid(), natsURL
	if r.nc, err = r.connect("gatebench"); err != nil {
		return res, err
	}
	defer r.nc.Close()
	if r.pub, err = newPublisher(r.nc, r.cfg.headers); err != nil {
		return res, err
	}
	defer func() {
		pattern := "gate:{open_id:ou_" + r.tag + "*"
		if _, err := deleteKeys(context.Background(), r.redis, pattern); err != nil {
			r.logf("delete the gate's keys: %v", err)
		}
	}()

	rs, err := benchRules()
	if err != nil {
		return res, err
	}
	w := newWorkload(r.seed, r.tag, r.cfg.recipients)
	work := gateWork{warm: w.batchOf(max(min(r.cfg.n/20, 5000), 1)), full: w.batchOf(r.cfg.n), half: w.batchOf(max(r.cfg.n/2, 1))}
	if r.cfg.fixedN > 0 {
		for i := range work.fixed {
			work.fixed[i] = w.batchOf(r.cfg.fixedN)
		}
	}

	deferN := r.cfg.n + len(work.half.data)
	if r.cfg.gates {
		work.half, work.fixed = messages{}, [len(work.fixed)]messages{}
	}
	r.logf("run %s: the gate", r.tag)
	if res.gate, err = r.runGate(ctx, rs, work); err != nil {
		return res, err
	}
	// The same messages under other recipients (their keys are new, and the
	// tag's prefix still matches them for the clean-up), the scenes that
	// suppress deferring instead.
	r.logf("run %s: the gate, deferring", r.tag)
	// All of the stream goes at full speed: its later part repeats more
	// (recipients have a third message), which brings what is deferred to
	// the ~30 % the other gate holds back over the whole run.
	wd := newWorkload(r.seed, r.tag+"d", r.cfg.recipients)
	deferWork := gateWork{warm: wd.batchOf(len(work.warm.data)), deferred: true}
	deferWork.full = wd.batchOf(deferN)
	if res.deferred, err = r.runGate(ctx, rs, deferWork); err != nil {
		return res, fmt.Errorf("deferring gate: %w", err)
	}
	if r.cfg.gates {
		res.duration = time.Since(began)
		return res, nil
	}
	r.logf("run %s: ceilings", r.tag)
	if res.ceil.jetstream, err = r.jetstreamCeiling(ctx, work.full); err != nil {
		return res, fmt.Errorf("jetstream ceiling: %w", err)
	}
	reqs, recs, err := ceilingInput(rs, work.full.data)
	if err != nil {
		return res, err
	}
	if res.ceil.redis, err = r.redisCeiling(ctx, reqs); err != nil {
		return res, fmt.Errorf("redis ceiling: %w", err)
	}
	if res.ceil.audit, err = r.auditCeiling(ctx, recs); err != nil {
		return res, fmt.Errorf("audit ceiling: %w", err)
	}
	r.logf("run %s: seed baseline", r.tag)
	seedData := work.full.data[:min(r.cfg.seedN, len(work.full.data))]
	if res.seed, err = r.seedBaseline(ctx, rs, seedData); err != nil {
		return res, fmt.Errorf("seed baseline: %w", err)
	}
	r.logf("run %s: redis memory", r.tag)
	if res.memory, err = r.redisMemory(ctx); err != nil {
		return res, fmt.Errorf("redis memory: %w", err)
	}
	res.duration = time.Since(began)
	return res, nil
}

// ceilingInput turns a run's messages into what the Redis and audit
// ceilings replay: the gate's admit requests, and the records it commits.
func ceilingInput(rs *gate.RuleSet, data [][]byte) ([]gate.AdmitRequest, []gate.Record, error) {
	var reqs []gate.AdmitRequest
	for _, d := range data {
		m, err := gate.ParseMessage(d, "", 0)
		if err != nil {
			return nil, nil, fmt.Errorf("generated message does not parse: %w", err)
		}
		if p := gate.PlanMessage(rs, m, time.Now()); p.Request != nil {
			reqs = append(reqs, *p.Request)
		}
	}
	recs, err := newSimulator(rs).decide(data, true)
	return reqs, recs, err
}

// machine describes the host in one line.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	var mem string
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if f := strings.Fields(line); len(f) >= 2 {
			if kb, err := strconv.Atoi(f[1]); err == nil {
				mem = fmt.Sprintf(", %d GiB RAM", (kb+(1<<19))>>20)
			}
		}
	}
	return fmt.Sprintf("%d cores (%s)%s", numCPU(), model, mem)
}

func numCPU() int { return runtime.NumCPU() }
