package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats-server/v2/server"
)

// TestHTTPServerLimits checks that gate serve's server has every timeout
// set, and that the write limit leaves room for the slowest JSON answer
// (/readyz waits up to 2 s for its checks).
func TestHTTPServerLimits(t *testing.T) {
	srv := newHTTPServer(http.NotFoundHandler(), defaultHTTPLimits, slog.New(slog.DiscardHandler))
	got := map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	}
	want := map[string]time.Duration{
		"ReadHeaderTimeout": 5 * time.Second, "ReadTimeout": 10 * time.Second,
		"WriteTimeout": time.Minute, "IdleTimeout": 30 * time.Second,
	}
	for name, d := range want {
		if got[name] != d {
			t.Errorf("%s: got %s, want %s", name, got[name], d)
		}
	}
	if srv.ReadHeaderTimeout > srv.ReadTimeout || srv.WriteTimeout < 10*time.Second {
		t.Errorf("limits out of order: header %s, read %s, write %s", srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout)
	}
	if srv.ErrorLog == nil {
		t.Error("the server's own errors go to the standard logger, not the gate's")
	}
}

// TestIdleConnectionClosed checks that the server closes a kept-alive
// connection that sends nothing more: a thousand of them once stayed open
// for minutes. The test waits for the close itself, for far longer than
// the idle limit, so a slow machine only makes it wait longer.
func TestIdleConnectionClosed(t *testing.T) {
	limits := defaultHTTPLimits
	limits.idle = 200 * time.Millisecond
	limits.read = time.Hour // IdleTimeout falls back to it: only idle may close the connection here
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), limits, slog.New(slog.DiscardHandler))
	srv.Start()
	defer srv.Close()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Close {
		t.Fatal("the server closed the connection after the answer; the test needs it kept alive")
	}
	// Now idle: the next read ends when the server closes its side.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("an idle connection was still open after 30s (idle limit %s)", limits.idle)
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("reading an idle connection: got %v, want io.EOF as the server closes it", err)
	}
}

func TestAllowedHostsSetting(t *testing.T) {
	tests := []struct {
		env, flag string
		want      []string
		wantErr   string
	}{
		{"", "", nil, ""},
		{"gate.example.com", "", []string{"gate.example.com"}, ""},
		{" gate.example.com , 10.0.0.5,[fd00::1], fd00::2,", "", []string{"gate.example.com", "10.0.0.5", "[fd00::1]", "fd00::2"}, ""},
		{"*", "", []string{"*"}, ""},
		{"gate.example.com", "other.example.com", []string{"other.example.com"}, ""}, // the flag wins
		{"gate.example.com:8080", "", nil, "without scheme, port or path"},
		{"https://gate.example.com", "", nil, "without scheme, port or path"},
		{"gate.example.com/reports", "", nil, "without scheme, port or path"},
		{"*.example.com", "", nil, "without scheme, port or path"},
	}
	for _, tt := range tests {
		var args []string
		if tt.flag != "" {
			args = []string{"--http-allowed-hosts", tt.flag}
		}
		c, err := parseConfig(args, func(k string) string {
			if k == "GATE_HTTP_ALLOWED_HOSTS" {
				return tt.env
			}
			return ""
		}, io.Discard)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "GATE_HTTP_ALLOWED_HOSTS") {
				t.Errorf("GATE_HTTP_ALLOWED_HOSTS=%q: got %v, want an error naming the variable and %q", tt.env, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("GATE_HTTP_ALLOWED_HOSTS=%q --http-allowed-hosts=%q: %v", tt.env, tt.flag, err)
			continue
		}
		if strings.Join(c.HTTPAllowedHosts, "|") != strings.Join(tt.want, "|") {
			t.Errorf("GATE_HTTP_ALLOWED_HOSTS=%q --http-allowed-hosts=%q: got %q, want %q", tt.env, tt.flag, c.HTTPAllowedHosts, tt.want)
		}
	}
}

// hostGet calls path on g with the Host header host.
func hostGet(t *testing.T, g *gateProc, path, host string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeAllowedHosts checks the Host allow-list of a running gate: the
// setting reaches the server, loopback names pass without it, and the
// probes answer any name.
func TestServeAllowedHosts(t *testing.T) {
	e := newEnv(t, stackEmbedded, contractRules)
	g := e.start(map[string]string{"GATE_HTTP_ALLOWED_HOSTS": "gate.test"})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(g.base, "http://"))
	tests := []struct {
		path, host string
		want       int
	}{
		{"/v1/rules", "gate.test", http.StatusOK},
		{"/v1/rules", "gate.test:" + port, http.StatusOK},
		{"/v1/rules", "localhost:" + port, http.StatusOK},
		{"/v1/rules", "attacker.test:" + port, http.StatusForbidden},
		{"/", "attacker.test", http.StatusForbidden},
		{"/healthz", "attacker.test", http.StatusOK},
		{"/readyz", "10.1.2.3:" + port, http.StatusOK},
		{"/metrics", "attacker.test", http.StatusOK},
	}
	for _, tt := range tests {
		if got := hostGet(t, g, tt.path, tt.host); got != tt.want {
			t.Errorf("GET %s with Host %s: got %d, want %d", tt.path, tt.host, got, tt.want)
		}
	}
}

// TestServeMasksSecretsInLog starts a gate whose NATS needs a token given
// in a list of two URLs, and whose PostgreSQL URL carries a secret query
// parameter, and checks that neither secret reaches the log, while the
// "gate starting" line still names where the gate connects.
func TestServeMasksSecretsInLog(t *testing.T) {
	const natsToken, sslPassword = "s3cr3t-nats-token", "s3cr3t-sslpassword"
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Authorization: natsToken,
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	addr := ns.Addr().String()
	e := newEnv(t, stackReal, contractRules)
	natsURL := "nats://" + natsToken + "@" + addr + ",nats://" + natsToken + "@" + addr
	dbURL, sep := e.vars["GATE_DATABASE_URL"], "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	dbURL += sep + "sslpassword=" + sslPassword // pgx reads it only with sslkey set
	g := e.start(map[string]string{"GATE_NATS_URL": natsURL, "GATE_DATABASE_URL": dbURL, "GATE_API_TOKEN": "s3cr3t-api-token"})
	if err := g.shutdown(); err != nil {
		t.Fatal(err)
	}
	log := g.log.String()
	for _, secret := range []string{natsToken, sslPassword, "s3cr3t-api-token"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log holds the secret %q:\n%s", secret, log)
		}
	}
	var start string
	for line := range strings.Lines(log) {
		if strings.Contains(line, "gate starting") {
			start = line
		}
	}
	for _, want := range []string{"nats://xxxxx@" + addr + ",nats://xxxxx@" + addr, "sslpassword=xxxxx"} {
		if !strings.Contains(start, want) {
			t.Errorf("the gate starting line does not name %q: %s", want, start)
		}
	}
}

// TestServeMasksSecretsInError checks the error gate serve returns (and
// main prints) when a driver refuses an address: pgx quotes a URL whose
// password is a query parameter as it is.
func TestServeMasksSecretsInError(t *testing.T) {
	const secret = "s3cr3t-pg-password"
	e := newEnv(t, stackEmbedded, contractRules)
	vars := map[string]string{
		"GATE_HTTP_ADDR":    "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		"GATE_DATABASE_URL": "postgres://gate@127.0.0.1:1/gate?password=" + secret + "&sslmode=nonsense",
	}
	for k, v := range e.vars {
		vars[k] = v
	}
	log := &lockedBuffer{} // the rules watcher may still write after serve returned
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, nil, io.Discard, log)
	if err == nil {
		t.Fatal("gate serve started with an audit store URL the driver refuses")
	}
	if !strings.Contains(err.Error(), "sslmode") {
		t.Errorf("the error %q no longer says what is wrong", err)
	}
	if strings.Contains(err.Error(), secret) || strings.Contains(log.String(), secret) {
		t.Errorf("the secret shows: error %q, log:\n%s", err, log.String())
	}
}

// TestServePprof: with GATE_PPROF_ADDR the gate serves runtime profiles on
// that address alone; the API's address does not serve them.
func TestServePprof(t *testing.T) {
	e := newEnv(t, stackEmbedded, checkRules)
	addr := freeAddr(t)
	g := e.start(map[string]string{"GATE_PPROF_ADDR": addr})
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("http://" + addr + "/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("pprof goroutine profile: %d %.200q, want 200 and a goroutine profile", code, body)
	}
	if code, body := get("http://" + addr + "/debug/pprof/profile?seconds=1"); code != http.StatusOK || len(body) == 0 {
		t.Errorf("pprof CPU profile: %d, %d bytes, want 200 and a profile", code, len(body))
	}
	if code, _ := get(g.base + "/debug/pprof/"); code == http.StatusOK {
		t.Errorf("the API address serves /debug/pprof/ (%d), want only the pprof address", code)
	}
	if err := g.shutdown(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
