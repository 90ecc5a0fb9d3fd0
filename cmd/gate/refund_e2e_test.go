package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// refundRules: one message an hour per recipient, so that a message passes
// only when the one before it was refunded.
const refundRules = `
unknown_scene: forward
scenes:
  r.alert:
    limits: [{window: 1h, max: 1}]
    on_exceed: suppress
`

// TestRefundEndToEnd proves refunds (issue 12, section 2) on both stacks: a
// refund on gate.refund (JetStream) or POST /v1/refund takes a forwarded
// message out of its window, so the recipient's next message passes; a
// second refund changes nothing; what the gate did not forward, or never
// decided, is refused with its reason; the summary, /v1/refunds and
// gate report show the refunds.
func TestRefundEndToEnd(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, refundRules)
		const token = "refund-s3cret"
		g := e.start(map[string]string{"GATE_API_TOKEN": token})
		c := e.client()
		to := testenv.Unique("refund")
		m := func(name string) msg { return msg{ID: to + "-" + name, Scene: "r.alert", To: to} }

		c.send(m("A"), m("B"))
		if got, _ := c.forwarded(to); !slices.Equal(got, []string{m("A").ID}) {
			t.Fatalf("forwarded %v, want A alone under 1/h", got)
		}

		c.refund(m("A").ID)
		if s := g.summary()["r.alert"]; s.Refunded != 1 {
			t.Errorf("summary after refunding A: %+v, want refunded 1", s)
		}
		c.send(m("C"))
		if got, _ := c.forwarded(to); !slices.Equal(got, []string{m("A").ID, m("C").ID}) {
			t.Fatalf("forwarded %v, want A then C: the refund of A gave its slot back", got)
		}

		// Refunded again: nothing changes, D is held back by C.
		c.refund(m("A").ID)
		c.send(m("D"))
		if got, _ := c.forwarded(to); len(got) != 2 {
			t.Errorf("forwarded %v after a second refund of A, want A and C only", got)
		}
		if s := g.summary()["r.alert"]; s.Refunded != 1 {
			t.Errorf("summary after refunding A twice: %+v, want refunded still 1", s)
		}

		code, out := g.postRefund(`{"id":"`+m("B").ID+`"}`, token)
		if code != http.StatusConflict || !strings.Contains(fmt.Sprint(out["error"]), "suppressed") {
			t.Errorf("refund of B (suppressed): %d %v, want 409 naming the suppression", code, out)
		}
		code, out = g.postRefund(`{"id":"`+to+`-never"}`, token)
		if code != http.StatusNotFound || !strings.Contains(fmt.Sprint(out["error"]), "never decided by this gate") {
			t.Errorf("refund of an unknown id: %d %v, want 404 never decided", code, out)
		}
		if code, out = g.postRefund(`{"id":`, token); code != http.StatusBadRequest || out["error"] == nil {
			t.Errorf("refund of a malformed body: %d %v, want 400 with an error", code, out)
		}
		if code, _ = g.postRefund(`{"id":"`+m("C").ID+`"}`, ""); code != http.StatusUnauthorized {
			t.Errorf("refund without the token: %d, want 401", code)
		}

		// C refunded through the API: E passes; asked again, nothing changes.
		code, out = g.postRefund(`{"id":"`+m("C").ID+`"}`, token)
		if code != http.StatusOK || out["already_refunded"] != false || out["source"] != "api" {
			t.Errorf("refund of C: %d %v, want 200, refunded now from the api", code, out)
		}
		code, out = g.postRefund(`{"id":"`+m("C").ID+`"}`, token)
		if code != http.StatusOK || out["already_refunded"] != true {
			t.Errorf("second refund of C: %d %v, want 200 already_refunded", code, out)
		}
		c.send(m("E"))
		if got, _ := c.forwarded(to); !slices.Equal(got, []string{m("A").ID, m("C").ID, m("E").ID}) {
			t.Errorf("forwarded %v, want A, C, E", got)
		}

		var page gate.RefundPage
		g.api("/v1/refunds", recipientQuery(to), &page)
		var listed []string
		for _, r := range page.Items {
			listed = append(listed, r.MessageID+"/"+string(r.Source))
			if r.Scene != "r.alert" || r.Recipient != "open_id:"+to || r.RefundedAt.Before(r.ForwardedAt) {
				t.Errorf("refund row %+v: want scene r.alert, the recipient, refunded after forwarded", r)
			}
		}
		if want := []string{m("C").ID + "/api", m("A").ID + "/nats"}; !slices.Equal(listed, want) {
			t.Errorf("/v1/refunds lists %v, want %v (newest first)", listed, want)
		}
		if s := g.summary()["r.alert"]; s.Refunded != 2 || s.Received != 5 || s.Forwarded != 3 {
			t.Errorf("summary: %+v, want refunded 2, received 5, forwarded 3", s)
		}

		// A malformed refund on gate.refund is parked, like a malformed message.
		c.publishRefund([]byte("not a refund"))
		if !slices.ContainsFunc(c.stored(natsbus.StreamDead), func(d *jetstream.RawStreamMsg) bool {
			return string(d.Data) == "not a refund" && d.Header.Get(natsbus.HeaderError) != ""
		}) {
			t.Error("the malformed refund is not on the dead letter with its reason")
		}

		var report strings.Builder
		err := run(t.Context(), []string{"report", "summary", "--server", g.base},
			func(k string) string { return map[string]string{"GATE_API_TOKEN": token}[k] }, nil, &report, io.Discard)
		if err != nil {
			t.Fatalf("gate report summary: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(report.String()), "\n")
		head := strings.Fields(lines[0])
		var row []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "r.alert" {
				row = f
			}
		}
		if head[len(head)-1] != "refunded" || len(row) != len(head) || row[len(row)-1] != "2" {
			t.Errorf("gate report summary:\n%s\nwant a refunded column, 2 for r.alert", report.String())
		}
	})
}

// refund publishes {"id": id} to gate.refund and waits until the gate has
// handled it.
func (c *client) refund(id string) {
	c.t.Helper()
	b, _ := json.Marshal(map[string]string{"id": id})
	c.publishRefund(b)
}

// publishRefund publishes data to gate.refund once the gate has created
// GATE_REFUND, and waits until the gate has settled every refund
// (GATE_REFUND is a work queue: it empties once all are acked or
// terminated).
func (c *client) publishRefund(data []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		s, err := c.js.Stream(ctx, natsbus.StreamRefund)
		if err == nil {
			if _, err := c.js.Publish(ctx, natsbus.DefaultRefundSubject, data); err != nil {
				c.t.Fatalf("publish refund: %v", err)
			}
			for {
				info, err := s.Info(ctx)
				if err == nil && info.State.Msgs == 0 {
					return
				}
				if ctx.Err() != nil {
					c.t.Fatalf("GATE_REFUND not drained within 20s: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		if ctx.Err() != nil {
			c.t.Fatalf("the gate did not create %s within 20s: %v", natsbus.StreamRefund, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// postRefund calls POST /v1/refund with body, with token when set, and
// returns the status and the decoded JSON answer.
func (g *gateProc) postRefund(body, token string) (int, map[string]any) {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/refund", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("POST /v1/refund: %v", err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		g.t.Fatalf("POST /v1/refund %s: answer is not JSON: %v", body, err)
	}
	return resp.StatusCode, out
}
