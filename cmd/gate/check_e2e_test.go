package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// checkRules: one scene at 3 an hour, one at 5, both suppressing.
const checkRules = `
unknown_scene: drop
scenes:
  c.three:
    limits: [{window: 1h, max: 3}]
    on_exceed: suppress
  c.five:
    limits: [{window: 1h, max: 5}]
    on_exceed: suppress
`

const checkToken = "check-s3cret"

// checkHTTP posts body to /v1/check on g and returns the status and body.
func (g *gateProc) checkHTTP(t testing.TB, body []byte, token string) (int, []byte) {
	req, err := http.NewRequest(http.MethodPost, g.base+"/v1/check", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/check: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST /v1/check: %v", err)
	}
	return resp.StatusCode, b
}

// mustCheck posts body and decodes a 200 answer.
func (g *gateProc) mustCheck(t testing.TB, body []byte) gate.CheckAnswer {
	t.Helper()
	code, b := g.checkHTTP(t, body, checkToken)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/check %s: %d %s", body, code, b)
	}
	var a gate.CheckAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("POST /v1/check: %v: %s", err, b)
	}
	return a
}

// checkNATS asks gate.check and returns the reply's answer, or its error.
func (c *client) checkNATS(body []byte) (gate.CheckAnswer, error) {
	msg, err := c.nc.Request(natsbus.DefaultCheckSubject, body, 10*time.Second)
	if err != nil {
		return gate.CheckAnswer{}, err
	}
	var e struct {
		Error  string `json:"error"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(msg.Data, &e); err != nil {
		return gate.CheckAnswer{}, fmt.Errorf("reply %s: %w", msg.Data, err)
	}
	if e.Error != "" {
		return gate.CheckAnswer{}, fmt.Errorf("gate.check answered %d: %s", e.Status, e.Error)
	}
	var a gate.CheckAnswer
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		return gate.CheckAnswer{}, fmt.Errorf("reply %s: %w", msg.Data, err)
	}
	return a, nil
}

func checkOf(id, scene, to string, dryRun bool) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "scene": scene, "receive_id_type": "open_id", "receive_id": to, "dry_run": dryRun})
	return b
}

// TestCheckE2E proves the check API on both stacks: an admitted check takes
// a window slot that a message on gate.in then finds used, a dry run records
// nothing, the same id asked twice (on HTTP, then on NATS) gets the first
// answer and takes one slot, the reports count checks, and a bad body is a
// 400.
func TestCheckE2E(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, checkRules)
		g := e.start(map[string]string{"GATE_API_TOKEN": checkToken})
		c := e.client()
		to := testenv.Unique("check")

		first := g.mustCheck(t, checkOf(to+"-c1", "c.three", to, false))
		if first.Decision != gate.OutcomeForward || !first.Admitted || first.Duplicate || first.RulesVersion == "" {
			t.Fatalf("first check: got %+v, want an admitted forward", first)
		}
		again := g.mustCheck(t, checkOf(to+"-c1", "c.three", to, false))
		if !again.Duplicate || again.Decision != first.Decision || !again.DecidedAt.Equal(first.DecidedAt) {
			t.Errorf("same id again: got %+v, want the first answer %+v as a duplicate", again, first)
		}
		viaNATS, err := c.checkNATS(checkOf(to+"-c1", "c.three", to, false))
		if err != nil || !viaNATS.Duplicate || !viaNATS.DecidedAt.Equal(first.DecidedAt) {
			t.Errorf("same id on gate.check: got %+v, %v; want the first answer", viaNATS, err)
		}
		for i := range 3 {
			dry := g.mustCheck(t, checkOf(fmt.Sprintf("%s-dry%d", to, i), "c.three", to, true))
			if !dry.DryRun || !dry.Admitted {
				t.Errorf("dry run %d: got %+v, want an admitted dry run", i, dry)
			}
		}

		// The check holds 1 of 3: two messages pass, the third finds the
		// window full.
		ms := []msg{{ID: to + "-m1", Scene: "c.three", To: to}, {ID: to + "-m2", Scene: "c.three", To: to}, {ID: to + "-m3", Scene: "c.three", To: to}}
		c.send(ms...)
		if got, want := fwd(c, to), []string{to + "-m1", to + "-m2"}; !slices.Equal(got, want) {
			t.Fatalf("forwarded %v, want %v: the check and no dry run take a slot", got, want)
		}

		refused := g.mustCheck(t, checkOf(to+"-c2", "c.three", to, false))
		if refused.Decision != gate.OutcomeSuppress || refused.Admitted || refused.Reason != gate.ReasonLimit ||
			refused.Limit == nil || refused.Limit.Max != 3 || refused.Limit.Window == nil || refused.Count != 3 || refused.NextAllowedAt == nil {
			t.Errorf("check of a full window: got %+v, want suppress, 3 of 3 in 1h, next_allowed_at", refused)
		}
		// A message published under a checked id keeps the check's
		// decision: forwarded, without a second slot, after an admitted
		// check; held back after a refused one.
		c.send(msg{ID: to + "-c1", Scene: "c.three", To: to}, msg{ID: to + "-c2", Scene: "c.three", To: to})
		if got, want := fwd(c, to), []string{to + "-m1", to + "-m2", to + "-c1"}; !slices.Equal(got, want) {
			t.Errorf("forwarded %v, want %v", got, want)
		}
		if rows := g.suppressions(recipientQuery(to)); !slices.ContainsFunc(rows, func(s gate.Suppression) bool { return s.MessageID == to+"-c2" }) {
			t.Errorf("no audit row for the refused check: %+v", rows)
		}
		sum := g.summary()["c.three"]
		if sum.Forwarded < 3 || sum.Suppressed < 2 {
			t.Errorf("summary %+v: want the admitted check among the forwards and the refused one among the suppressions", sum)
		}

		for _, bad := range []string{``, `{`, `[]`, `{"id":"x","scene":"c.three"}`, `{"id":"x","scene":"c.three","receive_id":"u","dryrun":true}`,
			`{"id":"x","scene":"c.three","receive_id":"u","priority":"max"}`} {
			code, b := g.checkHTTP(t, []byte(bad), checkToken)
			var body struct {
				Error string `json:"error"`
			}
			if code != http.StatusBadRequest || json.Unmarshal(b, &body) != nil || body.Error == "" {
				t.Errorf("%q: got %d %s, want 400 with an error", bad, code, b)
			}
			if _, err := c.checkNATS([]byte(bad)); err == nil {
				t.Errorf("%q on gate.check: answered, want an error reply", bad)
			}
		}
		if code, _ := g.checkHTTP(t, checkOf(to+"-c3", "c.three", to, false), ""); code != http.StatusUnauthorized {
			t.Errorf("without the token: got %d, want 401", code)
		}
	})
}

// fwd is the ids forwarded to to, in order.
func fwd(c *client, to string) []string {
	ids, _ := c.forwarded(to)
	return ids
}

// TestCheckSharedWindowTwoGates is the proof issue 12 asks for: two gates
// share Redis, PostgreSQL and NATS; checks over HTTP on one, checks on
// gate.check (answered by either) and messages on gate.in (decided by
// either) interleave over one (recipient, scene) limited to 5, and exactly 5
// are admitted across all three paths. Asked again, on the other transport,
// every check gets its first answer and nothing more is admitted.
func TestCheckSharedWindowTwoGates(t *testing.T) {
	e := newEnv(t, stackReal, checkRules)
	g1 := e.start(map[string]string{"GATE_API_TOKEN": checkToken})
	e.start(map[string]string{"GATE_API_TOKEN": checkToken})
	c := e.client()
	to := testenv.Unique("shared")
	const each, limit = 8, 5

	var (
		mu       sync.Mutex
		answers  = map[string]gate.CheckAnswer{}
		failures []string
	)
	record := func(id string, a gate.CheckAnswer, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failures = append(failures, fmt.Sprintf("%s: %v", id, err))
			return
		}
		answers[id] = a
	}
	var wg sync.WaitGroup
	for i := range each {
		wg.Go(func() {
			id := fmt.Sprintf("%s-http%d", to, i)
			code, b := g1.checkHTTP(t, checkOf(id, "c.five", to, false), checkToken)
			var a gate.CheckAnswer
			err := json.Unmarshal(b, &a)
			if code != http.StatusOK {
				err = fmt.Errorf("status %d: %s", code, b)
			}
			record(id, a, err)
		})
		wg.Go(func() {
			id := fmt.Sprintf("%s-nats%d", to, i)
			a, err := c.checkNATS(checkOf(id, "c.five", to, false))
			record(id, a, err)
		})
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m := msg{ID: fmt.Sprintf("%s-msg%d", to, i), Scene: "c.five", To: to}
			if _, err := c.js.Publish(ctx, "gate.in", m.json()); err != nil {
				record(m.ID, gate.CheckAnswer{}, err)
			}
		})
	}
	wg.Wait()
	c.waitIdle()
	if len(failures) > 0 {
		t.Fatalf("failed: %v", failures)
	}
	admitted := 0
	for _, a := range answers {
		if a.Admitted {
			admitted++
		}
	}
	forwarded := fwd(c, to)
	if admitted+len(forwarded) != limit {
		t.Fatalf("%d checks admitted and %d messages forwarded, want %d in all", admitted, len(forwarded), limit)
	}
	t.Logf("%d checks admitted, %d messages forwarded", admitted, len(forwarded))

	// Every check again, on the other transport: the first answer, and
	// nothing more admitted.
	for id, first := range answers {
		var again gate.CheckAnswer
		var err error
		if strings.Contains(id, "-http") {
			again, err = c.checkNATS(checkOf(id, "c.five", to, false))
		} else {
			again = g1.mustCheck(t, checkOf(id, "c.five", to, false))
		}
		if err != nil || !again.Duplicate || again.Admitted != first.Admitted || !again.DecidedAt.Equal(first.DecidedAt) {
			t.Errorf("%s again: got %+v, %v; want the first answer %+v", id, again, err, first)
		}
	}
	extra := g1.mustCheck(t, checkOf(to+"-late", "c.five", to, false))
	if extra.Admitted {
		t.Errorf("a new check after the limit was reached: got %+v, want refused", extra)
	}
}
