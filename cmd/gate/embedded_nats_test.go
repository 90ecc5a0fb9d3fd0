package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go"
)

// With nothing configured, the gate generates the password of its embedded
// NATS server's user gate into the data directory (0600, logged by path
// only) and keeps it across restarts; `gate publish`, which brings no
// credentials, still produces; an anonymous client cannot read gate.out;
// a client with the password in the file can. The sender's password is
// generated beside it.
func TestEmbeddedNATSWithNothingSet(t *testing.T) {
	e := newEnv(t, stackEmbedded, contractRules)
	delete(e.vars, "GATE_EMBEDDED_NATS_PASSWORD")
	delete(e.vars, "GATE_EMBEDDED_NATS_SENDER_PASSWORD")
	e.natsAuth = nil
	g := e.start(nil)
	if fi, err := os.Stat(filepath.Join(e.vars["GATE_DATA_DIR"], embeddedSenderPasswordFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the sender's password file: %v, %v; want it generated, mode 0600", fi, err)
	}

	path := filepath.Join(e.vars["GATE_DATA_DIR"], embeddedPasswordFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no password file: %v", err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Errorf("password file mode = %v, want %v", got, want)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	password := strings.TrimSpace(string(raw))
	if len(password) < 20 {
		t.Errorf("generated password %d characters long, want at least 20", len(password))
	}
	if log := g.log.String(); strings.Contains(log, password) || !strings.Contains(log, path) {
		t.Errorf("the log must name %s and never hold the password:\n%s", path, log)
	}

	to := testenv.Unique("publish")
	getenv := func(k string) string {
		if k == "GATE_EMBEDDED_NATS_ADDR" {
			return e.vars[k] // a free port instead of 4222; nothing else
		}
		return ""
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"publish", "--id", to, "--scene", "t.cap_a", "--to", "open_id:" + to}, getenv, nil, &out, io.Discard); err != nil {
		t.Fatalf("gate publish: %v", err)
	}
	if !strings.Contains(out.String(), "stream "+natsbus.StreamIn) {
		t.Errorf("gate publish said %q, want the publish ack of %s", out.String(), natsbus.StreamIn)
	}

	anon, err := nats.Connect(e.natsURL, nats.PermissionErrOnSubscribe(true))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	sub, err := anon.SubscribeSync(natsbus.DefaultOutSubject)
	if err == nil {
		_, err = sub.NextMsg(10 * time.Second)
	}
	if !errors.Is(err, nats.ErrPermissionViolation) {
		t.Errorf("anonymous subscribe to gate.out: err = %v, want a permissions violation", err)
	}

	e.natsAuth = []nats.Option{nats.UserInfo(natsbus.EmbeddedGateUser, password)}
	c := e.client()
	c.waitIdle()
	if ids, _ := c.forwarded(to); !slices.Equal(ids, []string{to}) {
		t.Errorf("forwarded %v, want [%s]", ids, to)
	}

	if err := g.shutdown(); err != nil {
		t.Fatal(err)
	}
	e.start(nil)
	again, err := os.ReadFile(path)
	if err != nil || string(again) != string(raw) {
		t.Errorf("after a restart the password file holds %q (%v), want it kept", again, err)
	}
	e.client().waitIdle() // the same password still opens the server
}

// An embedded NATS server that other hosts can reach needs the gate's and
// the sender's passwords chosen by the operator: without either gate serve
// refuses to start.
func TestEmbeddedNATSOffLoopbackNeedsPassword(t *testing.T) {
	for _, missing := range []string{"GATE_EMBEDDED_NATS_PASSWORD", "GATE_EMBEDDED_NATS_SENDER_PASSWORD"} {
		dir := t.TempDir()
		env := map[string]string{"GATE_EMBEDDED_NATS_ADDR": "0.0.0.0:4222", "GATE_DATA_DIR": dir,
			"GATE_EMBEDDED_NATS_PASSWORD": "chosen-for-gate", "GATE_EMBEDDED_NATS_SENDER_PASSWORD": "chosen-for-sender"}
		delete(env, missing)
		getenv := func(k string) string { return env[k] }
		err := run(t.Context(), []string{"serve"}, getenv, nil, io.Discard, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), missing) {
			t.Errorf("serve on 0.0.0.0 without %s: err = %v, want a usage error naming it", missing, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("the refused gate wrote to its data directory: %v", entries)
		}
	}
	for name, more := range map[string]map[string]string{
		"with both passwords":      {"GATE_EMBEDDED_NATS_PASSWORD": "chosen-for-gate", "GATE_EMBEDDED_NATS_SENDER_PASSWORD": "chosen-for-sender"},
		"with a server of its own": {"GATE_NATS_URL": "nats://nats.example:4222"},
	} {
		vars := map[string]string{"GATE_EMBEDDED_NATS_ADDR": "0.0.0.0:4222"}
		for k, v := range more {
			vars[k] = v
		}
		if _, err := parseConfig(nil, func(k string) string { return vars[k] }, io.Discard); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
