package faulttest

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/redisstore"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// redisModel has one scene that holds its messages while the window store
// is down (on_store_error: retry, the default) and one that fails open.
var redisModel = model{Scenes: []sceneSpec{
	{Name: "f.hold", Limits: []limit{{"1h", 2}}},
	{Name: "f.open", Limits: []limit{{"1h", 2}}, FailOpen: true},
}}

var redisMix = []string{"f.hold", "f.hold", "f.hold", "f.hold", "f.open", "f.open", "f.open", "f.open", "f.unknown", "f.unknown"}

// startToxiproxy runs a toxiproxy proxy in the test process in front of
// upstream and returns it; proxy.Listen is where clients connect.
func startToxiproxy(t testing.TB, upstream string) *toxiproxy.Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "redis", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy: %v", err)
	}
	t.Cleanup(p.Stop)
	return p
}

// count is how many of msgs are of scene.
func count(msgs []message, scene string) int {
	n := 0
	for _, m := range msgs {
		if m.Scene == scene {
			n++
		}
	}
	return n
}

// outage is what a scenario saw while a dependency was down.
type outage struct {
	s *stack
	g *gateProc
}

// readyzDown checks that /readyz answers, within a bound, that dep is down.
// A hung dependency must not hang the readiness probe.
func (o outage) readyzDown(dep string) {
	o.s.t.Helper()
	t0 := time.Now()
	code, body, err := o.g.get("/readyz")
	took := time.Since(t0)
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(string(body), dep) {
		o.s.t.Errorf("/readyz during the outage: %d %s %v; want 503 naming %s", code, body, err, dep)
	}
	if took > 3*time.Second {
		o.s.t.Errorf("/readyz took %s during the outage; it must answer within its 2s check bound", took)
	}
}

// holds checks that, for a while, GATE_IN keeps at least want messages:
// nothing held back is acked without its effect.
func (o outage) holds(want uint64, d time.Duration) {
	o.s.t.Helper()
	ctx := context.Background()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		n, err := o.s.bus.inFlight(ctx)
		if err == nil && n < want {
			o.s.t.Fatalf("GATE_IN holds %d messages during the outage, want at least %d: a message was acked without its effect", n, want)
		}
	}
}

// TestRedisCutHangAndRestart runs a gate on a Redis behind toxiproxy and,
// with traffic flowing, cuts every connection, then hangs them (answers
// dropped on the floor), then kills redis-server with SIGKILL and restarts
// it (which empties its script cache: NOSCRIPT). Throughout, messages of
// the retry scene wait in GATE_IN, those of the fail-open scene are
// forwarded unchecked and said to be, /readyz answers within its bound,
// and the gate keeps settling (naking) messages instead of waiting on
// Redis. After each fault every message is decided, exactly once; every
// recipient's retry-scene count is exact; and the admissions Redis recorded
// while its answers were lost (read past the proxy) are found by their
// retries: each ends in one forward, none counts against its own message.
func TestRedisCutHangAndRestart(t *testing.T) {
	sc := scaleFor(t, 8000, 400, 0)
	rng := sc.rng()
	rs := startRedis(t)
	proxy := startToxiproxy(t, rs.addr)
	// An AckWait of 30s: were a decision to wait on a dead or hung Redis
	// instead of GATE_STORE_TIMEOUT, nothing would be naked before a batch's
	// deadline (3 × AckWait, 90s), and nothing redelivered meanwhile, since
	// heartbeats keep a slow batch's messages.
	s := newStack(t, stackOptions{RedisURL: "redis://" + proxy.Listen + "/0", Rules: redisModel,
		Env: map[string]string{"GATE_ACK_WAIT": "30s"}})
	g := s.startGate(nil)
	msgs := workload(rng, sc.Messages, sc.Recipients, redisMix, 0)
	waves := make([][]message, 4)
	for i := range waves {
		waves[i] = msgs[i*len(msgs)/4 : (i+1)*len(msgs)/4]
	}
	// Recipients whose messages all arrive during the hang: their first
	// admissions are recorded by a Redis whose answers are lost, so the
	// retries after the hang meet them. Three each, so one is over the
	// limit (2), and a retry that took its own admission for another's
	// would be suppressed. They lead their wave, to meet the connections
	// the gate opened before the hang: a new one would wait on its
	// handshake and send nothing.
	fresh := workload(rng, 90, 30, []string{"f.hold"}, 0)
	waves[2] = slices.Concat(fresh, waves[2])
	msgs = slices.Concat(msgs, fresh)
	windows := newWindowReader(t, rs.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var tm timing
	send := func(wave []message) {
		t.Helper()
		if err := s.bus.publish(ctx, wave, nil); err != nil {
			t.Fatal(err)
		}
	}
	unchecked := func() float64 { return g.metric("gate_unchecked_forwards_total") }
	retries := func() float64 { return g.metric("gate_retries_total") }
	// f.unknown has no rule: its decisions are counted under the shared label.
	unknown := func() float64 {
		return g.metric("gate_decisions_total", `scene="`+metrics.OtherScenes+`"`)
	}

	send(waves[0])
	s.awaitDrained(time.Minute)

	// Cut: every connection closed, new ones refused.
	proxy.Stop()
	o := outage{s: s, g: g}
	openBefore, unknownBefore := unchecked(), unknown()
	send(waves[1])
	held := uint64(count(waves[1], "f.hold"))
	// The fail-open scene is forwarded unchecked, and a scene without a
	// rule, which needs no window, is decided as usual. (The held messages
	// stay in flight: a backlog over GATE_MAX_ACK_PENDING would hold the
	// others behind it. The waves are smaller than that.)
	waitUntil(t, 30*time.Second, "fail-open and unknown scenes decided during the cut", func() bool {
		return unchecked()-openBefore >= float64(count(waves[1], "f.open")) &&
			unknown()-unknownBefore >= float64(count(waves[1], "f.unknown"))
	})
	o.readyzDown("window_store")
	o.holds(held, 2*time.Second)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	tm.add("cut: drained after reconnect in", s.awaitDrained(2*time.Minute))

	// Hang: connections stay open, Redis's answers are dropped. Requests
	// still reach Redis, so some admissions are recorded whose answer the
	// gate never sees: the retry must find them (Duplicate), not count
	// them twice.
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(`{"name":"hang","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`)); err != nil {
		t.Fatal(err)
	}
	o = outage{s: s, g: g}
	openBefore, retriesBefore := unchecked(), retries()
	send(waves[2])
	held = uint64(count(waves[2], "f.hold"))
	// Settling, not waiting: every held message is naked (at least once)
	// and every fail-open one forwarded long before a batch's deadline.
	settled := waitUntil(t, 12*time.Second, "the gate settles messages while Redis hangs", func() bool {
		return retries()-retriesBefore >= float64(held) && unchecked()-openBefore >= float64(count(waves[2], "f.open"))
	})
	o.readyzDown("window_store")
	o.holds(held, time.Second)
	// Read past the proxy: what Redis recorded while its answers were lost.
	var recorded int64
	for _, n := range windows.count(recipients(fresh), "f.hold") {
		recorded += n
	}
	if recorded == 0 {
		t.Error("Redis recorded no admission of the fresh recipients during the hang: the scenario did not exercise a retry meeting its own admission")
	}
	if err := proxy.Toxics.RemoveToxic(context.Background(), "hang"); err != nil {
		t.Fatal(err)
	}
	tm.add("hang: every message settled (naked or forwarded) in", settled)
	tm.add("hang: drained after the hang ended in", s.awaitDrained(2*time.Minute))

	// Crash: SIGKILL redis-server, then start it again on its AOF.
	rs.Kill()
	o = outage{s: s, g: g}
	send(waves[3])
	held = uint64(count(waves[3], "f.hold"))
	waitUntil(t, 30*time.Second, "fail-open scene forwarded unchecked while redis is down", func() bool {
		return unchecked()-openBefore >= float64(count(waves[2], "f.open")+count(waves[3], "f.open"))
	})
	o.readyzDown("window_store")
	o.holds(held, time.Second)
	rs.start()
	t0 := time.Now()
	s.awaitDrained(2 * time.Minute)
	tm.add("kill -9 redis: drained after restart in", time.Since(t0))
	// The restarted server had no scripts: the gate met NOSCRIPT and
	// loaded its script again.
	if n := infoField(t, rs.client(), "errorstats", "errorstat_NOSCRIPT"); !strings.HasPrefix(n, "count=") {
		t.Errorf("the restarted redis-server answered no NOSCRIPT (errorstat_NOSCRIPT %q)", n)
	}
	if n := infoField(t, rs.client(), "memory", "number_of_cached_scripts"); n != "1" {
		t.Errorf("number_of_cached_scripts = %q after recovery, want 1", n)
	}

	r := s.check(msgs, redisModel, g)
	if got := int(unchecked()); got != r.Unchecked {
		t.Errorf("gate_unchecked_forwards_total = %d, want %d (the Gate-Unchecked forwards on GATE_OUT)", got, r.Unchecked)
	}
	if r.Unchecked == 0 || g.metric("gate_store_errors_total", `store="window"`) == 0 {
		t.Error("the outages left no trace in the unchecked-forward or store-error metrics")
	}
	// Every admission Redis holds for the retry scene ended in a forward:
	// a retry that met its own admission (recorded during the cut or the
	// hang, its answer lost) took it for its own, not for another's, and
	// counted it once. (The ledger check holds every recipient's retry
	// scene to its exact count.)
	checked := map[string]int64{}
	for _, o := range s.bus.readHeaders(natsbus.StreamOut) {
		if o.Header.Get(natsbus.HeaderUnchecked) == "" {
			checked[o.Header.Get(jetstream.MsgIDHeader)]++
		}
	}
	forwards := map[string]int64{}
	for _, m := range msgs {
		if m.Scene == "f.hold" {
			forwards[m.To] += checked[m.ID]
		}
	}
	for to, n := range windows.count(recipients(msgs), "f.hold") {
		if n != forwards[to] {
			t.Errorf("%s: Redis holds %d admissions of f.hold, %d were forwarded: an admission recorded during an outage was not found by its retry", to, n, forwards[to])
		}
	}
	t.Logf("admissions of the %d fresh recipients that Redis recorded while its answers were lost: %d", len(fresh)/3, recorded)
	report(t, "redis cut, hang, kill -9", r, tm)
}

// keyNames names the gate's keys in Redis (the default prefix); its client
// is never used.
func keyNames(t testing.TB) *redisstore.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	st, err := redisstore.New(c, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// windowReader reads the gate's windows straight from a redis-server.
type windowReader struct {
	t    testing.TB
	c    *redis.Client
	keys *redisstore.Store
}

func newWindowReader(t testing.TB, addr string) *windowReader {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return &windowReader{t: t, c: c, keys: keyNames(t)}
}

// count returns how many admissions each recipient (a message's To) has in
// scene's window.
func (w *windowReader) count(tos []string, scene string) map[string]int64 {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pipe := w.c.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(tos))
	for i, to := range tos {
		cmds[i] = pipe.ZRangeWithScores(ctx, w.keys.Key(message{To: to}.recipient()), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		w.t.Fatalf("ZRANGE of %d recipients' keys: %v", len(tos), err)
	}
	out := make(map[string]int64, len(tos))
	for i, to := range tos {
		out[to] = int64(redisstore.Entries(cmds[i].Val(), scene))
	}
	return out
}

// recipients lists the distinct recipients (To) of msgs.
func recipients(msgs []message) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range msgs {
		if !seen[m.To] {
			seen[m.To] = true
			out = append(out, m.To)
		}
	}
	return out
}

// infoField reads one field of a section of redis-server's INFO, or "".
func infoField(t testing.TB, c *redis.Client, section, field string) string {
	t.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// TestMaxDeliverParksExhausted sets GATE_MAX_DELIVER=3 and keeps Redis down:
// every message of the retry scene exhausts its deliveries and is parked on
// gate.dead with "max deliveries exhausted", once, and deleted from GATE_IN,
// never silently left behind; messages that need no window still flow.
func TestMaxDeliverParksExhausted(t *testing.T) {
	rs := startRedis(t)
	s := newStack(t, stackOptions{RedisURL: rs.url(), Rules: redisModel,
		Env: map[string]string{"GATE_MAX_DELIVER": "3", "GATE_RETRY_MAX": "500ms"}})
	g := s.startGate(nil)
	rs.Kill()
	sc := scaleFor(t, 500, 50, 0)
	msgs := workload(sc.rng(), sc.Messages, sc.Recipients, []string{"f.hold", "f.unknown"}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	if err := s.bus.publish(ctx, msgs, nil); err != nil {
		t.Fatal(err)
	}
	took := s.awaitDrained(time.Minute)
	held := count(msgs, "f.hold")
	parked := map[string]int{}
	for _, d := range s.bus.read(natsbus.StreamDead) {
		if got := d.Header.Get(natsbus.HeaderError); got != natsbus.ReasonMaxDeliveries {
			t.Errorf("dead letter seq %d: Gate-Error %q, want %q", d.Seq, got, natsbus.ReasonMaxDeliveries)
		}
		if mm := idInJSON.FindSubmatch(d.Data); mm != nil {
			parked[string(mm[1])]++
		}
	}
	forwarded := map[string]bool{}
	for _, o := range s.bus.read(natsbus.StreamOut) {
		forwarded[o.Header.Get(jetstream.MsgIDHeader)] = true
	}
	for _, m := range msgs {
		switch {
		case m.Scene == "f.hold" && (parked[m.ID] != 1 || forwarded[m.ID]):
			t.Errorf("%s (retry scene): parked %d times, forwarded %v; want parked once", m.ID, parked[m.ID], forwarded[m.ID])
		case m.Scene == "f.unknown" && (parked[m.ID] != 0 || !forwarded[m.ID]):
			t.Errorf("%s (no rule): parked %d times, forwarded %v; want forwarded", m.ID, parked[m.ID], forwarded[m.ID])
		}
	}
	if got := int(g.metric("gate_parked_messages_total")); got != held {
		t.Errorf("gate_parked_messages_total = %d, want %d", got, held)
	}
	// The summary counts them, once each, under their scene.
	code, body, err := g.get("/v1/reports/summary")
	if err != nil || code != 200 {
		t.Fatalf("GET /v1/reports/summary: %d %v", code, err)
	}
	var sum httpapi.Summary
	if err := json.Unmarshal(body, &sum); err != nil {
		t.Fatal(err)
	}
	for _, sc := range sum.Scenes {
		want := gate.SceneSummary{Scene: sc.Scene}
		switch sc.Scene {
		case "f.hold":
			want.Received, want.Parked = int64(held), int64(held)
		case "f.unknown":
			want.Received, want.Forwarded = int64(len(msgs)-held), int64(len(msgs)-held)
		}
		if sc != want {
			t.Errorf("summary of %q: %+v, want %+v", sc.Scene, sc, want)
		}
	}
	t.Logf("FAULT max deliveries (3) with redis down: in %d (%d retry scene) | out: parked %d, forwarded %d | all settled %s after the last publish (%s in all)",
		len(msgs), held, len(parked), len(forwarded), took.Round(10*time.Millisecond), time.Since(t0).Round(10*time.Millisecond))
}
