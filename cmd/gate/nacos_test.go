// nacos-sdk-go v2.3.5 has data races of its own (a package-wide client map
// written by CloseClient while another client reads it; a reconnect racing
// its connection-event notifier), which the race detector reports from any
// test that restarts Nacos. These tests therefore build without -race, and
// make test runs them in a second, race-free pass. The gate's own share of
// the concurrency (rules.Live's ordering) is race-tested in internal/rules.

//go:build !race

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/rules"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// nacosServer is a real Nacos server reached through its v1 HTTP config
// API, the way a person edits a config.
type nacosServer struct {
	t    testing.TB
	addr string // host:port (HTTP; gRPC is +1000)
	cmd  *exec.Cmd
	dir  string
	port int
	// started is set once the server has run: a restart keeps its data.
	started bool
	logMark int // length of rnacos.log before the current launch
}

// sharedNacos is the Nacos server make test started.
func sharedNacos(t testing.TB) *nacosServer {
	return &nacosServer{t: t, addr: testenv.NacosAddr(t)}
}

// ownNacos starts an r-nacos of the test's own, so the test can stop and
// restart it.
func ownNacos(t testing.TB) *nacosServer {
	t.Helper()
	testenv.NacosAddr(t) // the same requirement: make test provides both
	bin := os.Getenv("GATE_TEST_RNACOS_BIN")
	if bin == "" {
		if testenv.Required() {
			t.Fatal("GATE_TEST_RNACOS_BIN is not set: make test (scripts/nacos.sh) provides the r-nacos binary")
		}
		t.Skip("GATE_TEST_RNACOS_BIN not set")
	}
	n := &nacosServer{t: t, dir: t.TempDir(), port: freePortPair(t)}
	n.addr = fmt.Sprintf("127.0.0.1:%d", n.port)
	n.start()
	t.Cleanup(n.stop)
	return n
}

// freePortPair finds a port p with p+1000 free too (r-nacos's gRPC port).
func freePortPair(t testing.TB) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if p+1000 > 65535 {
			continue
		}
		if ln2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1000)); err == nil {
			ln2.Close()
			return p
		}
	}
	t.Fatal("no free port pair for r-nacos")
	return 0
}

// start runs r-nacos and waits until it serves configs. r-nacos 0.8.8 at
// times panics in its raft apply thread when written to right after start
// (it then answers "true" to a publish but never stores it), so start checks
// with a canary config and starts it again when the canary is not stored.
func (n *nacosServer) start() {
	n.t.Helper()
	fresh := n.cmd == nil && !n.started
	n.started = true
	for attempt := 1; ; attempt++ {
		n.launch()
		if n.canary() {
			return
		}
		n.stop()
		if fresh {
			// A first start that failed left a half-made raft store behind.
			_ = os.RemoveAll(filepath.Join(n.dir, "data"))
		}
		if attempt == 8 {
			b, _ := os.ReadFile(filepath.Join(n.dir, "rnacos.log"))
			n.t.Fatalf("r-nacos on %s does not store configs after 8 starts; log:\n%s", n.addr, b)
		}
		n.t.Logf("r-nacos on %s did not store the canary (start %d); starting it again", n.addr, attempt)
	}
}

// canary publishes a config and reports whether it can be read back.
func (n *nacosServer) canary() bool {
	want := time.Now().Format(time.RFC3339Nano)
	form := url.Values{"dataId": {"gate-canary"}, "group": {"GATE"}, "content": {want}}
	resp, err := http.PostForm("http://"+n.addr+"/nacos/v1/cs/configs", form)
	if err != nil {
		return false
	}
	resp.Body.Close()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n.get("gate-canary") == want {
			return true
		}
		if b, _ := os.ReadFile(filepath.Join(n.dir, "rnacos.log")); strings.Contains(string(b[n.logMark:]), "panicked") {
			return false
		}
	}
	return false
}

func (n *nacosServer) launch() {
	n.t.Helper()
	cmd := exec.Command(os.Getenv("GATE_TEST_RNACOS_BIN"))
	cmd.Dir = n.dir // r-nacos reads .env from its working directory: an empty one
	cmd.Env = append(os.Environ(),
		"RNACOS_HTTP_PORT="+strconv.Itoa(n.port), "RNACOS_GRPC_PORT="+strconv.Itoa(n.port+1000),
		"RNACOS_HTTP_CONSOLE_PORT=0", "RNACOS_SDK_HOST=127.0.0.1", "RNACOS_CONSOLE_HOST=127.0.0.1",
		"RNACOS_RAFT_NODE_ADDR=127.0.0.1:"+strconv.Itoa(n.port+1000),
		"RNACOS_DATA_DIR="+filepath.Join(n.dir, "data"), "RNACOS_ENABLE_OPEN_API_AUTH=false", "RUST_LOG=warn")
	if fi, err := os.Stat(filepath.Join(n.dir, "rnacos.log")); err == nil {
		n.logMark = int(fi.Size())
	}
	logf, err := os.OpenFile(filepath.Join(n.dir, "rnacos.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		n.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("start r-nacos: %v", err)
	}
	n.cmd = cmd
	waitFor(n.t, 30*time.Second, n.ready)
}

func (n *nacosServer) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}

func (n *nacosServer) ready() bool {
	resp, err := http.Get("http://" + n.addr + "/nacos/v1/console/health/readiness")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// publish stores a config as a person would: POST /nacos/v1/cs/configs.
func (n *nacosServer) publish(dataID, content string) {
	n.t.Helper()
	form := url.Values{"dataId": {dataID}, "group": {"GATE"}, "type": {"yaml"}, "content": {content}}
	resp, err := http.PostForm("http://"+n.addr+"/nacos/v1/cs/configs", form)
	if err != nil {
		n.t.Fatalf("nacos publish: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "true" {
		n.t.Fatalf("nacos publish %s: %s %s", dataID, resp.Status, body)
	}
	// A server that has just started may answer "true" before the config
	// is readable; wait until it is, as a person would see it in the console.
	deadline := time.Now().Add(10 * time.Second)
	for got := n.get(dataID); got != content; got = n.get(dataID) {
		if time.Now().After(deadline) {
			logs := ""
			if n.dir != "" {
				b, _ := os.ReadFile(filepath.Join(n.dir, "rnacos.log"))
				logs = string(b)
			}
			n.t.Fatalf("nacos at %s still serves %q for %s 10s after publishing it\nr-nacos log:\n%s", n.addr, got, dataID, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get reads a config through the v1 HTTP API ("" when missing).
func (n *nacosServer) get(dataID string) string {
	resp, err := http.Get("http://" + n.addr + "/nacos/v1/cs/configs?" + url.Values{"dataId": {dataID}, "group": {"GATE"}}.Encode())
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(body)
}

func (n *nacosServer) remove(dataID string) {
	n.t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, "http://"+n.addr+"/nacos/v1/cs/configs?"+url.Values{"dataId": {dataID}, "group": {"GATE"}}.Encode(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatalf("nacos delete: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		n.t.Fatalf("nacos delete %s: %s", dataID, resp.Status)
	}
}

const nacosRulesA = `
unknown_scene: forward
scenes:
  n.alert:
    limits: [{window: 1m, max: 1}]
    on_exceed: suppress
`

func nacosRulesWithMax(max int) string {
	return strings.Replace(nacosRulesA, "max: 1}", fmt.Sprintf("max: %d}", max), 1)
}

func versionOfDoc(t testing.TB, doc string) string {
	t.Helper()
	rs, err := rules.Parse("test", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return rs.Version
}

func (g *gateProc) rulesStatus() gate.RuleStatus {
	g.t.Helper()
	var st gate.RuleStatus
	g.api("/v1/rules", nil, &st)
	return st
}

func nacosEnv(t testing.TB, n *nacosServer, dataID string) *env {
	e := newEnv(t, stackEmbedded, "")
	delete(e.vars, "GATE_RULES") // Nacos is the source; no fallback unless a test sets one
	e.vars["GATE_NACOS_ADDR"] = n.addr
	e.vars["GATE_NACOS_DATA_ID"] = dataID
	e.vars["GATE_NACOS_RESYNC"] = "2s"
	return e
}

// TestNacosRules drives the Nacos rule source against a real Nacos server.
func TestNacosRules(t *testing.T) {
	n := sharedNacos(t)
	dataID := testenv.Unique("gate-rules") + ".yaml"
	n.publish(dataID, nacosRulesA)
	e := nacosEnv(t, n, dataID)
	g := e.start(nil)
	c := e.client()

	st := g.rulesStatus()
	if st.Version != versionOfDoc(t, nacosRulesA) || st.Source != "nacos:GATE/"+dataID {
		t.Fatalf("rules at start: version %s source %s, want the Nacos document", st.Version, st.Source)
	}

	t.Run("a published change takes effect without a restart", func(t *testing.T) {
		to := testenv.Unique("reload")
		c.send(msg{ID: to + "-1", Scene: "n.alert", To: to}, msg{ID: to + "-2", Scene: "n.alert", To: to})
		n.publish(dataID, nacosRulesWithMax(3))
		want := versionOfDoc(t, nacosRulesWithMax(3))
		waitFor(t, 10*time.Second, func() bool { return g.rulesStatus().Version == want })
		c.send(msg{ID: to + "-3", Scene: "n.alert", To: to})
		got, hdrs := c.forwarded(to)
		if len(got) != 2 || got[1] != to+"-3" {
			t.Fatalf("forwarded %v, want -1 and -3 (max raised to 3)", got)
		}
		if v := hdrs[1].Get(natsbus.HeaderRulesVersion); v != want {
			t.Errorf("Gate-Rules-Version = %q, want %q", v, want)
		}
		if rows := g.suppressions(recipientQuery(to)); len(rows) != 1 || rows[0].RulesVersion != versionOfDoc(t, nacosRulesA) {
			t.Errorf("audit rows = %+v, want -2 decided under the first version", rows)
		}
	})

	bad := []struct{ name, doc string }{
		{"an invalid document", "scenes:\n  n.alert:\n    limits: [{window: -1h, max: 1}]\n"},
		{"a document that is not YAML", "scenes: [unclosed"},
		{"an empty document", "# every rule was deleted by mistake\n"},
	}
	for _, b := range bad {
		t.Run(b.name+" is rejected and the last good rules stay", func(t *testing.T) {
			before := g.rulesStatus()
			errsBefore := g.metric("gate_rules_reload_errors_total")
			n.publish(dataID, b.doc)
			waitFor(t, 10*time.Second, func() bool { return g.metric("gate_rules_reload_errors_total") > errsBefore })
			after := g.rulesStatus()
			if after.Version != before.Version || after.LastError == "" {
				t.Errorf("after %s: version %s (was %s), last error %q", b.name, after.Version, before.Version, after.LastError)
			}
			// Fix it again for the next case.
			n.publish(dataID, nacosRulesWithMax(3))
			waitFor(t, 10*time.Second, func() bool { return g.rulesStatus().LastError == "" })
		})
	}

	t.Run("a deleted document is rejected and the last good rules stay", func(t *testing.T) {
		before := g.rulesStatus()
		errsBefore := g.metric("gate_rules_reload_errors_total")
		n.remove(dataID)
		waitFor(t, 10*time.Second, func() bool { return g.metric("gate_rules_reload_errors_total") > errsBefore })
		if after := g.rulesStatus(); after.Version != before.Version || after.LastError == "" {
			t.Errorf("after delete: version %s (was %s), last error %q", after.Version, before.Version, after.LastError)
		}
		n.publish(dataID, nacosRulesWithMax(3))
	})

	t.Run("two quick edits leave the newest in force", func(t *testing.T) {
		for i := 4; i <= 9; i++ {
			n.publish(dataID, nacosRulesWithMax(i))
		}
		want := versionOfDoc(t, nacosRulesWithMax(9))
		waitFor(t, 10*time.Second, func() bool { return g.rulesStatus().Version == want })
		time.Sleep(2500 * time.Millisecond) // past a resync: nothing older comes back
		if got := g.rulesStatus().Version; got != want {
			t.Errorf("version %s after quick edits, want the newest %s", got, want)
		}
	})

	t.Run("gate rules diff and push", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "new.yaml")
		if err := os.WriteFile(file, []byte(nacosRulesWithMax(5)), 0o600); err != nil {
			t.Fatal(err)
		}
		getenv := func(k string) string {
			return map[string]string{"GATE_NACOS_ADDR": n.addr, "GATE_NACOS_DATA_ID": dataID, "GATE_DATA_DIR": t.TempDir()}[k]
		}
		var out, errOut strings.Builder
		if err := run(t.Context(), []string{"rules", "diff", file}, getenv, nil, &out, &errOut); err != nil {
			t.Fatalf("rules diff: %v %s", err, errOut.String())
		}
		if !strings.Contains(out.String(), "-       - {window: 1m, max: 9}") || !strings.Contains(out.String(), "+       - {window: 1m, max: 5}") {
			t.Errorf("diff output:\n%s", out.String())
		}
		broken := filepath.Join(t.TempDir(), "broken.yaml")
		_ = os.WriteFile(broken, []byte("scenes: {x: {limits: []}}"), 0o600)
		if err := run(t.Context(), []string{"rules", "push", broken}, getenv, nil, &out, &errOut); err == nil {
			t.Error("pushing a broken document succeeded")
		}
		out.Reset()
		if err := run(t.Context(), []string{"rules", "push", "--yes", file}, getenv, nil, &out, &errOut); err != nil {
			t.Fatalf("rules push: %v %s", err, errOut.String())
		}
		want := versionOfDoc(t, nacosRulesWithMax(5))
		waitFor(t, 10*time.Second, func() bool { return g.rulesStatus().Version == want })
	})
}

// TestNacosOutages: Nacos down at start (with and without a snapshot or a
// fallback), and a server restart while the gate runs.
func TestNacosOutages(t *testing.T) {
	n := ownNacos(t)
	dataID := testenv.Unique("gate-rules") + ".yaml"

	t.Run("down at start without a snapshot or fallback: refuse to start", func(t *testing.T) {
		down := &nacosServer{t: t, addr: fmt.Sprintf("127.0.0.1:%d", freePortPair(t))}
		e := nacosEnv(t, down, dataID)
		var errOut lockedBuffer
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		err := run(ctx, []string{"serve"}, func(k string) string { return e.vars[k] }, nil, io.Discard, &errOut)
		if err == nil || !strings.Contains(err.Error(), "GATE_RULES") {
			t.Fatalf("serve with Nacos down and no snapshot: %v, want a refusal naming the GATE_RULES fallback", err)
		}
	})

	t.Run("down at start with a fallback document", func(t *testing.T) {
		down := &nacosServer{t: t, addr: fmt.Sprintf("127.0.0.1:%d", freePortPair(t))}
		e := nacosEnv(t, down, dataID)
		e.vars["GATE_RULES"] = e.rules
		e.writeRules(nacosRulesWithMax(2))
		g := e.startUnready(nil) // /readyz says the rule source is down, as it is
		if st := g.rulesStatus(); st.Version != versionOfDoc(t, nacosRulesWithMax(2)) {
			t.Errorf("version %s, want the fallback's", st.Version)
		}
		if !strings.Contains(g.log.String(), "fallback") {
			t.Error("the log does not say the fallback document is in use")
		}
	})

	n.publish(dataID, nacosRulesA)
	e := nacosEnv(t, n, dataID)
	g := e.start(nil)
	c := e.client()

	t.Run("a server restart: keep deciding, then pick up what changed meanwhile", func(t *testing.T) {
		n.stop()
		to := testenv.Unique("restart")
		c.send(msg{ID: to + "-1", Scene: "n.alert", To: to}, msg{ID: to + "-2", Scene: "n.alert", To: to})
		if got, _ := c.forwarded(to); len(got) != 1 {
			t.Errorf("with Nacos down the gate forwarded %v, want 1 under the rules in force", got)
		}
		n.start()
		n.publish(dataID, nacosRulesWithMax(4))
		want := versionOfDoc(t, nacosRulesWithMax(4))
		waitFor(t, 20*time.Second, func() bool { return g.rulesStatus().Version == want })
	})

	t.Run("down at start with a snapshot: start from it and say so", func(t *testing.T) {
		if err := g.shutdown(); err != nil {
			t.Fatal(err)
		}
		n.stop()
		g2 := e.startUnready(nil)
		if st := g2.rulesStatus(); st.Version != versionOfDoc(t, nacosRulesWithMax(4)) {
			t.Errorf("version %s, want the snapshot's %s", st.Version, versionOfDoc(t, nacosRulesWithMax(4)))
		}
		if !strings.Contains(g2.log.String(), "snapshot") {
			t.Error("the log does not say the rules come from the snapshot")
		}
		n.start()
	})
}

// BenchmarkNacosReload measures the delay from a publish through Nacos's
// HTTP config API to the gate having the new rules in force (the next batch
// is decided under them). It reports the median and p99 over b.N publishes:
//
//	make bench-nacos   (go test -run '^$' -bench NacosReload -benchtime 100x ./cmd/gate)
func BenchmarkNacosReload(b *testing.B) {
	n := sharedNacos(b)
	dataID := testenv.Unique("gate-rules-bench") + ".yaml"
	n.publish(dataID, nacosRulesA)
	e := nacosEnv(b, n, dataID)
	e.vars["GATE_LOG_LEVEL"] = "warn"
	e.vars["GATE_NACOS_RESYNC"] = "1h" // measure the push path alone
	g := e.start(nil)
	// The SDK registers its listener on its first 5-second cycle; until then
	// the gate re-reads every second. A change in that phase is reported
	// apart; the figures are for a gate past it.
	first := nacosReloadDelays(b, n, g, dataID, 100, 1)[0]
	time.Sleep(7 * time.Second)
	b.ResetTimer()
	delays := nacosReloadDelays(b, n, g, dataID, 200, b.N)
	b.StopTimer()
	b.ReportMetric(float64(delays[len(delays)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(delays[min(len(delays)-1, len(delays)*99/100)].Microseconds())/1000, "p99_ms")
	b.ReportMetric(float64(delays[len(delays)-1].Microseconds())/1000, "max_ms")
	b.ReportMetric(float64(first.Microseconds())/1000, "first_after_start_ms")
}

// nacosReloadDelays publishes count changes (max from, from+1, …), one every half second (an
// operator's pace; the SDK allows 5 queries a second per document and each
// change costs two), and returns the delay of each, from the publish request
// to the gate reporting the new version in force, sorted.
func nacosReloadDelays(t testing.TB, n *nacosServer, g *gateProc, dataID string, from, count int) []time.Duration {
	var out []time.Duration
	for i := 0; i < count; i++ {
		if i > 0 {
			time.Sleep(time.Until(time.Now().Truncate(500 * time.Millisecond).Add(500 * time.Millisecond)))
		}
		doc := nacosRulesWithMax(from + i)
		want := versionOfDoc(t, doc)
		start := time.Now()
		n.publish(dataID, doc)
		waitForFast(t, 10*time.Second, func() bool { return g.rulesStatus().Version == want })
		out = append(out, time.Since(start))
		if os.Getenv("GATE_BENCH_VERBOSE") != "" {
			t.Logf("change %d applied after %s", i, out[len(out)-1])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func waitForFast(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
