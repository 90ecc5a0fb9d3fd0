package faulttest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/gateproc"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// stack is one deployment under test: a nats-server process (or a cluster
// of them), a window store and an audit database, and any number of gate
// processes sharing them.
type stack struct {
	t     testing.TB
	nats  *natsServer       // nil on a cluster (stackOptions.NATSURL)
	env   map[string]string // the GATE_* settings every gate gets
	rules string            // path of the rules file
	bus   *busClient
	gates []*gateProc
}

// stackOptions say what a stack runs on. RedisURL is required.
type stackOptions struct {
	RedisURL    string
	DatabaseURL string // empty: a fresh schema in the shared test database
	Rules       model
	Env         map[string]string // more GATE_* settings, for every gate
	// NATSURL is the NATS the stack runs on (a cluster's list of servers);
	// empty: a nats-server process of the stack's own (stack.nats).
	NATSURL string
}

func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	needServices(t)
	if o.DatabaseURL == "" {
		o.DatabaseURL = testenv.PostgresSchemaURL(t)
	}
	gateproc.Gate(t)
	s := &stack{t: t, rules: filepath.Join(t.TempDir(), "rules.yaml")}
	if o.NATSURL == "" {
		s.nats = startNATS(t)
		o.NATSURL = s.nats.url()
	}
	if err := os.WriteFile(s.rules, []byte(o.Rules.yaml()), 0o600); err != nil {
		t.Fatal(err)
	}
	s.env = map[string]string{
		"GATE_NATS_URL":     o.NATSURL,
		"GATE_REDIS_URL":    o.RedisURL,
		"GATE_DATABASE_URL": o.DatabaseURL,
		"GATE_RULES":        s.rules,
		"GATE_LOG_LEVEL":    "info",
		// A killed gate's messages come back after the default
		// GATE_ACK_WAIT (5s), the recovery the scenarios measure; retries
		// are short so outages end quickly.
		"GATE_RETRY_MAX":        "1s",
		"GATE_SHUTDOWN_TIMEOUT": "5s",
	}
	for k, v := range o.Env {
		s.env[k] = v
	}
	s.bus = newBusClient(t, o.NATSURL)
	return s
}

// gateProc is one `gate serve` process.
type gateProc struct {
	*proc
	base string // http://127.0.0.1:port
}

// startGate starts one more gate process, with extra settings over the
// stack's, and waits until it is ready.
func (s *stack) startGate(extra map[string]string) *gateProc {
	s.t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(s.t))
	vars := map[string]string{"GATE_HTTP_ADDR": addr, "GATE_DATA_DIR": s.t.TempDir()}
	for k, v := range s.env {
		vars[k] = v
	}
	for k, v := range extra {
		vars[k] = v
	}
	g := &gateProc{base: "http://" + addr,
		proc: newProc(s.t, fmt.Sprintf("gate-%d", len(s.gates)+1), gateproc.Gate(s.t), []string{"serve"}, gateproc.Env(vars))}
	s.gates = append(s.gates, g)
	g.start()
	return g
}

// start runs the gate and waits until /readyz answers 200; it returns how
// long that took.
func (g *gateProc) start() time.Duration {
	g.t.Helper()
	t0 := time.Now()
	g.Start()
	g.waitReady(60 * time.Second)
	return time.Since(t0)
}

// waitReady waits until /readyz answers 200.
func (g *gateProc) waitReady(d time.Duration) {
	g.t.Helper()
	gateproc.WaitReady(g.t, g.Proc, g.base, d)
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// get calls the gate's HTTP API.
func (g *gateProc) get(path string) (int, []byte, error) {
	resp, err := httpClient.Get(g.base + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// getJSON calls the API and decodes a 200 answer.
func (g *gateProc) getJSON(path string, q url.Values, out any) {
	g.t.Helper()
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	code, body, err := g.get(path)
	if err != nil || code != http.StatusOK {
		g.t.Fatalf("GET %s: %d %v %s", path, code, err, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		g.t.Fatalf("GET %s: decode: %v", path, err)
	}
}

// metric sums the samples of a Prometheus metric whose labels include
// every label given ("name=\"value\"").
func (g *gateProc) metric(name string, labels ...string) float64 {
	g.t.Helper()
	resp, err := httpClient.Get(g.base + "/metrics")
	if err != nil {
		g.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// alive checks that the gate still runs and answers /healthz.
func (g *gateProc) alive() bool {
	code, _, err := g.get("/healthz")
	return !g.Exited() && err == nil && code == http.StatusOK
}

// awaitDrained waits until GATE_IN is empty and nothing is pending on the
// consumer, and returns how long that took.
func (s *stack) awaitDrained(d time.Duration) time.Duration {
	s.t.Helper()
	return waitUntil(s.t, d, "GATE_IN drained", s.drained)
}

// drained reports whether GATE_IN is empty.
func (s *stack) drained() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := s.bus.inFlight(ctx)
	return err == nil && n == 0
}

// timing collects the durations a scenario reports.
type timing []string

func (tm *timing) add(what string, d time.Duration) {
	*tm = append(*tm, fmt.Sprintf("%s %s", what, d.Round(10*time.Millisecond)))
}

func (tm timing) String() string { return strings.Join(tm, ", ") }

// report logs a scenario's counts and recovery times in one line, the
// line the issue asks for.
func report(t testing.TB, scenario string, r ledgerReport, tm timing) {
	t.Helper()
	t.Logf("FAULT %s: in %d (valid %d, invalid %d) | out: forwarded %d (unchecked %d), suppressed %d, dropped %d, dead %d | recovery: %s",
		scenario, r.In, r.In-r.Invalid, r.Invalid, r.Forwarded, r.Unchecked, r.Suppressed, r.Dropped, r.Dead, tm)
}
