package main

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

const cancelRules = `
scenes:
  c.defer:
    limits: [{window: 10s, max: 1}]
    on_exceed: defer
  c.digest:
    limits: [{window: 10s, max: 1}]
    on_exceed: digest
  c.free:
    limits: [{window: 1m, max: 100}]
`

const cancelToken = "cancel-s3cret"

// cancelEnvelope is an envelope of to in scene with a cancel_key and a
// resolves field, each left out when "".
func cancelEnvelope(id, scene, to, cancelKey, resolves string) []byte {
	env := map[string]any{"id": id, "scene": scene, "receive_id_type": "open_id", "receive_id": to,
		"msg_type": "text", "content": `{"text":"` + id + `"}`}
	if cancelKey != "" {
		env["cancel_key"] = cancelKey
	}
	if resolves != "" {
		env["resolves"] = resolves
	}
	b, _ := json.Marshal(env)
	return b
}

// cancelNATS asks gate.cancel and returns the reply, decoded.
func (c *client) cancelNATS(body string) (count int, status int, errMsg string) {
	c.t.Helper()
	msg, err := c.nc.Request(natsbus.DefaultCancelSubject, []byte(body), 10*time.Second)
	if err != nil {
		c.t.Fatalf("request gate.cancel %s: %v", body, err)
	}
	var r struct {
		Count  *int   `json:"count"`
		Error  string `json:"error"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		c.t.Fatalf("gate.cancel reply %s: %v", msg.Data, err)
	}
	if r.Error != "" {
		return 0, r.Status, r.Error
	}
	if r.Count == nil {
		c.t.Fatalf("gate.cancel reply %s: no count", msg.Data)
	}
	return *r.Count, http.StatusOK, ""
}

// cancelHTTP calls POST /v1/cancel and returns the status and body.
func (g *gateProc) cancelHTTP(body string) (int, string) {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/cancel", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+cancelToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("POST /v1/cancel: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCancel: held messages (deferred, or collected for a digest) that
// name a cancel_key are taken back by gate.cancel, by POST /v1/cancel
// (of every recipient, or of one) and by a later message that resolves
// the key (body field or header); the cancelled ones never reach gate.out
// while the others are released; their rows say cancelled and the
// summary counts them. Bad requests are refused on both transports, and a
// cancel that matches nothing answers count 0.
func TestCancel(t *testing.T) {
	t.Parallel()
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, cancelRules)
		g := e.start(map[string]string{"GATE_API_TOKEN": cancelToken})
		c := e.client()
		to, other := testenv.Unique("cancel"), testenv.Unique("other")
		id := func(s string) string { return to + "-" + s }
		c.publish(
			cancelEnvelope(id("m1"), "c.defer", to, "k1", ""), // admitted: forwarded at once
			cancelEnvelope(id("m2"), "c.defer", to, "k1", ""),
			cancelEnvelope(id("m3"), "c.defer", to, "k2", ""),
			cancelEnvelope(id("m4"), "c.defer", to, "", ""),
			cancelEnvelope(id("m5"), "c.defer", to, "k3", ""),
			cancelEnvelope(other+"-o1", "c.defer", other, "k1", ""),
			cancelEnvelope(other+"-o2", "c.defer", other, "k1", ""),
			cancelEnvelope(id("d1"), "c.digest", to, "", ""),
			cancelEnvelope(id("d2"), "c.digest", to, "kd", ""),
			cancelEnvelope(id("d3"), "c.digest", to, "", ""),
		)
		// m6 names its key in a header.
		c.publishMsg(&nats.Msg{Subject: "gate.in", Data: cancelEnvelope(id("m6"), "c.defer", to, "", ""),
			Header: nats.Header{gate.CancelKeyHeader: {"k4"}}})
		g.waitRows(to, 30*time.Second, "messages held", held(gate.HoldDefer, id("m2"), id("m3"), id("m4"), id("m5"), id("m6")))

		// gate.cancel, of one recipient: m2, not other's o2.
		if n, status, msg := c.cancelNATS(`{"cancel_key":"k1","receive_id_type":"open_id","receive_id":"` + to + `"}`); n != 1 {
			t.Errorf("gate.cancel k1 of %s: count %d (%d %s), want 1", to, n, status, msg)
		}
		// POST /v1/cancel, of every recipient: m3.
		if code, body := g.cancelHTTP(`{"cancel_key":"k2"}`); code != http.StatusOK || !strings.Contains(body, `"count": 1`) {
			t.Errorf("POST /v1/cancel k2: %d %s, want count 1", code, body)
		}
		// A message that resolves k3 (body) and one that resolves k4
		// (header): both forwarded, m5 and m6 cancelled.
		c.publish(cancelEnvelope(id("r1"), "c.free", to, "", "k3"))
		c.publishMsg(&nats.Msg{Subject: "gate.in", Data: cancelEnvelope(id("r2"), "c.free", to, "", ""),
			Header: nats.Header{gate.ResolvesHeader: {"k4"}}})
		// The digest loses d2.
		if code, body := g.cancelHTTP(`{"cancel_key":"kd","receive_id_type":"open_id","receive_id":"` + to + `"}`); code != http.StatusOK || !strings.Contains(body, `"count": 1`) {
			t.Errorf("POST /v1/cancel kd: %d %s, want count 1", code, body)
		}
		// Nothing left to cancel: count 0, no error.
		if n, status, msg := c.cancelNATS(`{"cancel_key":"k1","receive_id_type":"open_id","receive_id":"` + to + `"}`); n != 0 || status != http.StatusOK {
			t.Errorf("gate.cancel k1 again: count %d (%d %s), want 0", n, status, msg)
		}
		if code, body := g.cancelHTTP(`{"cancel_key":"nobody"}`); code != http.StatusOK || !strings.Contains(body, `"count": 0`) {
			t.Errorf("POST /v1/cancel nobody: %d %s, want count 0", code, body)
		}
		// Bad requests.
		for _, body := range []string{`{}`, `{"cancel_key":""}`, `{"cancel_key":"k","receive_id":"x"}`,
			`{"cancel_key":"k","extra":1}`, `{"cancel_key":"a","cancel_key":"b"}`, `{"cancel_key":"` + strings.Repeat("x", 300) + `"}`} {
			if code, resp := g.cancelHTTP(body); code != http.StatusBadRequest {
				t.Errorf("POST /v1/cancel %s: %d %s, want 400", body, code, resp)
			}
			if _, status, msg := c.cancelNATS(body); status != http.StatusBadRequest || !strings.Contains(msg, "invalid cancel") {
				t.Errorf("gate.cancel %s: %d %q, want 400 invalid cancel", body, status, msg)
			}
		}

		cancelled := []string{id("m2"), id("m3"), id("m5"), id("m6"), id("d2")}
		rows := g.waitRows(to, 30*time.Second, "rows cancelled", settled(gate.SettleCancelled, cancelled...))
		for _, cid := range cancelled {
			if r := rows[cid]; r.SettledAt.IsZero() {
				t.Errorf("row of %s = %+v, want a settled_at", cid, r)
			}
		}
		// The rest go out: m4 released, d3 in a digest of one, o2 too.
		c.waitOut(to, 1, time.Minute, func(o outMsg) bool { return o.MsgID == id("m4") })
		d := c.waitOut(to, 1, time.Minute, outMsg.digest)[0]
		if got := d.Header.Get(hdrDigestCount); got != "1" {
			t.Errorf("digest %s: count %q, want 1 (d2 cancelled)", d.MsgID, got)
		}
		c.waitOut(other, 2, time.Minute, nil)
		g.waitRows(to, 30*time.Second, "m4 released, d3 digested", func(rows map[string]gate.Suppression) bool {
			return settled(gate.SettleReleased, id("m4"))(rows) && settled(gate.SettleDigested, id("d3"))(rows)
		})
		all, err := c.readOut()
		if err != nil {
			t.Fatal(err)
		}
		onceEach(t, all, id("m1"), id("m4"), id("r1"), id("r2"), id("d1"), other+"-o1", other+"-o2", d.MsgID)
		for _, o := range recipientOut(all, to) {
			if slices.Contains(cancelled, o.MsgID) {
				t.Errorf("cancelled %s reached gate.out", o.MsgID)
			}
		}
		waitFor(t, 10*time.Second, func() bool { return g.summary()["c.defer"].Cancelled == 4 })
		if s := g.summary()["c.defer"]; s.Cancelled != 4 || s.Released != 2 || s.Deferred != 6 {
			t.Errorf("c.defer summary = %+v, want cancelled 4, released 2 (m4, o2), deferred 6", s)
		}
		if s := g.summary()["c.digest"]; s.Cancelled != 1 {
			t.Errorf("c.digest summary = %+v, want cancelled 1", s)
		}
		if n := g.metric(`gate_held_settled_total{scene="c.defer",settled="cancelled"}`); n != 4 {
			t.Errorf("gate_held_settled_total of c.defer cancelled: %v, want 4", n)
		}
		if n := g.metric(`gate_cancels_total{result="cancelled",source="resolves"}`); n != 2 {
			t.Errorf("gate_cancels_total resolves cancelled: %v, want 2", n)
		}
	})
}
