package main

import (
	"bufio"
	"bytes"
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
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stack names the backends a gate under test runs on.
type stack string

const (
	stackReal     stack = "redis+postgres" // real Redis, real PostgreSQL, a nats-server
	stackEmbedded stack = "embedded"       // the zero-install default
)

// env is the environment of one or more gate processes that share their
// services.
type env struct {
	t       testing.TB
	vars    map[string]string
	natsURL string
	// natsAuth are the client's credentials on natsURL (none on an open
	// server).
	natsAuth []nats.Option
	rules    string // path of the rules file
}

// harnessNATSPassword is the password of the user gate on the embedded
// servers of the tests' gates.
const harnessNATSPassword = "harness-nats-password"

// harnessSenderPassword is the password of the user sender on the embedded
// NATS server the harness starts.
const harnessSenderPassword = "harness-sender-password"

// newEnv prepares services for kind: a nats-server in process, and for the
// real stack a fresh Postgres schema and the shared test Redis.
func newEnv(t testing.TB, kind stack, rules string) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, vars: map[string]string{
		"GATE_DATA_DIR":   filepath.Join(dir, "data"),
		"GATE_RULES":      filepath.Join(dir, "rules.yaml"),
		"GATE_RULES_POLL": "100ms",
		"GATE_LOG_LEVEL":  "debug",
		// Short retries keep tests quick when a dependency hiccups.
		"GATE_RETRY_MAX": "1s",
	}}
	e.rules = e.vars["GATE_RULES"]
	e.writeRules(rules)
	switch kind {
	case stackReal:
		ns := startNATS(t)
		e.natsURL = ns.ClientURL()
		e.vars["GATE_NATS_URL"] = e.natsURL
		e.vars["GATE_REDIS_URL"] = testenv.RedisURL(t)
		e.vars["GATE_DATABASE_URL"] = testenv.PostgresSchemaURL(t)
	case stackEmbedded:
		addr := freeAddr(t)
		e.vars["GATE_EMBEDDED_NATS_ADDR"] = addr
		e.vars["GATE_EMBEDDED_NATS_PASSWORD"] = harnessNATSPassword
		e.vars["GATE_EMBEDDED_NATS_SENDER_PASSWORD"] = harnessSenderPassword
		e.natsURL = "nats://" + addr
		// The tests' client reads gate.out and gate.dead and refunds: it is
		// the gate user, who may do anything.
		// Not with the gate's own inbox prefix, which gate.check never
		// answers on: the client asks checks too.
		e.natsAuth = []nats.Option{nats.UserInfo(natsbus.EmbeddedGateUser, harnessNATSPassword)}
	}
	return e
}

func (e *env) writeRules(doc string) {
	e.t.Helper()
	tmp := e.rules + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, e.rules); err != nil {
		e.t.Fatal(err)
	}
}

// startNATS runs a nats-server with JetStream in the test process on a
// free port, as an operator's own server (GATE_NATS_URL) that lets any
// client do anything.
func startNATS(t testing.TB) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns
}

func freeAddr(t testing.TB) string { return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) }

// lockedBuffer collects a gate's log for the test's failure output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// gateProc is one gate serving in the test process through run().
type gateProc struct {
	t    testing.TB
	base string // http://127.0.0.1:port
	log  *lockedBuffer
	stop context.CancelFunc
	done chan error
	env  *env
	vars map[string]string
}

// start runs `gate serve` with e's environment plus extra, and waits until
// /readyz answers 200.
func (e *env) start(extra map[string]string) *gateProc { return e.startUntil(extra, "/readyz") }

// startUnready is start for a gate that runs with a dependency down: it
// waits for /healthz only.
func (e *env) startUnready(extra map[string]string) *gateProc { return e.startUntil(extra, "/healthz") }

func (e *env) startUntil(extra map[string]string, probe string) *gateProc {
	t := e.t
	t.Helper()
	vars := e.settings(extra)
	ctx, cancel := context.WithCancel(context.Background())
	g := &gateProc{t: t, base: "http://" + vars["GATE_HTTP_ADDR"], log: &lockedBuffer{}, stop: cancel, done: make(chan error, 1), env: e, vars: vars}
	go func() {
		g.done <- run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, nil, io.Discard, g.log)
	}()
	t.Cleanup(func() {
		g.shutdown()
		if t.Failed() {
			t.Logf("gate log:\n%s", g.log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(g.base + probe)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g
			}
		}
		select {
		case err := <-g.done:
			g.stop = nil
			t.Fatalf("gate exited before ready: %v\n%s", err, g.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate not answering %s after 20s\n%s", probe, g.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settings are the variables of one more gate: e's, a free HTTP address,
// and extra over them.
func (e *env) settings(extra map[string]string) map[string]string {
	vars := map[string]string{"GATE_HTTP_ADDR": freeAddr(e.t)}
	for k, v := range e.vars {
		vars[k] = v
	}
	for k, v := range extra {
		vars[k] = v
	}
	return vars
}

// shutdown stops the gate like SIGTERM would and returns run's error.
func (g *gateProc) shutdown() error {
	if g.stop == nil {
		return nil
	}
	g.stop()
	g.stop = nil
	select {
	case err := <-g.done:
		return err
	case <-time.After(15 * time.Second):
		g.t.Errorf("gate did not stop within 15s")
		return nil
	}
}

// client is a producer and downstream reader on the gate's NATS.
type client struct {
	t  testing.TB
	nc *nats.Conn
	js jetstream.JetStream
}

func (e *env) client() *client {
	e.t.Helper()
	nc, err := nats.Connect(e.natsURL, e.natsAuth...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	return &client{t: e.t, nc: nc, js: js}
}

// msg is an envelope under test.
type msg struct {
	ID, Scene, To, Priority string
}

func (m msg) json() []byte {
	env := map[string]any{
		"id": m.ID, "scene": m.Scene, "receive_id_type": "open_id", "receive_id": m.To,
		"msg_type": "text", "content": `{"text":"hello"}`,
	}
	if m.Priority != "" {
		env["priority"] = m.Priority
	}
	b, _ := json.Marshal(env)
	return b
}

// publish sends raw bytes to gate.in and waits until the gate has settled
// every message (GATE_IN is a work queue: it empties once all are acked or
// terminated).
func (c *client) publish(data ...[]byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, d := range data {
		if _, err := c.js.Publish(ctx, "gate.in", d); err != nil {
			c.t.Fatalf("publish: %v", err)
		}
	}
	c.waitIdle()
}

func (c *client) send(ms ...msg) {
	c.t.Helper()
	data := make([][]byte, len(ms))
	for i, m := range ms {
		data[i] = m.json()
	}
	c.publish(data...)
}

func (c *client) waitIdle() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		s, err := c.js.Stream(ctx, "GATE_IN")
		if err == nil && s.CachedInfo().State.Msgs == 0 {
			return
		}
		if ctx.Err() != nil {
			c.t.Fatalf("GATE_IN not drained within 20s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stored returns every message on a stream, in order.
func (c *client) stored(stream string) []*jetstream.RawStreamMsg {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		c.t.Fatalf("stream %s: %v", stream, err)
	}
	st := s.CachedInfo().State
	var out []*jetstream.RawStreamMsg
	for seq := st.FirstSeq; seq <= st.LastSeq && st.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, m)
	}
	return out
}

// forwarded returns the ids forwarded to gate.out for recipient to, in
// order, with their headers.
func (c *client) forwarded(to string) (ids []string, hdrs []nats.Header) {
	c.t.Helper()
	for _, m := range c.stored("GATE_OUT") {
		var env struct {
			ID        string `json:"id"`
			ReceiveID string `json:"receive_id"`
		}
		if err := json.Unmarshal(m.Data, &env); err != nil {
			c.t.Fatalf("gate.out carries non-JSON: %v", err)
		}
		if env.ReceiveID == to {
			ids = append(ids, env.ID)
			hdrs = append(hdrs, m.Header)
		}
	}
	return ids, hdrs
}

// api calls the gate's HTTP API and decodes a 200 answer into out.
func (g *gateProc) api(path string, q url.Values, out any) {
	g.t.Helper()
	code, body := g.get(path, q, g.vars["GATE_API_TOKEN"])
	if code != http.StatusOK {
		g.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, out); err != nil {
		g.t.Fatalf("GET %s: decode: %v", path, err)
	}
}

func (g *gateProc) get(path string, q url.Values, token string) (int, []byte) {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.base+path+"?"+q.Encode(), nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

func (g *gateProc) suppressions(q url.Values) []gate.Suppression {
	g.t.Helper()
	var page gate.SuppressionPage
	g.api("/v1/suppressions", q, &page)
	return page.Items
}

func (g *gateProc) summary() map[string]gate.SceneSummary {
	g.t.Helper()
	var s httpapi.Summary
	g.api("/v1/reports/summary", nil, &s)
	out := map[string]gate.SceneSummary{}
	for _, sc := range s.Scenes {
		out[sc.Scene] = sc
	}
	return out
}

func recipientQuery(to string) url.Values { return url.Values{"recipient": {"open_id:" + to}} }

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i+1)
	}
	return out
}

// metric reads the gate's /metrics: the sum of the samples of name, or
// the one sample of a series when name carries its labels in full.
func (g *gateProc) metric(name string) float64 {
	g.t.Helper()
	resp, err := http.Get(g.base + "/metrics")
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			total += v
		}
	}
	return total
}
