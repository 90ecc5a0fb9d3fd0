package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/nats-io/nats.go/jetstream"
)

// ledgerReport is what a scenario put in and got out.
type ledgerReport struct {
	In, Invalid                                     int
	Forwarded, Unchecked, Suppressed, Dropped, Dead int
	// OverLimit is how many recipients got more than a limit allows, as
	// ledgerOptions.overLimit permitted.
	OverLimit int
}

// violations collects what the ledger check found wrong, a few examples
// of each kind, and reports them once.
type violations struct {
	t     testing.TB
	count map[string]int
	ex    map[string][]string
}

func (v *violations) add(kind, format string, args ...any) {
	if v.count == nil {
		v.count, v.ex = map[string]int{}, map[string][]string{}
	}
	v.count[kind]++
	if len(v.ex[kind]) < 5 {
		v.ex[kind] = append(v.ex[kind], fmt.Sprintf(format, args...))
	}
}

func (v *violations) report() {
	v.t.Helper()
	kinds := make([]string, 0, len(v.count))
	for k := range v.count {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		v.t.Errorf("%s: %d times, e.g.\n  %s", k, v.count[k], strings.Join(v.ex[k], "\n  "))
	}
}

var idInJSON = regexp.MustCompile(`^\s*\{\s*"id"\s*:\s*"([^"\\]*)"`)

// perRecipient is what one recipient was sent and forwarded, per scene.
type perRecipient struct {
	sent, checked, unchecked map[string]int
}

// check proves the contract's bookkeeping after a scenario, reading
// GATE_IN, GATE_OUT, GATE_DEAD and, through gate g, the suppression rows
// and the summary counters:
//   - nothing is left undecided in GATE_IN;
//   - every valid message has exactly one outcome: forwarded once, one
//     suppression row, or dropped (only in a drop scene), and the summary's
//     dropped counter is total − forwarded − suppressed − invalid;
//   - every invalid message is on GATE_DEAD once, with a reason;
//   - the summary counts exactly what the streams and rows show;
//   - no recipient got more than a limit allows, and exactly as many as it
//     allows where every decision was checked against the window (see
//     checkWindows).
func (s *stack) check(msgs []message, m model, g *gateProc) ledgerReport {
	s.t.Helper()
	return s.checkWith(msgs, m, g, ledgerOptions{})
}

// ledgerOptions loosen the ledger check only where a fault is documented
// to cost exactness.
type ledgerOptions struct {
	// overLimit, when set, says by how many admissions recipient to may
	// exceed its limits: a Redis master lost without a failover takes the
	// admissions it had not replicated with it, and each lost one lets the
	// recipient have one message more (docs/operating.md, "When a dependency fails").
	overLimit func(to string) int
}

// checkWith is check, loosened as o says.
func (s *stack) checkWith(msgs []message, m model, g *gateProc, o ledgerOptions) ledgerReport {
	t := s.t
	t.Helper()
	v := &violations{t: t}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, err := s.bus.inFlight(ctx); err != nil || n != 0 {
		v.add("undecided messages left in GATE_IN", "%d (%v)", n, err)
	}

	byID := make(map[string]*message, len(msgs))
	r := ledgerReport{In: len(msgs)}
	for i := range msgs {
		byID[msgs[i].ID] = &msgs[i]
		if msgs[i].Invalid {
			r.Invalid++
		}
	}

	forwarded := map[string]bool{}
	unchecked := map[string]bool{}
	for _, o := range s.bus.read(natsbus.StreamOut) {
		var env struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(o.Data, &env); err != nil {
			v.add("GATE_OUT carries what was not published", "seq %d: %v", o.Seq, err)
			continue
		}
		msg, ok := byID[env.ID]
		switch {
		case !ok:
			v.add("forwarded an id never published", "%q", env.ID)
			continue
		case msg.Invalid:
			v.add("forwarded an invalid message", "%s", env.ID)
		case forwarded[env.ID]:
			v.add("forwarded twice", "%s", env.ID)
		}
		if h := o.Header.Get(jetstream.MsgIDHeader); h != env.ID {
			v.add("Nats-Msg-Id is not the message id", "%s: %q", env.ID, h)
		}
		forwarded[env.ID] = true
		if o.Header.Get(natsbus.HeaderUnchecked) != "" {
			unchecked[env.ID] = true
		}
	}
	r.Forwarded, r.Unchecked = len(forwarded), len(unchecked)

	suppressed := map[string]bool{}
	for _, row := range s.suppressions(g, len(msgs)) {
		msg, ok := byID[row.MessageID]
		switch {
		case !ok:
			v.add("suppression row of an id never published", "%q", row.MessageID)
			continue
		case suppressed[row.MessageID]:
			v.add("two suppression rows for one id", "%s", row.MessageID)
		case forwarded[row.MessageID]:
			v.add("both forwarded and suppressed", "%s", row.MessageID)
		case row.Recipient != msg.recipient() || row.Scene != msg.Scene:
			v.add("suppression row names the wrong recipient or scene", "%s: %s %s", row.MessageID, row.Recipient, row.Scene)
		}
		suppressed[row.MessageID] = true
	}
	r.Suppressed = len(suppressed)

	// dead counts each message's dead letters by their Nats-Msg-Id, which
	// names the GATE_IN message parked (stream, sequence, body hash): a
	// message GATE_IN stored twice (its duplicate window forgotten by a
	// nats-server killed before it synced) is two stream messages, each
	// dead-lettered once under its own name.
	dead := map[string]int{}
	deadNames := map[string]map[string]int{}
	for _, d := range s.bus.read(natsbus.StreamDead) {
		r.Dead++
		if d.Header.Get(natsbus.HeaderError) == "" {
			v.add("dead letter without Gate-Error", "seq %d", d.Seq)
		}
		id := ""
		if mm := idInJSON.FindSubmatch(d.Data); mm != nil {
			id = string(mm[1])
		}
		dead[id]++
		if deadNames[id] == nil {
			deadNames[id] = map[string]int{}
		}
		deadNames[id][d.Header.Get("Nats-Msg-Id")]++
	}

	rec := map[string]*perRecipient{}
	for i := range msgs {
		msg := &msgs[i]
		if msg.Invalid {
			if n := dead[msg.ID]; n == 0 {
				v.add("invalid message not on GATE_DEAD", "%s", msg.ID)
			}
			for name, n := range deadNames[msg.ID] {
				if n != 1 {
					v.add("dead letter on GATE_DEAD more than once", "%s (%s): %d times", msg.ID, name, n)
				}
			}
			continue
		}
		if dead[msg.ID] > 0 {
			v.add("valid message on GATE_DEAD", "%s", msg.ID)
		}
		spec, ruled := m.scene(msg.Scene)
		if !forwarded[msg.ID] && !suppressed[msg.ID] {
			if !ruled || !spec.Drop {
				v.add("lost: neither forwarded, suppressed nor in a drop scene", "%s (%s)", msg.ID, msg.Scene)
			}
			r.Dropped++
		}
		p := rec[msg.To]
		if p == nil {
			p = &perRecipient{sent: map[string]int{}, checked: map[string]int{}, unchecked: map[string]int{}}
			rec[msg.To] = p
		}
		p.sent[msg.Scene]++
		switch {
		case unchecked[msg.ID]:
			p.unchecked[msg.Scene]++
		case forwarded[msg.ID]:
			p.checked[msg.Scene]++
		}
	}
	r.OverLimit = s.checkWindows(v, m, rec, o)

	var sum httpapi.Summary
	g.getJSON("/v1/reports/summary", nil, &sum)
	tot := sum.Total
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"received", tot.Received, int64(r.In)},
		{"forwarded", tot.Forwarded, int64(r.Forwarded)},
		{"suppressed", tot.Suppressed, int64(r.Suppressed)},
		{"invalid", tot.Invalid, int64(r.Invalid)},
		{"dropped (total − forwarded − suppressed − invalid)", tot.Dropped, int64(r.Dropped)},
		{"forwarded_unchecked", tot.ForwardedUnchecked, int64(r.Unchecked)},
	} {
		if c.got != c.want {
			v.add("summary counter disagrees with the streams and rows", "%s: got %d, want %d", c.name, c.got, c.want)
		}
	}
	v.report()
	return r
}

// checkWindows proves the limits per recipient and returns how many
// recipients got more than a limit allows (only as o permits).
//
// Every count is held to the upper bounds. A forward made without a window
// check (fail open) may still have been recorded in the window (the store
// wrote it but its answer was lost), so a scene with such a forward is held
// to the upper bounds only, and so is a recipient's total across scenes.
// Every other scene is exact: what its retried messages found already
// recorded was their own admission. Exact per scene, that is, unless the
// recipient cap may have bound, which decides which scene's message came
// first; then only the recipient's total is exact, and only when nothing of
// it failed open.
func (s *stack) checkWindows(v *violations, m model, rec map[string]*perRecipient, o ledgerOptions) (overLimit int) {
	capMax := tightest(s.t, m.Caps)
	type sceneCount struct {
		name           string
		got, max, sent int
	}
	for to, p := range rec {
		slack := 0
		if o.overLimit != nil {
			slack = o.overLimit(to)
		}
		total, want, failedOpen, over := 0, 0, 0, false
		var exact []sceneCount
		for scene, sent := range p.sent {
			spec, ruled := m.scene(scene)
			got, unchecked := p.checked[scene], p.unchecked[scene]
			failedOpen += unchecked
			if !ruled {
				if got+unchecked != sent {
					v.add("unknown-scene message not forwarded", "%s %s: %d of %d", to, scene, got, sent)
				}
				continue
			}
			max := tightest(s.t, spec.Limits)
			if got > max+slack {
				v.add("recipient got more than the scene allows", "%s %s: %d > %d", to, scene, got, max)
			}
			over = over || got > max
			total += got
			want += min(max, sent-unchecked)
			if unchecked == 0 {
				exact = append(exact, sceneCount{scene, got, max, sent})
			}
		}
		if capMax > 0 {
			if total > capMax+slack {
				v.add("recipient got more than the cap allows", "%s: %d > %d", to, total, capMax)
			}
			over = over || total > capMax
			want = min(want, capMax)
		}
		if over {
			overLimit++
		}
		// A lost admission only ever lets more in: want ≤ total ≤ want+slack.
		if failedOpen == 0 && (total < want || total > want+slack) {
			v.add("recipient admitted a different number than the rules allow", "%s: %d, want %d (%v)", to, total, want, p.sent)
		}
		if slack > 0 || (capMax > 0 && total+failedOpen >= capMax) {
			continue
		}
		for _, c := range exact {
			if want := min(c.max, c.sent); c.got != want {
				v.add("scene admitted a different number than its limit allows", "%s %s: %d, want %d of %d sent", to, c.name, c.got, want, c.sent)
			}
		}
	}
	return overLimit
}

// suppressions reads every suppression row through the API, page by page.
func (s *stack) suppressions(g *gateProc, most int) []gate.Suppression {
	s.t.Helper()
	var rows []gate.Suppression
	q := url.Values{"limit": {"1000"}}
	for range most/1000 + 2 {
		var page gate.SuppressionPage
		g.getJSON("/v1/suppressions", q, &page)
		rows = append(rows, page.Items...)
		if page.NextCursor == "" {
			return rows
		}
		q.Set("cursor", page.NextCursor)
	}
	s.t.Fatalf("more than %d suppression rows", most)
	return nil
}
