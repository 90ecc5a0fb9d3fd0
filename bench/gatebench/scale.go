package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/testing/pgschema"
	"github.com/antifatigue/gate/internal/testing/procstat"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// The scale-out measure (gatebench -scale; docs/scaling.md): the gate's
// CPU per message with 1, 2 and 3 gate processes on one consumer, against
// a three-node JetStream cluster (three nats-server processes, the gate's
// streams at GATE_STREAM_REPLICAS=3) and the Redis Cluster of the tests
// (GATE_TEST_REDIS_CLUSTER_URL, three masters). The machine's cores are
// shared by all of it, so the figure is CPU per message per process, not
// throughput: what a gate spends should stay flat as gates are added, and
// what the services spend should not grow with the number of gates.

// scaleGates are the numbers of gates measured, in order.
var scaleGates = []int{1, 2, 3}

// scaleRound is one measure of k gates.
type scaleRound struct {
	gates    int
	replicas int // GATE_IN's replicas as the gates left it
	phase    phase
	perGate  []time.Duration // each gate's CPU per message
	counted  outcomes
}

// runScale measures 1, 2 and 3 gates, c.runs rounds each, interleaved.
func runScale(ctx context.Context, c *config, stdout, stderr io.Writer) error {
	if c.redisClusterURL == "" {
		return errors.New("scale: set GATE_TEST_REDIS_CLUSTER_URL (scripts/redis-cluster.sh prints it; make test starts it)")
	}
	r := &runner{cfg: c, log: stderr, tag: fmt.Sprintf("k%x", time.Now().UnixNano()&0xffffff)}
	var err error
	if r.dir, err = os.MkdirTemp("", "gatebench-scale-"); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	if c.keep {
		r.logf("scale: keeping %s", r.dir)
	} else {
		defer os.RemoveAll(r.dir)
	}
	cl, err := startNATSCluster(ctx, c.natsBin, r.dir, 3)
	if err != nil {
		return err
	}
	defer cl.stop()
	rc, redisPIDs, err := redisClusterPIDs(ctx, c.redisClusterURL)
	if err != nil {
		return err
	}
	defer rc.Close()
	defer func() {
		if err := deleteClusterKeys(context.Background(), rc, "gate:{open_id:ou_"+r.tag+"*"); err != nil {
			r.logf("delete the gates' keys: %v", err)
		}
	}()
	fmt.Fprintf(stdout, "gatebench -scale: 1, 2 and 3 gates on one consumer, %d rounds of %d messages each; a 3-node JetStream cluster (GATE_STREAM_REPLICAS=3), the Redis Cluster (%d masters); GATE_MAX_ACK_PENDING=%d; %s\n",
		c.runs, c.n, len(redisPIDs), c.maxAckPending, machine())
	var rounds []scaleRound
	for round := range c.runs {
		for _, k := range scaleGates {
			r.logf("scale: round %d, %d gates", round+1, k)
			res, err := r.scaleRound(ctx, cl, redisPIDs, k, round)
			if err != nil {
				return fmt.Errorf("%d gates: %w", k, err)
			}
			rounds = append(rounds, res)
			printScaleRound(stdout, round+1, res)
		}
	}
	printScaleSummary(stdout, c, rounds)
	return nil
}

// scaleRound starts k gates on a fresh schema and fresh streams, warms
// them up, then publishes c.n messages and measures every process.
func (r *runner) scaleRound(ctx context.Context, cl *natsCluster, redisPIDs []int, k, round int) (scaleRound, error) {
	res := scaleRound{gates: k}
	tag := fmt.Sprintf("%s%d%d", r.tag, round, k)
	nc, err := nats.Connect(strings.Join(cl.urls, ","), nats.Name("gatebench-scale"))
	if err != nil {
		return res, fmt.Errorf("connect to the cluster: %w", err)
	}
	defer nc.Close()
	// Fresh streams each round: what the gates make, they make anew.
	js, err := jetstream.New(nc)
	if err != nil {
		return res, err
	}
	for _, s := range []string{"GATE_IN", "GATE_OUT", "GATE_DEAD", "GATE_REFUND"} {
		if err := js.DeleteStream(ctx, s); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return res, fmt.Errorf("delete stream %s: %w", s, err)
		}
	}
	dbURL, drop, err := pgschema.Create(ctx, r.cfg.databaseURL, "gatescale_"+tag)
	if err != nil {
		return res, err
	}
	defer r.dropSchema(drop)
	// The gates' PostgreSQL backends are those with this application name:
	// the server is shared, and other users' backends come and go.
	appName := "gatescale_" + tag
	gateDB, err := withQuery(dbURL, "application_name", appName)
	if err != nil {
		return res, err
	}
	mon, err := newSoakMonitor(ctx, dbURL, appName, nil)
	if err != nil {
		return res, err
	}
	defer mon.close()
	rulesPath := filepath.Join(r.dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rulesDoc(false)), 0o600); err != nil {
		return res, fmt.Errorf("write rules: %w", err)
	}
	var gates []*proc
	defer func() {
		for _, g := range gates {
			if err := g.stop(); err != nil {
				r.logf("%v", err)
			}
		}
	}()
	for i := range k {
		// Each gate is given the whole list, starting with a node of its own.
		urls := append(slices.Clone(cl.urls[i%len(cl.urls):]), cl.urls[:i%len(cl.urls)]...)
		g, err := startGate(ctx, r.cfg.gateBin, filepath.Join(r.dir), gateEnv{
			natsURL: strings.Join(urls, ","), redisURL: r.cfg.redisClusterURL, databaseURL: gateDB, rulesPath: rulesPath,
			dataDir: filepath.Join(r.dir, fmt.Sprintf("gate-%d", i)),
			extra:   append([]string{"GATE_REDIS_CLUSTER=true", "GATE_STREAM_REPLICAS=3"}, r.cfg.gateEnv...),
		})
		if err != nil {
			return res, fmt.Errorf("gate %d: %w", i+1, err)
		}
		gates = append(gates, g)
	}
	if info, err := js.Stream(ctx, "GATE_IN"); err == nil {
		res.replicas = info.CachedInfo().Config.Replicas
	}
	pub, err := newPublisher(nc, r.cfg.headers)
	if err != nil {
		return res, err
	}
	watch, err := watchAcks(nc, "GATE_IN", "gate")
	if err != nil {
		return res, err
	}
	defer watch.close()
	meter := &cpuMeter{cpu: map[string]func() time.Duration{
		"nats":     func() time.Duration { return sumCPU(cl.pids()) },
		"redis":    func() time.Duration { return sumCPU(redisPIDs) },
		"postgres": func() time.Duration { return sumCPU(mon.backends(ctx)) },
		"bench":    func() time.Duration { return procstat.CPU(os.Getpid()) },
	}}
	for i, g := range gates {
		pid := g.pid()
		meter.cpu["gate"+strconv.Itoa(i+1)] = func() time.Duration { return procstat.CPU(pid) }
	}
	w := newWorkload(uint64(time.Now().UnixNano()), tag, min(max(r.cfg.n/2, 1), 100_000))
	if _, err := measure(ctx, pub, inSubject, watch, meter, w.batchOf(max(min(r.cfg.n/20, 5000), 1)), 0); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	if res.phase, err = measure(ctx, pub, inSubject, watch, meter, w.batchOf(r.cfg.n), r.cfg.scaleRate); err != nil {
		return res, err
	}
	for i := range gates {
		res.perGate = append(res.perGate, res.phase.perMsg("gate"+strconv.Itoa(i+1)))
	}
	if res.counted, err = countedOutcomes(ctx, dbURL); err != nil {
		return res, err
	}
	return res, nil
}

// gateCPU is the CPU per message of every gate together.
func (s scaleRound) gateCPU() time.Duration {
	var t time.Duration
	for _, d := range s.perGate {
		t += d
	}
	return t
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func printScaleRound(w io.Writer, round int, s scaleRound) {
	per := make([]string, len(s.perGate))
	for i, d := range s.perGate {
		per[i] = fmt.Sprintf("%.1f", us(d))
	}
	fmt.Fprintf(w, "round %d, %d gates (GATE_IN R%d): %.0f msgs/s, p99 %.0f ms; CPU µs/msg: gates %.1f (each %s), nats %.1f (3 servers), redis %.1f (masters), postgres %.1f, bench %.1f, other %.1f; decided %d, naks %d\n",
		round, s.gates, s.replicas, s.phase.rate, ms(s.phase.p99), us(s.gateCPU()), strings.Join(per, " / "),
		us(s.phase.perMsg("nats")), us(s.phase.perMsg("redis")), us(s.phase.perMsg("postgres")), us(s.phase.perMsg("bench")), us(s.phase.perMsg("other")),
		s.counted.total(), s.phase.naks)
}

// printScaleSummary gives each number of gates' medians over the rounds.
func printScaleSummary(w io.Writer, c *config, rounds []scaleRound) {
	fmt.Fprintf(w, "\nmedians of %d rounds (CPU µs per message; the gates' CPU is all gates together):\n", c.runs)
	fmt.Fprintf(w, "%6s %9s %10s %8s %8s %9s %7s\n", "gates", "msgs/s", "gates CPU", "nats", "redis", "postgres", "p99 ms")
	line := []string{"BENCH_SCALE"}
	for _, k := range scaleGates {
		var of []scaleRound
		for _, s := range rounds {
			if s.gates == k {
				of = append(of, s)
			}
		}
		med := func(pick func(scaleRound) float64) float64 {
			v := make([]float64, len(of))
			for i, s := range of {
				v[i] = pick(s)
			}
			return medianOf(v)
		}
		gateUS := med(func(s scaleRound) float64 { return us(s.gateCPU()) })
		fmt.Fprintf(w, "%6d %9.0f %10.1f %8.1f %8.1f %9.1f %7.0f\n", k,
			med(func(s scaleRound) float64 { return s.phase.rate }), gateUS,
			med(func(s scaleRound) float64 { return us(s.phase.perMsg("nats")) }),
			med(func(s scaleRound) float64 { return us(s.phase.perMsg("redis")) }),
			med(func(s scaleRound) float64 { return us(s.phase.perMsg("postgres")) }),
			med(func(s scaleRound) float64 { return ms(s.phase.p99) }))
		line = append(line, fmt.Sprintf("gate_cpu_us_%d=%.1f", k, gateUS))
	}
	line = append(line, fmt.Sprintf("max_ack_pending=%d n=%d runs=%d", c.maxAckPending, c.n, c.runs))
	fmt.Fprintln(w, strings.Join(line, " "))
}

func sumCPU(pids []int) time.Duration {
	var t time.Duration
	for _, p := range pids {
		t += procstat.CPU(p)
	}
	return t
}

// redisClusterPIDs connects to the Redis Cluster and returns the process
// ids of its masters, whose CPU the scale measure reads.
func redisClusterPIDs(ctx context.Context, rawURL string) (*redis.ClusterClient, []int, error) {
	o, err := redis.ParseClusterURL(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("redis cluster url: %w", err)
	}
	o.ContextTimeoutEnabled = true
	rc := redis.NewClusterClient(o)
	var pids []int
	err = rc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		pid, err := redisInt(ctx, c, "server", "process_id")
		if err != nil {
			return err
		}
		pids = append(pids, int(pid))
		return nil
	})
	if err != nil {
		rc.Close()
		return nil, nil, fmt.Errorf("redis cluster: %w", err)
	}
	slices.Sort(pids)
	return rc, slices.Compact(pids), nil
}

// deleteClusterKeys unlinks the keys matching pattern on every master,
// one key per command (keys of several slots may not share one).
func deleteClusterKeys(ctx context.Context, rc *redis.ClusterClient, pattern string) error {
	return rc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 5000).Iterator()
		pipe := c.Pipeline()
		for iter.Next(ctx) {
			pipe.Unlink(ctx, iter.Val())
			if pipe.Len() == 1000 {
				if _, err := pipe.Exec(ctx); err != nil {
					return fmt.Errorf("unlink: %w", err)
				}
			}
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("scan %s: %w", pattern, err)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("unlink: %w", err)
		}
		return nil
	})
}
