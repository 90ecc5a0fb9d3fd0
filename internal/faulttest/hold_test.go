package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/nats-io/nats.go/jetstream"
)

// holdRules hold what is over their limits instead of suppressing it:
// h.defer releases one message a second per recipient, h.fallback holds
// its messages past a max_defer of 3s (its window of an hour never
// reopens), so they fall back to suppress, and the two digest scenes share
// one digest per recipient every 2s.
const holdRules = `unknown_scene: forward
scenes:
  h.defer:
    limits: [{window: 1s, max: 1}]
    on_exceed: defer
  h.fallback:
    limits: [{window: 1h, max: 1}]
    on_exceed: defer
    max_defer: 3s
    defer_fallback: suppress
  h.digest_a:
    limits: [{window: 2s, max: 1}]
    on_exceed: digest
    digest_group: hd
  h.digest_b:
    limits: [{window: 2s, max: 1}]
    on_exceed: digest
    digest_group: hd
`

// holdMix is the scenes one recipient gets, ten messages in all (as many
// as standardMix, which scaleFor rounds to).
var holdMix = []string{
	"h.defer", "h.defer", "h.defer", "h.defer",
	"h.fallback", "h.fallback",
	"h.digest_a", "h.digest_a", "h.digest_b", "h.digest_b",
}

// holdSummary reads the summary's totals through g.
func (g *gateProc) holdSummary() gate.SceneSummary {
	g.t.Helper()
	var sum httpapi.Summary
	g.getJSON("/v1/reports/summary", nil, &sum)
	return sum.Total
}

// TestHoldKilledMidStream publishes a few hundred messages to a few
// recipients in scenes that defer and digest what is over their limits,
// kills the gate with SIGKILL (4 times by default) once while messages are
// decided and then at random points of the releases, and restarts Redis
// at another such point. Once nothing is held, every message has exactly
// one outcome: forwarded at once, released once (with Gate-Deferred-From),
// fallen back (its row says so), or carried by exactly one digest that is
// on GATE_OUT once; and the counters agree.
func TestHoldKilledMidStream(t *testing.T) {
	sc := scaleFor(t, 400, 8, 4)
	rng := sc.rng()
	rs := startRedis(t)
	s := newStack(t, stackOptions{RedisURL: rs.url(), Rules: standardModel})
	if err := os.WriteFile(s.rules, []byte(holdRules), 0o600); err != nil {
		t.Fatal(err)
	}
	g := s.startGate(nil)
	msgs := workload(rng, sc.Messages, sc.Recipients, holdMix, 0)
	var tm timing
	restart := func(label string) {
		t.Helper()
		g.Kill()
		time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
		tm.add(label+": ready in", g.start())
	}

	// Waves half a second apart, so that decisions and releases
	// interleave; the first kill lands among the decisions.
	waves := make([][]message, 8)
	for i := range waves {
		waves[i] = msgs[i*len(msgs)/len(waves) : (i+1)*len(msgs)/len(waves)]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	published := make(chan error, 1)
	go func() {
		for _, w := range waves {
			if err := s.bus.publish(ctx, w, nil); err != nil {
				published <- err
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
		published <- nil
	}()
	at := int64(len(msgs)/4 + rng.IntN(len(msgs)/2))
	waitUntil(t, time.Minute, fmt.Sprintf("%d messages decided", at), func() bool { return g.received() >= at })
	restart(fmt.Sprintf("kill 1 at %d decided", at))
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	tm.add("drained in", s.awaitDrained(time.Minute))

	// The releases: the other kills and the Redis restart, each at a
	// random point of them. Of h.defer's deferred messages every one is
	// released in the end (h.fallback's fall back instead).
	deferred := g.holdSummaryOf("h.defer").Deferred
	if deferred < int64(count(msgs, "h.defer")/2) {
		t.Fatalf("only %d of %d messages of h.defer deferred: the scenario holds too little to test", deferred, count(msgs, "h.defer"))
	}
	nothingHeld := func() bool {
		sum := g.holdSummary()
		return sum.Deferred == sum.Released+sum.FellBack && s.unsettled(g, len(msgs)) == 0
	}
	// One point for the Redis restart and one for each kill but the first.
	points := make([]int64, sc.Kills)
	for i := range points {
		points[i] = int64((0.1 + 0.7*rng.Float64()) * float64(deferred))
	}
	slices.Sort(points)
	redisAt := rng.IntN(len(points))
	for i, at := range points {
		s.waitHeld(g, time.Minute, fmt.Sprintf("%d released", at), func() bool { return g.holdSummary().Released >= at || nothingHeld() })
		switch {
		case i == redisAt:
			rs.Kill()
			time.Sleep(500 * time.Millisecond)
			rs.start()
			tm = append(tm, fmt.Sprintf("redis restarted at %d released", at))
		default:
			restart(fmt.Sprintf("kill at %d released", at))
		}
	}
	tm.add("nothing held after", s.waitHeld(g, 90*time.Second, "nothing held", nothingHeld))

	r := s.checkHeld(msgs, g)
	t.Logf("FAULT hold (defer, digest) kill -9 ×%d and a redis restart: in %d | forwarded at once %d, released %d, fell back %d, digested %d in %d digests | %s",
		sc.Kills, len(msgs), r.Forwarded, r.Released, r.FellBack, r.Digested, r.Digests, tm)
}

// holdSummaryOf reads the summary of one scene through g.
func (g *gateProc) holdSummaryOf(scene string) gate.SceneSummary {
	g.t.Helper()
	var sum httpapi.Summary
	g.getJSON("/v1/reports/summary", nil, &sum)
	for _, sc := range sum.Scenes {
		if sc.Scene == scene {
			return sc
		}
	}
	return gate.SceneSummary{Scene: scene}
}

// waitHeld is waitUntil for the held messages: on a timeout it says what
// the summary and the rows show. It returns how long it waited.
func (s *stack) waitHeld(g *gateProc, d time.Duration, what string, cond func() bool) time.Duration {
	s.t.Helper()
	start := time.Now()
	for ; !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > d {
			var sum httpapi.Summary
			g.getJSON("/v1/reports/summary", nil, &sum)
			s.t.Fatalf("%s: not within %s; summary %+v, %d rows of held messages unsettled", what, d, sum.Scenes, s.unsettled(g, 100000))
		}
	}
	return time.Since(start)
}

// unsettled is how many audit rows of held messages are not settled yet.
func (s *stack) unsettled(g *gateProc, most int) int {
	n := 0
	for _, row := range s.suppressions(g, most) {
		if row.HeldAs != "" && row.Settled == "" {
			n++
		}
	}
	return n
}

// holdReport is what a hold scenario got out.
type holdReport struct {
	Forwarded, Released, FellBack, Digested, Digests int
}

var receiveIDInJSON = regexp.MustCompile(`"receive_id"\s*:\s*"([^"\\]*)"`)

// checkHeld is the ledger check of a scenario whose scenes hold messages
// (holdRules), once nothing is held:
//   - nothing is left in GATE_IN;
//   - every message has exactly one outcome: forwarded at once (no audit
//     row), released once (Gate-Deferred-From, its row settled released),
//     fallen back (its row settled fell_back, with fallback suppress), or
//     digested (its row names a digest that is on GATE_OUT exactly once);
//   - nothing is forwarded twice, and each digest counts exactly the rows
//     that name it, all of its own recipient;
//   - h.defer and the digest scenes lose nothing: every message of them is
//     forwarded, released or digested; h.fallback forwards one message per
//     recipient (its window of an hour binds) and every other falls back;
//   - the summary's counters are exactly what the streams and rows show.
func (s *stack) checkHeld(msgs []message, g *gateProc) holdReport {
	t := s.t
	t.Helper()
	v := &violations{t: t}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := s.bus.inFlight(ctx); err != nil || n != 0 {
		v.add("undecided messages left in GATE_IN", "%d (%v)", n, err)
	}
	byID := make(map[string]*message, len(msgs))
	for i := range msgs {
		byID[msgs[i].ID] = &msgs[i]
	}

	type digest struct {
		count     int // Gate-Digest-Count
		recipient string
		seen      int // copies on GATE_OUT
	}
	forwarded := map[string]int{}
	released := map[string]bool{}
	digests := map[string]*digest{}
	for _, o := range s.bus.read(natsbus.StreamOut) {
		id := o.Header.Get(jetstream.MsgIDHeader)
		if o.Header.Get(natsbus.HeaderDecision) == string(gate.OutcomeDigest) {
			d := digests[id]
			if d == nil {
				d = &digest{}
				digests[id] = d
			}
			d.seen++
			n, err := strconv.Atoi(o.Header.Get("Gate-Digest-Count"))
			if err != nil || n < 1 {
				v.add("digest without a count", "%s: %q", id, o.Header.Get("Gate-Digest-Count"))
			}
			d.count = n
			if mm := receiveIDInJSON.FindSubmatch(o.Data); mm != nil {
				d.recipient = "open_id:" + string(mm[1])
			}
			continue
		}
		var env struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(o.Data, &env); err != nil || byID[env.ID] == nil {
			v.add("GATE_OUT carries what was not published", "seq %d: %q %v", o.Seq, env.ID, err)
			continue
		}
		if id != env.ID {
			v.add("Nats-Msg-Id is not the message id", "%s: %q", env.ID, id)
		}
		forwarded[env.ID]++
		if from := o.Header.Get("Gate-Deferred-From"); from != "" {
			if _, err := time.Parse(time.RFC3339Nano, from); err != nil {
				v.add("Gate-Deferred-From is not an RFC 3339 time", "%s: %q", env.ID, from)
			}
			released[env.ID] = true
		}
	}
	for id, d := range digests {
		if d.seen != 1 {
			v.add("digest on GATE_OUT more than once", "%s: %d times", id, d.seen)
		}
	}

	rows := map[string]gate.Suppression{}
	carried := map[string]int{}
	for _, row := range s.suppressions(g, len(msgs)) {
		m := byID[row.MessageID]
		switch {
		case m == nil:
			v.add("audit row of an id never published", "%q", row.MessageID)
			continue
		case rows[row.MessageID].MessageID != "":
			v.add("two audit rows for one id", "%s", row.MessageID)
		case row.Recipient != m.recipient() || row.Scene != m.Scene:
			v.add("audit row names the wrong recipient or scene", "%s: %s %s", row.MessageID, row.Recipient, row.Scene)
		}
		rows[row.MessageID] = row
		if row.Settled == gate.SettleDigested {
			carried[row.DigestID]++
			if d := digests[row.DigestID]; d != nil && d.recipient != "" && d.recipient != row.Recipient {
				v.add("digest carries another recipient's message", "%s in %s (to %s)", row.MessageID, row.DigestID, d.recipient)
			}
		}
	}
	for id, d := range digests {
		if carried[id] != d.count {
			v.add("digest count disagrees with the rows naming it", "%s: Gate-Digest-Count %d, %d rows", id, d.count, carried[id])
		}
	}

	var r holdReport
	direct := map[string]int{}   // scene: forwarded at once
	fellBack := map[string]int{} // recipient: h.fallback messages fallen back
	perScene := map[string]*gate.SceneSummary{}
	for _, sc := range []string{"h.defer", "h.fallback", "h.digest_a", "h.digest_b"} {
		perScene[sc] = &gate.SceneSummary{Scene: sc}
	}
	for i := range msgs {
		m := &msgs[i]
		row, hasRow := rows[m.ID]
		n := forwarded[m.ID]
		want := perScene[m.Scene]
		want.Received++
		switch {
		case n > 1:
			v.add("forwarded twice", "%s: %d times", m.ID, n)
		case n == 1 && !released[m.ID] && !hasRow:
			r.Forwarded++
			want.Forwarded++
			direct[m.Scene+" "+m.To]++
		case n == 1 && !released[m.ID]:
			v.add("forwarded at once and audited", "%s: %+v", m.ID, row)
		case n == 1 && (row.HeldAs != gate.HoldDefer || row.Settled != gate.SettleReleased):
			v.add("released without a released row", "%s: %+v", m.ID, row)
		case n == 1:
			r.Released++
			want.Deferred++
			want.Released++
		case !hasRow:
			v.add("lost: neither forwarded nor audited", "%s (%s)", m.ID, m.Scene)
		case row.Settled == "":
			v.add("still held", "%s: %+v", m.ID, row)
		case row.HeldAs == gate.HoldDefer && row.Settled == gate.SettleFellBack:
			if m.Scene != "h.fallback" || row.Fallback != gate.ActionSuppress {
				v.add("fell back where it must not", "%s (%s): %+v", m.ID, m.Scene, row)
			}
			r.FellBack++
			want.Deferred++
			want.FellBack++
			fellBack[m.To]++
		case row.HeldAs == gate.HoldDigest && row.Settled == gate.SettleDigested:
			if d := digests[row.DigestID]; d == nil {
				v.add("lost: digested by a digest not on GATE_OUT", "%s: %q", m.ID, row.DigestID)
			}
			r.Digested++
			want.Digested++
		default:
			v.add("an outcome the hold scenes never give", "%s (%s): %+v", m.ID, m.Scene, row)
		}
	}
	r.Digests = len(digests)
	for _, to := range recipients(msgs) {
		if n := direct["h.fallback "+to]; n != 1 {
			v.add("h.fallback forwarded other than one per recipient", "%s: %d", to, n)
		}
	}

	var sum httpapi.Summary
	g.getJSON("/v1/reports/summary", nil, &sum)
	got := map[string]gate.SceneSummary{}
	for _, sc := range sum.Scenes {
		got[sc.Scene] = sc
	}
	for name, want := range perScene {
		if have := got[name]; have != *want {
			v.add("summary counters disagree with the streams and rows", "%s: got %+v, want %+v", name, have, *want)
		}
	}
	v.report()
	return r
}
