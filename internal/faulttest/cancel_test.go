package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/nats-io/nats.go/jetstream"
)

// cancelRules release one deferred message a second per recipient, and a
// digest of what is collected every 2s.
const cancelRules = `unknown_scene: forward
scenes:
  c.defer:
    limits: [{window: 1s, max: 1}]
    on_exceed: defer
  c.digest:
    limits: [{window: 2s, max: 1}]
    on_exceed: digest
`

// cancelKeys is how many cancel_keys one recipient's messages spread
// over; cancels name the first cancelledKeys of them only, so that the
// others are all released or digested, and the first race their releases.
const (
	cancelKeys    = 4
	cancelledKeys = 2
)

// keyedBody is m's envelope with cancel_key key.
func keyedBody(m message, key string) []byte {
	b, _ := json.Marshal(map[string]string{"id": m.ID, "scene": m.Scene, "receive_id_type": "open_id", "receive_id": m.To,
		"msg_type": "text", "content": `{"text":"fault suite"}`, "cancel_key": key})
	return b
}

// cancelAsked is a cancel a scenario sent: a key and a recipient ("" for
// every recipient).
type cancelAsked struct{ key, recipient string }

// TestCancelRacesReleases holds messages with cancel_keys on three gates
// sharing one database and sends cancels (on gate.cancel and POST
// /v1/cancel, to every gate) while the gates release them, killing gates
// with SIGKILL (3 times by default) among the releases and cancels. Once
// nothing is held, every message ended one way: forwarded at once,
// released once, carried by one digest, or cancelled (by a cancel that
// was sent for its key): never cancelled and on GATE_OUT, alone or in a
// digest, and never released twice; the summary counts the cancelled.
func TestCancelRacesReleases(t *testing.T) {
	sc := scaleFor(t, 240, 8, 3)
	rng := sc.rng()
	rs := startRedis(t)
	s := newStack(t, stackOptions{RedisURL: rs.url(), Rules: standardModel})
	if err := os.WriteFile(s.rules, []byte(cancelRules), 0o600); err != nil {
		t.Fatal(err)
	}
	gates := []*gateProc{s.startGate(nil), s.startGate(nil), s.startGate(nil)}
	msgs := workload(rng, sc.Messages, sc.Recipients, []string{"c.defer", "c.defer", "c.defer", "c.digest", "c.digest"}, 0)
	keyOf := map[string]string{}
	for i := range msgs {
		key := "k" + strconv.Itoa(rng.IntN(cancelKeys))
		keyOf[msgs[i].ID] = key
		msgs[i].Raw = keyedBody(msgs[i], key)
	}
	ctx, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	if err := s.bus.publish(ctx, msgs, nil); err != nil {
		t.Fatal(err)
	}
	var tm timing
	tm.add("drained in", s.awaitDrained(time.Minute))

	// Cancels until told to stop: a random key of a random recipient (or
	// of all), on NATS or over HTTP to a random gate. A cancel that fails
	// (a gate killed under it) may have been applied or not: both are
	// allowed, so every one sent is recorded.
	var (
		mu    sync.Mutex
		asked []cancelAsked
	)
	tos := recipients(msgs)
	done := make(chan struct{})
	var wg sync.WaitGroup
	crng := rand.New(rand.NewPCG(sc.Seed+1, sc.Seed))
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(200+crng.IntN(600)) * time.Millisecond):
			}
			a := cancelAsked{key: "k" + strconv.Itoa(crng.IntN(cancelledKeys))}
			body := fmt.Sprintf(`{"cancel_key":%q}`, a.key)
			if crng.IntN(10) > 0 {
				to := tos[crng.IntN(len(tos))]
				a.recipient = message{To: to}.recipient()
				body = fmt.Sprintf(`{"cancel_key":%q,"receive_id_type":"open_id","receive_id":%q}`, a.key, to)
			}
			mu.Lock()
			asked = append(asked, a)
			mu.Unlock()
			if crng.IntN(2) == 0 {
				_, _ = s.bus.nc.Request(natsbus.DefaultCancelSubject, []byte(body), 2*time.Second)
				continue
			}
			g := gates[crng.IntN(len(gates))]
			resp, err := httpClient.Post(g.base+"/v1/cancel", "application/json", strings.NewReader(body))
			if err == nil {
				resp.Body.Close()
			}
		}
	})
	// Kills among the releases and the cancels.
	for i := range sc.Kills {
		time.Sleep(time.Duration(1500+rng.IntN(2500)) * time.Millisecond)
		g := gates[rng.IntN(len(gates))]
		g.Kill()
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
		tm.add(fmt.Sprintf("kill %d: ready in", i+1), g.start())
	}
	g := gates[0]
	tm.add("nothing held after", s.waitHeld(g, 2*time.Minute, "nothing held", func() bool { return s.unsettled(g, len(msgs)) == 0 }))
	close(done)
	wg.Wait()
	// The last forwards of the outbox are published by the round after
	// the settlement.
	time.Sleep(2 * time.Second)
	r := s.checkCancelled(msgs, g, keyOf, asked)
	t.Logf("FAULT cancel vs release, 3 gates, kill -9 ×%d, %d cancels: in %d | forwarded at once %d, released %d, digested %d in %d digests, cancelled %d | %s",
		sc.Kills, len(asked), len(msgs), r.Forwarded, r.Released, r.Digested, r.Digests, r.Cancelled, tm)
}

// cancelReport is what a cancel scenario got out.
type cancelReport struct {
	Forwarded, Released, Digested, Digests, Cancelled int
}

// checkCancelled checks that every message ended exactly one way, and a
// cancelled one never reached GATE_OUT.
func (s *stack) checkCancelled(msgs []message, g *gateProc, keyOf map[string]string, asked []cancelAsked) cancelReport {
	t := s.t
	t.Helper()
	v := &violations{t: t}
	forwarded := map[string]int{}
	released := map[string]bool{}
	digests := map[string]int{} // copies on GATE_OUT
	digestCount := map[string]int{}
	for _, o := range s.bus.read(natsbus.StreamOut) {
		id := o.Header.Get(jetstream.MsgIDHeader)
		if o.Header.Get(natsbus.HeaderDecision) == string(gate.OutcomeDigest) {
			digests[id]++
			digestCount[id], _ = strconv.Atoi(o.Header.Get("Gate-Digest-Count"))
			continue
		}
		forwarded[id]++
		if o.Header.Get("Gate-Deferred-From") != "" {
			released[id] = true
		}
	}
	rows := map[string]gate.Suppression{}
	carried := map[string]int{}
	for _, row := range s.suppressions(g, len(msgs)) {
		rows[row.MessageID] = row
		if row.Settled == gate.SettleDigested {
			carried[row.DigestID]++
		}
	}
	for id, n := range digests {
		if n != 1 {
			v.add("digest on GATE_OUT more than once", "%s: %d times", id, n)
		}
		if carried[id] != digestCount[id] {
			v.add("digest count disagrees with the rows naming it", "%s: Gate-Digest-Count %d, %d rows", id, digestCount[id], carried[id])
		}
	}
	sent := map[cancelAsked]bool{}
	for _, a := range asked {
		sent[a] = true
	}
	var r cancelReport
	cancelled := map[string]int64{}
	for _, m := range msgs {
		row, hasRow := rows[m.ID]
		n := forwarded[m.ID]
		switch {
		case n > 1:
			v.add("forwarded twice", "%s: %d times", m.ID, n)
		case row.Settled == gate.SettleCancelled && n > 0:
			v.add("cancelled and forwarded", "%s: %+v", m.ID, row)
		case row.Settled == gate.SettleCancelled:
			if k := keyOf[m.ID]; !sent[cancelAsked{k, ""}] && !sent[cancelAsked{k, m.recipient()}] {
				v.add("cancelled by no cancel sent", "%s (cancel_key %s)", m.ID, k)
			}
			r.Cancelled++
			cancelled[m.Scene]++
		case n == 1 && !hasRow:
			r.Forwarded++
		case n == 1 && (!released[m.ID] || row.Settled != gate.SettleReleased):
			v.add("forwarded without a released row", "%s: %+v", m.ID, row)
		case n == 1:
			r.Released++
		case !hasRow:
			v.add("lost: neither forwarded nor audited", "%s", m.ID)
		case row.Settled == gate.SettleDigested:
			if digests[row.DigestID] == 0 {
				v.add("lost: digested by a digest not on GATE_OUT", "%s: %q", m.ID, row.DigestID)
			}
			r.Digested++
		default:
			v.add("an outcome the scenario never gives", "%s: %+v", m.ID, row)
		}
	}
	r.Digests = len(digests)
	for scene, want := range cancelled {
		if got := g.holdSummaryOf(scene).Cancelled; got != want {
			v.add("summary's cancelled disagrees with the rows", "%s: %d, want %d", scene, got, want)
		}
	}
	if r.Cancelled == 0 || r.Released+r.Digested == 0 {
		v.add("no race", "cancelled %d, released %d, digested %d: the scenario tested no race of cancels and releases", r.Cancelled, r.Released, r.Digested)
	}
	v.report()
	return r
}
