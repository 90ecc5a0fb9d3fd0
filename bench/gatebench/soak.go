package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/pgschema"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The soak (gatebench -soak; make soak) runs the real gate for a long time
// at a fixed open-loop rate on a nats-server process, a redis-server
// process of its own (so that its memory is the soak's) and the shared
// PostgreSQL, and shows whether anything grows: per minute the p50/p99 of
// messages and checks, the RSS of every process, each table's size and
// live rows, and the held rows; then a verdict (soakverdict.go), which
// makes gatebench exit 1 when it fails.
//
// The load: of every ten requests nine are messages on gate.in and one a
// check on gate.check. Messages go to a fixed pool of recipients under
// three scenes with 10-second windows of one message: one deferring (60 %
// of messages), one digesting (15 %) and one suppressing (25 %). Of the
// deferring and digesting scenes' messages, 30 % repeat the (recipient,
// scene) of one of the last few of their scene, an alert firing again,
// which is held behind it: about 30 % of all messages are deferred. The
// pool is sized so that a (recipient, deferring scene) receives half a
// message per window on average, so every held message is released within
// a few windows and the held rows reach a steady state within a minute or
// two. Partitions are 10 minutes wide and the ledger and audit retention
// short (GATE_SOAK_RETENTION), so that the gate drops partitions during
// the run.

// The soak's scenes, and their share of messages.
var soakScenes = []scene{
	{"soak.defer", 60, "limits: [{window: 10s, max: 1}]\n    on_exceed: defer"},
	{"soak.digest", 15, "limits: [{window: 10s, max: 1}]\n    on_exceed: digest"},
	{"soak.suppress", 25, "limits: [{window: 10s, max: 1}]"},
}

// soakRepeatShare is the share of the holding scenes' messages that repeat
// a recent (recipient, scene) of theirs.
const soakRepeatShare = 0.3

// soakCheckScene is the scene the checks ask about.
const soakCheckScene = "soak.check"

func soakRulesDoc() string {
	var b strings.Builder
	b.WriteString("unknown_scene: forward\nscenes:\n")
	for _, s := range soakScenes {
		fmt.Fprintf(&b, "  %s:\n    %s\n", s.name, s.rule)
	}
	fmt.Fprintf(&b, "  %s:\n    limits: [{window: 10s, max: 2}]\n", soakCheckScene)
	return b.String()
}

// soakRecipients is the pool's size at rate requests per second: a
// (recipient, deferring scene) then receives half a message per 10-second
// window.
func soakRecipients(rate float64) int {
	perSecond := 0.9 * rate * float64(soakScenes[0].weight) / 100
	return max(500, int(perSecond*10/0.5))
}

// soakSettings is what the gate runs with in the soak, besides the bench's
// own: 10-minute partitions, short retention, a prune every minute, and a
// GATE_OUT duplicate window at its least.
func soakSettings(retention time.Duration) []string {
	r := retention.String()
	return []string{
		"GATE_PARTITION_WIDTH=10m", "GATE_LEDGER_RETENTION=" + r, "GATE_AUDIT_RETENTION=" + r,
		"GATE_PRUNE_INTERVAL=1m", "GATE_OUT_DUPLICATE_WINDOW=10m",
	}
}

// runSoak runs the soak and prints its table and verdict.
func runSoak(ctx context.Context, c *config, stdout, stderr io.Writer) error {
	minutes := int(c.soakDuration / time.Minute)
	if minutes < 3 || c.soakRate <= 0 {
		return fmt.Errorf("soak: GATE_SOAK_DURATION must be at least 3m (got %v) and GATE_SOAK_RATE above 0 (got %v)", c.soakDuration, c.soakRate)
	}
	r := &runner{cfg: c, log: stderr, tag: fmt.Sprintf("s%x", time.Now().UnixNano()&0xffffff)}
	var err error
	if r.dir, err = os.MkdirTemp("", "gatebench-soak-"); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	if c.keep {
		r.logf("soak: keeping %s", r.dir)
	} else {
		defer os.RemoveAll(r.dir)
	}
	rs, redisURL, err := startRedis(ctx, c.redisBin, r.dir)
	if err != nil {
		return err
	}
	defer func() { _ = rs.stop() }()
	ns, natsURL, err := startNATS(ctx, c.natsBin, r.dir)
	if err != nil {
		return err
	}
	defer func() { _ = ns.stop() }()
	r.natsURL = natsURL
	dbURL, drop, err := pgschema.Create(ctx, c.databaseURL, "gatesoak_"+r.tag)
	if err != nil {
		return err
	}
	defer r.dropSchema(drop)
	// The gate's PostgreSQL backends are those with this application name.
	appName := "gatesoak_" + r.tag
	gateDB, err := withQuery(dbURL, "application_name", appName)
	if err != nil {
		return err
	}
	if r.nc, err = r.connect("gatebench-soak"); err != nil {
		return err
	}
	defer r.nc.Close()
	if err := createSoakOut(ctx, r.nc); err != nil {
		return err
	}
	rulesPath := filepath.Join(r.dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(soakRulesDoc()), 0o600); err != nil {
		return fmt.Errorf("write rules: %w", err)
	}
	g, err := startGate(ctx, c.gateBin, r.dir, gateEnv{
		natsURL: natsURL, redisURL: redisURL, databaseURL: gateDB, rulesPath: rulesPath,
		dataDir: filepath.Join(r.dir, "gate-data"), extra: append(soakSettings(c.soakRetention), c.gateEnv...),
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := g.stop(); err != nil {
			r.logf("%v", err)
		}
	}()
	mon, err := newSoakMonitor(ctx, dbURL, appName, map[string]int{"gate": g.pid(), "nats-server": ns.pid(), "redis-server": rs.pid()})
	if err != nil {
		return err
	}
	defer mon.close()

	recipients := soakRecipients(c.soakRate)
	fmt.Fprintf(stdout, "gatebench -soak: %d minutes at %.0f requests/s (9 in 10 messages on %s, 1 in 10 checks on %s), %d recipients; scenes %s; %s; %s\n",
		minutes, c.soakRate, inSubject, checkSubject, recipients, soakSceneList(), strings.Join(soakSettings(c.soakRetention), " "), machine())
	load, err := newSoakLoad(r.nc, r.tag, recipients)
	if err != nil {
		return err
	}
	defer load.close()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { load.run(loadCtx, c.soakRate) })
	defer func() { stopLoad(); wg.Wait() }()

	var ms []soakMinute
	printSoakHeader(stdout)
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for len(ms) < minutes {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if e := g.exited(); e != nil {
			return e
		}
		m := load.minute()
		if err := mon.sample(ctx, &m); err != nil {
			return err
		}
		ms = append(ms, m)
		printSoakMinute(stdout, len(ms), m, load.failures())
	}
	stopLoad()
	wg.Wait()
	if counts, err := mon.counters(ctx); err == nil {
		fmt.Fprintf(stdout, "outcomes over the run (the gate's counters): %s\n", counts)
	} else {
		r.logf("%v", err)
	}
	checks, ok := soakVerdict(ms)
	verdict := "PASS"
	if !ok {
		verdict = "FAIL"
	}
	w := soakWindowsFor(len(ms))
	fmt.Fprintf(stdout, "verdict (warm-up %d minutes; p99 of minutes %d-%d against %d-%d; RSS from minute %d to %d; sizes: the peak of minutes %d-%d against %d-%d): %s\n%s",
		w.warmup, w.last[0], w.last[1], w.early[0], w.early[1], w.warmup, len(ms), w.trendLater[0], w.trendLater[1], w.trendFirst[0], w.trendFirst[1], verdict, soakVerdictText(checks))
	fmt.Fprintf(stdout, "SOAK verdict=%s minutes=%d rate=%.0f\n", verdict, len(ms), c.soakRate)
	if !ok {
		return errors.New("soak: the verdict fails (see above)")
	}
	return nil
}

func soakSceneList() string {
	parts := make([]string, len(soakScenes))
	for i, s := range soakScenes {
		parts[i] = fmt.Sprintf("%s %d %%", s.name, s.weight)
	}
	return strings.Join(parts, ", ")
}

// createSoakOut makes GATE_OUT before the gate does, as the gate would
// (which then leaves it alone) but keeping forwards 10 minutes instead of
// 72 hours: nothing reads them in the soak, and a stream growing for the
// whole run would be the stream's size, not a leak.
func createSoakOut(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: natsbus.StreamOut, Subjects: []string{natsbus.DefaultOutSubject}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, MaxAge: 10 * time.Minute, Duplicates: 10 * time.Minute,
		Description: "notifications the gate forwarded (gatebench -soak: kept 10 minutes)",
	})
	if err != nil {
		return fmt.Errorf("create %s: %w", natsbus.StreamOut, err)
	}
	return nil
}

// soakLoad publishes messages and asks checks at a fixed rate, open loop,
// and collects each minute's latencies.
type soakLoad struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	sub        *nats.Subscription
	tag        string
	recipients int
	rnd        *rand.Rand
	failed     atomic.Int64 // publishes that failed
	checkErrs  atomic.Int64

	mu          sync.Mutex
	msgLat      []time.Duration
	checkLat    []time.Duration
	checkErrors int
	seqs        map[uint64]struct{} // sequences acked, to count a repeat once
	highest     uint64
	recent      [2]struct { // the last recipients of the deferring and digesting scenes
		pairs []int
		next  int
	}
}

func newSoakLoad(nc *nats.Conn, tag string, recipients int) (*soakLoad, error) {
	l := &soakLoad{nc: nc, tag: tag, recipients: recipients, rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), seqs: map[uint64]struct{}{}}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { l.failed.Add(1) }))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	l.js = js
	// Each message's outcome is its ack on GATE_IN (natsio.go): latency is
	// the ack's time minus the time the stream stored the message.
	sub, err := nc.Subscribe("$JS.ACK.GATE_IN.>", l.onAck)
	if err != nil {
		return nil, fmt.Errorf("subscribe to acks: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("ack subscription limits: %w", err)
	}
	l.sub = sub
	return l, nc.Flush()
}

func (l *soakLoad) close() { _ = l.sub.Unsubscribe() }

func (l *soakLoad) onAck(m *nats.Msg) {
	now := time.Now()
	a, ok := parseAckSubject(m.Subject)
	if !ok || kindOfAck(m.Data) != ackOutcome {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, seen := l.seqs[a.seq]; seen {
		return
	}
	l.seqs[a.seq] = struct{}{}
	l.highest = max(l.highest, a.seq)
	l.msgLat = append(l.msgLat, now.Sub(time.Unix(0, a.stored)))
}

// minute hands over the minute's latencies and forgets sequences long
// acked (a redelivery comes within AckWait, not millions of messages
// later).
func (l *soakLoad) minute() soakMinute {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := soakMinute{msgLat: l.msgLat, checkLat: l.checkLat, checkErrors: l.checkErrors}
	l.msgLat, l.checkLat, l.checkErrors = nil, nil, 0
	if l.highest > 500_000 {
		for s := range l.seqs {
			if s < l.highest-500_000 {
				delete(l.seqs, s)
			}
		}
	}
	return m
}

// failures is the publishes that failed so far.
func (l *soakLoad) failures() int64 { return l.failed.Load() }

// run sends rate requests per second until ctx ends: every tenth a check.
// Each request has a due time; a check's latency runs from it, so a
// stalled gate shows instead of slowing the load.
func (l *soakLoad) run(ctx context.Context, rate float64) {
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	sent := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		due := int(time.Since(start).Seconds() * rate)
		for ; sent < due && ctx.Err() == nil; sent++ {
			at := start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
			if sent%10 == 9 {
				go l.check(ctx, at, sent)
				continue
			}
			e := l.envelope(sent)
			if _, err := l.js.PublishMsgAsync(&nats.Msg{Subject: inSubject, Data: e.json()}, jetstream.WithStallWait(10*time.Second)); err != nil {
				l.failed.Add(1)
			}
		}
	}
}

func (l *soakLoad) envelope(i int) envelope {
	l.mu.Lock()
	defer l.mu.Unlock()
	x, rcpt := l.rnd.IntN(100), l.rnd.IntN(l.recipients)
	sc := len(soakScenes) - 1
	for j, s := range soakScenes {
		if x < s.weight {
			sc = j
			break
		}
		x -= s.weight
	}
	if sc < 2 { // deferring and digesting: some repeat a recent pair of theirs
		ring := &l.recent[sc]
		if len(ring.pairs) > 0 && l.rnd.Float64() < soakRepeatShare {
			rcpt = ring.pairs[l.rnd.IntN(len(ring.pairs))]
		} else if len(ring.pairs) < 16 {
			ring.pairs = append(ring.pairs, rcpt)
		} else {
			ring.pairs[ring.next] = rcpt
			ring.next = (ring.next + 1) % len(ring.pairs)
		}
	}
	return envelope{id: fmt.Sprintf("%s-%d", l.tag, i), scene: soakScenes[sc].name, receiveID: fmt.Sprintf("ou_%s_%d", l.tag, rcpt), priority: "normal"}
}

func (l *soakLoad) check(ctx context.Context, due time.Time, i int) {
	l.mu.Lock()
	rcpt := l.rnd.IntN(l.recipients)
	l.mu.Unlock()
	body := fmt.Sprintf(`{"id":"%s-c%d","scene":%q,"receive_id_type":"open_id","receive_id":"ou_%s_%d"}`, l.tag, i, soakCheckScene, l.tag, rcpt)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := l.nc.RequestWithContext(ctx, checkSubject, []byte(body))
	if err == nil {
		_, err = admittedIn(m.Data)
	}
	done := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
			l.checkErrors++
		}
		return
	}
	l.checkLat = append(l.checkLat, done.Sub(due))
}

// startRedis runs a redis-server of the soak's own on a free port, without
// persistence, so that its memory and CPU are the soak's alone.
func startRedis(ctx context.Context, bin, dir string) (*proc, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	p, err := start("redis-server", filepath.Join(dir, "redis-server.log"), os.Environ(), bin,
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return nil, "", err
	}
	u := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	c, err := newRedis(u)
	if err != nil {
		_ = p.stop()
		return nil, "", err
	}
	defer c.Close()
	for deadline := time.Now().Add(15 * time.Second); ; {
		if err = c.Ping(ctx).Err(); err == nil {
			return p, u, nil
		}
		if e := p.exited(); e != nil {
			return nil, "", e
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = p.stop()
			return nil, "", fmt.Errorf("redis-server on %s not ready: %w", u, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
