package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/nats-io/nats.go"
)

// TestSubjectSettings: the check and refund subjects are read as the other
// subjects are (flag over variable over default), and every subject is
// checked at start: a malformed one, a wildcard where the gate publishes,
// or two that one message could match is an error naming the setting.
func TestSubjectSettings(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		check   string
		refund  string
		wantErr string // a part of the error; empty: none
	}{
		{name: "defaults", check: "gate.check", refund: "gate.refund"},
		{name: "variables", env: map[string]string{"GATE_CHECK_SUBJECT": "ops.check", "GATE_REFUND_SUBJECT": "ops.refund"},
			check: "ops.check", refund: "ops.refund"},
		{name: "flags over variables", env: map[string]string{"GATE_CHECK_SUBJECT": "ops.check", "GATE_REFUND_SUBJECT": "ops.refund"},
			args: []string{"--check-subject", "a.check", "--refund-subject", "a.refund"}, check: "a.check", refund: "a.refund"},
		{name: "wildcard where the gate subscribes", env: map[string]string{"GATE_CHECK_SUBJECT": "gate.check.*", "GATE_IN_SUBJECT": "gate.in.>"},
			check: "gate.check.*", refund: "gate.refund"},
		{name: "empty token", env: map[string]string{"GATE_CHECK_SUBJECT": "gate..check"}, wantErr: "GATE_CHECK_SUBJECT: want a NATS subject of dot-separated names"},
		{name: "trailing dot", args: []string{"--refund-subject", "gate.refund."}, wantErr: "GATE_REFUND_SUBJECT: want a NATS subject of dot-separated names"},
		{name: "white space", env: map[string]string{"GATE_REFUND_SUBJECT": "gate refund"}, wantErr: "GATE_REFUND_SUBJECT: want a NATS subject without white space"},
		{name: "wildcard where the gate publishes", env: map[string]string{"GATE_OUT_SUBJECT": "gate.out.*"}, wantErr: "GATE_OUT_SUBJECT: want a subject without wildcards"},
		{name: "wildcard inside a name", env: map[string]string{"GATE_REFUND_SUBJECT": "gate.ref*"}, wantErr: "GATE_REFUND_SUBJECT: want wildcards as whole names"},
		{name: "> not last", env: map[string]string{"GATE_CHECK_SUBJECT": "gate.>.check"}, wantErr: "GATE_CHECK_SUBJECT: want wildcards as whole names"},
		{name: "same as another", env: map[string]string{"GATE_REFUND_SUBJECT": "gate.in"},
			wantErr: "GATE_REFUND_SUBJECT (gate.in) overlaps GATE_IN_SUBJECT (gate.in)"},
		{name: "check captured by a stream's wildcard", env: map[string]string{"GATE_IN_SUBJECT": "gate.>"},
			wantErr: "GATE_CHECK_SUBJECT (gate.check) overlaps GATE_IN_SUBJECT (gate.>)"},
		{name: "wildcards that meet", env: map[string]string{"GATE_CHECK_SUBJECT": "ops.*.check", "GATE_REFUND_SUBJECT": "ops.gate.*"},
			wantErr: "GATE_REFUND_SUBJECT (ops.gate.*) overlaps GATE_CHECK_SUBJECT (ops.*.check)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if c.CheckSubject != tt.check || c.RefundSubject != tt.refund {
				t.Errorf("check %q refund %q, want %q %q", c.CheckSubject, c.RefundSubject, tt.check, tt.refund)
			}
		})
	}
}

func TestSubjectsOverlap(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"gate.in", "gate.in", true},
		{"gate.in", "gate.out", false},
		{"gate.in", "gate.in.x", false},
		{"gate.*", "gate.in", true},
		{"gate.>", "gate.in.x", true},
		{"gate.in.>", "gate.in", false},
		{"*.in", "gate.*", true},
		{"*.in", "gate.out", false},
	}
	for _, tt := range tests {
		if got := subjectsOverlap(tt.a, tt.b); got != tt.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := subjectsOverlap(tt.b, tt.a); got != tt.want {
			t.Errorf("subjectsOverlap(%q, %q) = %v, want %v", tt.b, tt.a, got, tt.want)
		}
	}
}

// TestServeSubjectSettings: a gate started with GATE_CHECK_SUBJECT and
// GATE_REFUND_SUBJECT answers checks and takes refunds there (GATE_REFUND
// captures the refund subject, and nothing answers on gate.check), refusing
// checks whose reply subject is its own or in GATE_CHECK_REFUSED_REPLIES; a gate
// started later with another refund subject over that GATE_REFUND refuses
// to start, naming the stream and the subject, as for GATE_IN.
func TestServeSubjectSettings(t *testing.T) {
	e := newEnv(t, stackEmbedded, checkRules)
	custom := map[string]string{"GATE_CHECK_SUBJECT": "ops.check", "GATE_REFUND_SUBJECT": "ops.refund", "GATE_CHECK_REFUSED_REPLIES": "ops.audit.>"}
	g := e.start(custom)
	c := e.client()

	// A check is never answered on the gate's own subjects (here the
	// refund subject set) nor on a refused one (GATE_CHECK_REFUSED_REPLIES).
	for _, reply := range []string{"ops.refund", "ops.audit.x"} {
		if err := c.nc.PublishRequest("ops.check", reply, checkOf("sub-0", "c.three", "u1", false)); err != nil {
			t.Fatal(err)
		}
	}

	msg, err := c.nc.Request("ops.check", checkOf("sub-1", "c.three", "u1", false), 10*time.Second)
	if err != nil {
		t.Fatalf("check on ops.check: %v", err)
	}
	var a gate.CheckAnswer
	if err := json.Unmarshal(msg.Data, &a); err != nil || a.Decision != gate.OutcomeForward || !a.Admitted {
		t.Fatalf("check on ops.check: %s (%v), want an admitted forward", msg.Data, err)
	}
	if got := g.metric("gate_check_replies_refused_total"); got != 2 {
		t.Errorf("gate_check_replies_refused_total = %v, want 2 (replies on ops.refund and ops.audit.x)", got)
	}
	if _, err := c.nc.Request(natsbus.DefaultCheckSubject, checkOf("sub-2", "c.three", "u1", false), 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("check on %s: %v, want no responders", natsbus.DefaultCheckSubject, err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, natsbus.StreamRefund)
	if err != nil {
		t.Fatalf("GATE_REFUND: %v", err)
	}
	if subj := s.CachedInfo().Config.Subjects; len(subj) != 1 || subj[0] != "ops.refund" {
		t.Fatalf("GATE_REFUND captures %v, want [ops.refund]", subj)
	}
	if _, err := c.js.Publish(ctx, "ops.refund", []byte(`{"id":"never-decided"}`)); err != nil {
		t.Fatalf("publish on ops.refund: %v", err)
	}
	// A refund of an id never decided is refused and acked: the work
	// queue empties once the gate has read it from ops.refund.
	for {
		info, err := s.Info(ctx)
		if err == nil && info.State.Msgs == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the refund on ops.refund was not taken within 20s: %+v, %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := g.shutdown(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	vars := e.settings(nil)
	var log lockedBuffer
	err = run(t.Context(), []string{"serve"}, func(k string) string { return vars[k] }, nil, io.Discard, &log)
	if err == nil || !strings.Contains(err.Error(), "stream GATE_REFUND exists but does not capture subject gate.refund") {
		t.Fatalf("gate started over GATE_REFUND on ops.refund with the default refund subject: %v, want a clear error", err)
	}
}

// TestBoundedSettings: issue 13's settings, each read from its variable,
// with its default, and refused outside its bounds, naming the setting.
//   - GATE_PPROF_ADDR: off by default, loopback addresses only;
//   - GATE_BATCH_WAIT: 0 by default, at most 100ms;
//   - GATE_OUT_DUPLICATE_WINDOW: 2h by default, from 10m to 72h, and long
//     enough for the gate's own redeliveries (8 x GATE_ACK_WAIT).
func TestBoundedSettings(t *testing.T) {
	type env = map[string]string
	pprof := func(want string) func(*config) bool { return func(c *config) bool { return c.PprofAddr == want } }
	wait := func(want time.Duration) func(*config) bool {
		return func(c *config) bool { return c.BatchWait == want }
	}
	window := func(want time.Duration) func(*config) bool {
		return func(c *config) bool { return c.OutDuplicates == want }
	}
	for _, tt := range []struct {
		env     env
		ok      func(*config) bool // the setting read, when no error is wanted
		wantErr string
	}{
		{ok: func(c *config) bool { return c.PprofAddr == "" && c.BatchWait == 0 && c.OutDuplicates == 2*time.Hour }},
		{env: env{"GATE_PPROF_ADDR": "127.0.0.1:6060"}, ok: pprof("127.0.0.1:6060")},
		{env: env{"GATE_PPROF_ADDR": "[::1]:6060"}, ok: pprof("[::1]:6060")},
		{env: env{"GATE_PPROF_ADDR": "localhost:0"}, ok: pprof("localhost:0")},
		{env: env{"GATE_PPROF_ADDR": ":6060"}, wantErr: "GATE_PPROF_ADDR must be a loopback host:port"},
		{env: env{"GATE_PPROF_ADDR": "0.0.0.0:6060"}, wantErr: "GATE_PPROF_ADDR must be a loopback host:port"},
		{env: env{"GATE_PPROF_ADDR": "10.1.2.3:6060"}, wantErr: "GATE_PPROF_ADDR must be a loopback host:port"},
		{env: env{"GATE_PPROF_ADDR": "127.0.0.1"}, wantErr: "GATE_PPROF_ADDR must be a loopback host:port"},
		{env: env{"GATE_BATCH_WAIT": "2ms"}, ok: wait(2 * time.Millisecond)},
		{env: env{"GATE_BATCH_WAIT": "100ms"}, ok: wait(100 * time.Millisecond)},
		{env: env{"GATE_BATCH_WAIT": "101ms"}, wantErr: "GATE_BATCH_WAIT must be from 0 to 100ms"},
		{env: env{"GATE_BATCH_WAIT": "-1ms"}, wantErr: "want a duration such as 200ms or 30s"},
		{env: env{"GATE_OUT_DUPLICATE_WINDOW": "15m"}, ok: window(15 * time.Minute)},
		{env: env{"GATE_OUT_DUPLICATE_WINDOW": "9m"}, wantErr: "GATE_OUT_DUPLICATE_WINDOW must be from 10m to 72h"},
		{env: env{"GATE_OUT_DUPLICATE_WINDOW": "73h"}, wantErr: "GATE_OUT_DUPLICATE_WINDOW must be from 10m to 72h"},
		{env: env{"GATE_OUT_DUPLICATE_WINDOW": "10m", "GATE_ACK_WAIT": "2m"}, wantErr: "at least 8 x GATE_ACK_WAIT (2m0s)"},
	} {
		c, err := parseConfig(nil, func(k string) string { return tt.env[k] }, io.Discard)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: err = %v, want one containing %q", tt.env, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", tt.env, err)
		case !tt.ok(c):
			t.Errorf("%v: pprof %q, batch wait %s, duplicate window %s: not what was set", tt.env, c.PprofAddr, c.BatchWait, c.OutDuplicates)
		}
	}
}

// TestDurationDefaults: the defaults taken from the owners' constants read
// as they did when the table wrote them out.
func TestDurationDefaults(t *testing.T) {
	want := map[string]string{"rules-poll": "1s", "nacos-resync": "30s", "out-duplicate-window": "2h", "store-timeout": "200ms",
		"ack-wait": "5s", "ledger-retention": "168h", "release-interval": "500ms", "max-message-bytes": "262144", "batch": "256",
		"in-subject": "gate.in", "http-addr": "127.0.0.1:8080", "embedded-nats-addr": "127.0.0.1:4222", "nacos-group": "GATE",
		"nacos-data-id": "gate-rules.yaml", "max-ack-pending": "1000", "preview-max-decisions": "2000000", "preferences-cache": "100000"}
	for _, s := range settings(&config{}) {
		if w, ok := want[s.flag]; ok && s.def != w {
			t.Errorf("--%s default %q, want %q", s.flag, s.def, w)
		}
		delete(want, s.flag)
	}
	if len(want) > 0 {
		t.Errorf("settings missing: %v", want)
	}
}

// TestCheckRefusedRepliesSetting: GATE_CHECK_REFUSED_REPLIES is a list of
// subjects, wildcards allowed; a malformed one stops the gate at start,
// naming the setting, instead of never matching.
func TestCheckRefusedRepliesSetting(t *testing.T) {
	for _, tt := range []struct {
		v, want, wantErr string
	}{
		{v: "", want: "[]"},
		{v: " ops.audit.> , *.mirror,$X.y ", want: "[ops.audit.> *.mirror $X.y]"},
		{v: "ops..audit", wantErr: "GATE_CHECK_REFUSED_REPLIES: want a NATS subject of dot-separated names"},
		{v: "ops.aud*", wantErr: "GATE_CHECK_REFUSED_REPLIES: want wildcards as whole names"},
		{v: "ops.audit,two words", wantErr: "GATE_CHECK_REFUSED_REPLIES: want a NATS subject without white space"},
	} {
		c, err := parseConfig(nil, func(k string) string {
			if k == "GATE_CHECK_REFUSED_REPLIES" {
				return tt.v
			}
			return ""
		}, io.Discard)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: err = %v, want one containing %q", tt.v, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.v, err)
			continue
		}
		if got := fmt.Sprint(c.CheckRefusedReplies); got != tt.want {
			t.Errorf("%q: got %s, want %s", tt.v, got, tt.want)
		}
	}
}

// TestStreamReplicasSetting: GATE_STREAM_REPLICAS is unset (0: leave the
// streams' replicas) by default, 1 to 5 when set, and above 1 only with a
// NATS server of one's own: the embedded server is one server.
func TestStreamReplicasSetting(t *testing.T) {
	const cluster = "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"
	for _, tt := range []struct {
		replicas, natsURL string
		want              int
		wantErr           string
	}{
		{replicas: "", want: 0},
		{replicas: "", natsURL: cluster, want: 0},
		{replicas: "1", want: 1},
		{replicas: "3", natsURL: cluster, want: 3},
		{replicas: "5", natsURL: "nats://127.0.0.1:4222", want: 5},
		{replicas: "0", natsURL: cluster, wantErr: "GATE_STREAM_REPLICAS: want a number of replicas from 1 to 5"},
		{replicas: "6", natsURL: cluster, wantErr: "GATE_STREAM_REPLICAS: want a number of replicas from 1 to 5"},
		{replicas: "three", natsURL: cluster, wantErr: "GATE_STREAM_REPLICAS: want a number of replicas from 1 to 5"},
		{replicas: "3", wantErr: "GATE_STREAM_REPLICAS is 3 but the embedded NATS server"},
	} {
		env := map[string]string{"GATE_STREAM_REPLICAS": tt.replicas, "GATE_NATS_URL": tt.natsURL}
		c, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%v: err = %v, want one containing %q", env, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%v: %v", env, err)
		case c.StreamReplicas != tt.want:
			t.Errorf("%v: StreamReplicas = %d, want %d", env, c.StreamReplicas, tt.want)
		}
	}
}
