package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of held messages the contract names (issue 11).
const (
	hdrDeferredFrom = "Gate-Deferred-From"
	hdrDigestCount  = "Gate-Digest-Count"
	hdrTZ           = "Gate-TZ"
)

// holdMsg is an envelope of the hold tests: msg with a time zone.
type holdMsg struct {
	ID, Scene, To, Priority, TZ string
}

func (m holdMsg) json() []byte {
	env := map[string]any{
		"id": m.ID, "scene": m.Scene, "receive_id_type": "open_id", "receive_id": m.To,
		"msg_type": "text", "content": `{"text":"held ` + m.ID + `"}`,
	}
	if m.Priority != "" {
		env["priority"] = m.Priority
	}
	if m.TZ != "" {
		env["tz"] = m.TZ
	}
	b, _ := json.Marshal(env)
	return b
}

// sendHeld publishes ms in order and waits until GATE_IN is empty: a held
// message is acked once it is held durably.
func (c *client) sendHeld(ms ...holdMsg) {
	c.t.Helper()
	data := make([][]byte, len(ms))
	for i, m := range ms {
		data[i] = m.json()
	}
	c.publish(data...)
}

// outMsg is one message on GATE_OUT.
type outMsg struct {
	MsgID     string // Nats-Msg-Id
	Time      time.Time
	Header    nats.Header
	ID        string // the envelope's id, if any
	ReceiveID string
	MsgType   string
	Data      []byte
}

func (o outMsg) digest() bool {
	return o.Header.Get(natsbus.HeaderDecision) == string(gate.OutcomeDigest)
}

// readOut reads GATE_OUT, or fails with an error while NATS is away (a
// killed gate took the embedded server with it).
func (c *client) readOut() ([]outMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, natsbus.StreamOut)
	if err != nil {
		return nil, err
	}
	st := s.CachedInfo().State
	var out []outMsg
	for seq := st.FirstSeq; seq <= st.LastSeq && st.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var env struct {
			ID        string `json:"id"`
			ReceiveID string `json:"receive_id"`
			MsgType   string `json:"msg_type"`
		}
		if err := json.Unmarshal(m.Data, &env); err != nil {
			c.t.Fatalf("gate.out seq %d carries non-JSON: %v", seq, err)
		}
		out = append(out, outMsg{MsgID: m.Header.Get(jetstream.MsgIDHeader), Time: m.Time, Header: m.Header,
			ID: env.ID, ReceiveID: env.ReceiveID, MsgType: env.MsgType, Data: m.Data})
	}
	return out, nil
}

// outFor returns what GATE_OUT holds for recipient to, in order.
func (c *client) outFor(to string) []outMsg {
	c.t.Helper()
	all, err := c.readOut()
	if err != nil {
		c.t.Fatalf("read GATE_OUT: %v", err)
	}
	return recipientOut(all, to)
}

func recipientOut(all []outMsg, to string) []outMsg {
	var out []outMsg
	for _, o := range all {
		if o.ReceiveID == to {
			out = append(out, o)
		}
	}
	return out
}

// waitOut waits until GATE_OUT holds at least n messages for to that match
// keep (nil: every one), and returns them.
func (c *client) waitOut(to string, n int, d time.Duration, keep func(outMsg) bool) []outMsg {
	c.t.Helper()
	var got []outMsg
	deadline := time.Now().Add(d)
	for {
		all, err := c.readOut()
		if err == nil {
			got = got[:0]
			for _, o := range recipientOut(all, to) {
				if keep == nil || keep(o) {
					got = append(got, o)
				}
			}
			if len(got) >= n {
				return got
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: %d of %d messages on gate.out within %s (last error %v): %v", to, len(got), n, d, err, msgIDs(got))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func msgIDs(out []outMsg) []string {
	ids := make([]string, len(out))
	for i, o := range out {
		ids[i] = cmpOr(o.ID, o.MsgID)
	}
	return ids
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// onceEach fails unless every id is on GATE_OUT exactly once, counted by
// Nats-Msg-Id over the whole stream.
//
// It cannot see a doubled release: GATE_OUT drops a second publish of a
// Nats-Msg-Id within its duplicate window, so a message released twice
// within it is on the stream once. The PostgreSQL settle tests of
// internal/gormstore (TestPostgresSettleConcurrent,
// TestPostgresHoldCommitsAndSettlesAtOnce) are what guard against that.
func onceEach(t testing.TB, all []outMsg, ids ...string) {
	t.Helper()
	n := map[string]int{}
	for _, o := range all {
		n[o.MsgID]++
	}
	for _, id := range ids {
		if n[id] != 1 {
			t.Errorf("%s is on gate.out %d times, want once", id, n[id])
		}
	}
}

// deferredFrom reads the Gate-Deferred-From header of o.
func deferredFrom(t testing.TB, o outMsg) time.Time {
	t.Helper()
	v := o.Header.Get(hdrDeferredFrom)
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.Fatalf("%s: %s %q is not an RFC 3339 time: %v", o.MsgID, hdrDeferredFrom, v, err)
	}
	return at
}

// rows returns the audit rows of recipient to by message id.
func (g *gateProc) rows(to string) map[string]gate.Suppression {
	g.t.Helper()
	out := map[string]gate.Suppression{}
	for _, r := range g.suppressions(url.Values{"recipient": {"open_id:" + to}, "limit": {"1000"}}) {
		if _, dup := out[r.MessageID]; dup {
			g.t.Errorf("two audit rows for %s", r.MessageID)
		}
		out[r.MessageID] = r
	}
	return out
}

// waitRows waits until cond holds of recipient to's audit rows and returns
// them.
func (g *gateProc) waitRows(to string, d time.Duration, what string, cond func(map[string]gate.Suppression) bool) map[string]gate.Suppression {
	g.t.Helper()
	var rows map[string]gate.Suppression
	deadline := time.Now().Add(d)
	for {
		rows = g.rows(to)
		if cond(rows) {
			return rows
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("%s: not within %s; rows: %+v", what, d, rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// held reports whether every id has a row held as kind and not yet settled.
func held(kind gate.HoldKind, ids ...string) func(map[string]gate.Suppression) bool {
	return func(rows map[string]gate.Suppression) bool {
		for _, id := range ids {
			if r, ok := rows[id]; !ok || r.HeldAs != kind || r.Settled != "" {
				return false
			}
		}
		return true
	}
}

// settled reports whether every id has a row settled as kind.
func settled(kind gate.SettleKind, ids ...string) func(map[string]gate.Suppression) bool {
	return func(rows map[string]gate.Suppression) bool {
		for _, id := range ids {
			if rows[id].Settled != kind {
				return false
			}
		}
		return true
	}
}

// series is n messages of one (recipient, scene), numbered from 1.
func series(to, scene string, n int) []holdMsg {
	ms := make([]holdMsg, n)
	for i := range ms {
		ms[i] = holdMsg{ID: fmt.Sprintf("%s-%d", to, i+1), Scene: scene, To: to}
	}
	return ms
}

// releasedThree checks what the summary says of three messages of scene,
// the first admitted and the others deferred, once both are released.
func releasedThree(t *testing.T, g *gateProc, scene string) {
	t.Helper()
	waitFor(t, 10*time.Second, func() bool { return g.summary()[scene].Released == 2 })
	if s := g.summary()[scene]; s.Received != 3 || s.Forwarded != 1 || s.Deferred != 2 || s.Released != 2 || s.FellBack != 0 || s.Suppressed != 0 {
		t.Errorf("%s summary = %+v, want received 3, forwarded 1, deferred 2, released 2", scene, s)
	}
}

// forEachStack runs f as a parallel subtest on both stacks.
func forEachStack(t *testing.T, f func(t *testing.T, kind stack)) {
	for _, kind := range []stack{stackReal, stackEmbedded} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

const deferRules = `
scenes:
  h.defer:
    limits: [{window: 3s, max: 1}]
    on_exceed: defer
  h.kill:
    limits: [{window: 5s, max: 1}]
    on_exceed: defer
  h.fb_suppress:
    limits: [{window: 30s, max: 1}]
    on_exceed: defer
    max_defer: 2s
    defer_fallback: suppress
  h.fb_drop:
    limits: [{window: 30s, max: 1}]
    on_exceed: defer
    max_defer: 2s
    defer_fallback: drop
  h.fb_digest:
    limits: [{window: 4s, max: 1}]
    on_exceed: defer
    max_defer: 1s
    defer_fallback: digest
`

// TestDeferReleasesInOrder: three messages of one (recipient, scene) with
// {window: 3s, max: 1} come out at about 0 s, 3 s and 6 s, in order, once
// each, the later two with Gate-Deferred-From; the summary counts them.
func TestDeferReleasesInOrder(t *testing.T) {
	t.Parallel()
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, deferRules)
		g := e.start(nil)
		c := e.client()
		to := testenv.Unique("defer")
		ms := series(to, "h.defer", 3)
		t0 := time.Now()
		c.sendHeld(ms...)
		out := c.waitOut(to, 3, time.Minute, nil)
		if got, want := msgIDs(out), []string{ms[0].ID, ms[1].ID, ms[2].ID}; !slices.Equal(got, want) {
			t.Fatalf("gate.out for %s: %v, want %v in that order", to, got, want)
		}
		all, err := c.readOut()
		if err != nil {
			t.Fatal(err)
		}
		onceEach(t, all, ms[0].ID, ms[1].ID, ms[2].ID)
		if v := out[0].Header.Get(hdrDeferredFrom); v != "" {
			t.Errorf("the admitted first message carries %s: %q", hdrDeferredFrom, v)
		}
		for i := 1; i < 3; i++ {
			from := deferredFrom(t, out[i])
			if from.Before(t0.Add(-time.Second)) || from.After(out[i].Time) {
				t.Errorf("%s: %s %s, want between the publish (%s) and its release (%s)", out[i].MsgID, hdrDeferredFrom, from, t0, out[i].Time)
			}
			// Each release waits for the one before it to leave the 3 s
			// window; a second of slack covers the forward's own latency.
			if gap := out[i].Time.Sub(out[i-1].Time); gap < 2*time.Second {
				t.Errorf("%s came out %s after %s, want about the 3s window", out[i].MsgID, gap, out[i-1].MsgID)
			}
			if got := out[i].Header.Get(natsbus.HeaderDecision); got != string(gate.OutcomeForward) {
				t.Errorf("%s: %s %q, want forward", out[i].MsgID, natsbus.HeaderDecision, got)
			}
			if !strings.Contains(string(out[i].Data), `"held `+out[i].MsgID) {
				t.Errorf("%s was not released with its original bytes: %s", out[i].MsgID, out[i].Data)
			}
		}
		rows := g.waitRows(to, 30*time.Second, "rows of the released messages", settled(gate.SettleReleased, ms[1].ID, ms[2].ID))
		if _, ok := rows[ms[0].ID]; ok {
			t.Errorf("the admitted %s has an audit row", ms[0].ID)
		}
		for _, m := range ms[1:] {
			r := rows[m.ID]
			if r.HeldAs != gate.HoldDefer || r.SettledAt.IsZero() || r.Scene != "h.defer" {
				t.Errorf("row of %s = %+v, want held_as defer, settled released with a time", m.ID, r)
			}
		}
		releasedThree(t, g, "h.defer")
	})
}

// TestDeferSurvivesKill: kill -9 of the gate while two messages are held;
// started again, it releases both, once each.
func TestDeferSurvivesKill(t *testing.T) {
	t.Parallel()
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, deferRules)
		g := e.startChild(nil)
		c := e.client()
		to := testenv.Unique("kill")
		ms := series(to, "h.kill", 3)
		c.sendHeld(ms...)
		g.waitRows(to, 30*time.Second, "two messages held", held(gate.HoldDefer, ms[1].ID, ms[2].ID))
		g.kill()
		time.Sleep(300 * time.Millisecond)
		g.start()
		out := c.waitOut(to, 3, 2*time.Minute, nil)
		if got, want := msgIDs(out), []string{ms[0].ID, ms[1].ID, ms[2].ID}; !slices.Equal(got, want) {
			t.Fatalf("gate.out for %s after kill -9: %v, want %v", to, got, want)
		}
		g.waitRows(to, 30*time.Second, "rows of the released messages", settled(gate.SettleReleased, ms[1].ID, ms[2].ID))
		// A release the killed gate published but had not settled is
		// published again: GATE_OUT's duplicate window must absorb it, and
		// the settlement counts once.
		time.Sleep(time.Second)
		all, err := c.readOut()
		if err != nil {
			t.Fatal(err)
		}
		onceEach(t, all, ms[0].ID, ms[1].ID, ms[2].ID)
		for _, o := range out[1:] {
			deferredFrom(t, o)
		}
		releasedThree(t, g.gateProc, "h.kill")
	})
}

// TestDeferSharedByGates: three gates on one Redis and one PostgreSQL
// release each deferred message exactly once, in the order they arrived.
// (Which message is admitted at once depends on which gate decides first:
// the three of one recipient may be in three gates' batches.)
func TestDeferSharedByGates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stackReal, deferRules)
	gates := []*gateProc{e.start(nil), e.start(nil), e.start(nil)}
	c := e.client()
	var tos []string
	var all []holdMsg
	for range 4 {
		to := testenv.Unique("shared")
		tos = append(tos, to)
		all = append(all, series(to, "h.defer", 3)...)
	}
	c.sendHeld(all...)
	for _, to := range tos {
		out := c.waitOut(to, 3, time.Minute, nil)
		var released []string
		for _, o := range out {
			if o.Header.Get(hdrDeferredFrom) != "" {
				released = append(released, o.MsgID)
			}
		}
		if len(released) != 2 || !slices.IsSorted(released) {
			t.Errorf("gate.out for %s: %v, of which released %v; want two released, in the order they arrived", to, msgIDs(out), released)
		}
	}
	waitFor(t, 10*time.Second, func() bool { return gates[1].summary()["h.defer"].Released == 8 })
	out, err := c.readOut()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(all))
	for i, m := range all {
		ids[i] = m.ID
	}
	onceEach(t, out, ids...)
	if s := gates[2].summary()["h.defer"]; s.Received != 12 || s.Forwarded != 4 || s.Deferred != 8 || s.Released != 8 {
		t.Errorf("h.defer summary = %+v, want received 12, forwarded 4, deferred 8, released 8", s)
	}
}

// TestDeferFallback: a message held past max_defer gets defer_fallback
// then, even when its window reopens only later, and its audit row and the
// summary say so.
func TestDeferFallback(t *testing.T) {
	t.Parallel()
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, deferRules)
		g := e.start(nil)
		c := e.client()
		for _, fb := range []gate.Action{gate.ActionSuppress, gate.ActionDrop} {
			t.Run(string(fb), func(t *testing.T) {
				scene := "h.fb_" + string(fb)
				to := testenv.Unique("fallback")
				m1, m2 := holdMsg{ID: to + "-1", Scene: scene, To: to}, holdMsg{ID: to + "-2", Scene: scene, To: to}
				c.sendHeld(m1, m2)
				rows := g.waitRows(to, time.Minute, "the held message fell back", settled(gate.SettleFellBack, m2.ID))
				if r := rows[m2.ID]; r.HeldAs != gate.HoldDefer || r.Fallback != fb || r.SettledAt.IsZero() {
					t.Errorf("row of %s = %+v, want held_as defer, settled fell_back with fallback %s", m2.ID, r, fb)
				}
				// max_defer is the longest hold: the message falls back about
				// 2s after it was held, long before its 30s window reopens.
				if r := rows[m2.ID]; !r.SettledAt.IsZero() {
					if held := r.SettledAt.Sub(r.DecidedAt); held < 1500*time.Millisecond || held > 20*time.Second {
						t.Errorf("%s fell back %s after it was held, want about its max_defer of 2s (and not at the window's reopening, 30s)", m2.ID, held)
					}
				}
				if got := msgIDs(c.outFor(to)); !slices.Equal(got, []string{m1.ID}) {
					t.Errorf("gate.out for %s: %v, want only %s", to, got, m1.ID)
				}
				waitFor(t, 10*time.Second, func() bool { return g.summary()[scene].FellBack == 1 })
				if s := g.summary()[scene]; s.Received != 2 || s.Forwarded != 1 || s.Deferred != 1 || s.FellBack != 1 || s.Released != 0 {
					t.Errorf("%s summary = %+v, want received 2, forwarded 1, deferred 1, fell_back 1", scene, s)
				}
			})
		}
		t.Run("digest", func(t *testing.T) {
			// Past max_defer the message moves to its scene's digest, which
			// goes out when the window reopens.
			to := testenv.Unique("fallback")
			m1, m2 := holdMsg{ID: to + "-1", Scene: "h.fb_digest", To: to}, holdMsg{ID: to + "-2", Scene: "h.fb_digest", To: to}
			c.sendHeld(m1, m2)
			digests := c.waitOut(to, 1, time.Minute, outMsg.digest)
			if n := digests[0].Header.Get(hdrDigestCount); n != "1" {
				t.Errorf("digest of the fallen-back message: %s %q, want 1", hdrDigestCount, n)
			}
			rows := g.waitRows(to, 30*time.Second, "the fallen-back message digested", settled(gate.SettleDigested, m2.ID))
			if r := rows[m2.ID]; r.DigestID != digests[0].MsgID {
				t.Errorf("row of %s names digest %q, want %q (the digest's Nats-Msg-Id)", m2.ID, r.DigestID, digests[0].MsgID)
			}
			all, err := c.readOut()
			if err != nil {
				t.Fatal(err)
			}
			onceEach(t, all, m1.ID, digests[0].MsgID)
			for _, o := range recipientOut(all, to) {
				if o.MsgID == m2.ID {
					t.Errorf("%s was forwarded on its own after it fell back to the digest", m2.ID)
				}
			}
		})
	})
}

const digestRules = `
scenes:
  h.digest:
    limits: [{window: 3s, max: 1}]
    on_exceed: digest
  h.group_a:
    limits: [{window: 3s, max: 1}]
    on_exceed: digest
    digest_group: grp
  h.group_b:
    limits: [{window: 3s, max: 1}]
    on_exceed: digest
    digest_group: grp
`

// TestDigest: over-limit messages are collected and forwarded as one
// summary when the window reopens; the summary takes the slot; scenes of
// one digest_group share one digest.
func TestDigest(t *testing.T) {
	t.Parallel()
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, digestRules)
		g := e.start(nil)
		c := e.client()
		t.Run("three held messages, one summary", func(t *testing.T) {
			t.Parallel()
			to := testenv.Unique("digest")
			ms := series(to, "h.digest", 4)
			c.sendHeld(ms...)
			g.waitRows(to, 30*time.Second, "three messages collected", held(gate.HoldDigest, ms[1].ID, ms[2].ID, ms[3].ID))
			d := checkDigest(t, c, to, 3, "h.digest")
			rows := g.waitRows(to, 30*time.Second, "rows name the digest", settled(gate.SettleDigested, ms[1].ID, ms[2].ID, ms[3].ID))
			for _, m := range ms[1:] {
				if r := rows[m.ID]; r.DigestID != d.MsgID || r.SettledAt.IsZero() {
					t.Errorf("row of %s = %+v, want digested by %q", m.ID, r, d.MsgID)
				}
			}
			// The digest took the reopened slot: a message decided before the
			// window reopens again is held by the window, and goes out in
			// the next digest. (A second of slack for the digest's own
			// forward: its admission came before its stream time.)
			m5 := holdMsg{ID: to + "-5", Scene: "h.digest", To: to}
			c.sendHeld(m5)
			if time.Now().After(d.Time.Add(2 * time.Second)) {
				t.Logf("the machine was too slow to decide %s within the window the digest took: not checked", m5.ID)
				return
			}
			if r := g.rows(to)[m5.ID]; r.HeldAs != gate.HoldDigest || r.Reason != gate.ReasonLimit {
				t.Errorf("row of %s sent right after the digest = %+v, want it collected by the limit (the digest holds the slot)", m5.ID, r)
			}
			ds := c.waitOut(to, 2, time.Minute, outMsg.digest)
			if ds[1].MsgID == ds[0].MsgID || ds[1].Header.Get(hdrDigestCount) != "1" {
				t.Errorf("second digest %s with count %q, want a new id and count 1", ds[1].MsgID, ds[1].Header.Get(hdrDigestCount))
			}
			if gap := ds[1].Time.Sub(ds[0].Time); gap < 2*time.Second {
				t.Errorf("second digest came %s after the first, want about the 3s window", gap)
			}
			all, err := c.readOut()
			if err != nil {
				t.Fatal(err)
			}
			onceEach(t, all, ms[0].ID, ds[0].MsgID, ds[1].MsgID)
			for _, o := range recipientOut(all, to) {
				if !o.digest() && o.MsgID != ms[0].ID {
					t.Errorf("collected message %s was forwarded on its own", o.MsgID)
				}
			}
			waitFor(t, 10*time.Second, func() bool { return g.summary()["h.digest"].Digested >= 4 })
			if s := g.summary()["h.digest"]; s.Received != 5 || s.Forwarded != 1 || s.Digested != 4 || s.Deferred != 0 {
				t.Errorf("h.digest summary = %+v, want received 5, forwarded 1, digested 4", s)
			}
		})
		t.Run("two scenes of one digest_group", func(t *testing.T) {
			t.Parallel()
			to := testenv.Unique("group")
			a := func(i int) holdMsg { return holdMsg{ID: fmt.Sprintf("%s-a%d", to, i), Scene: "h.group_a", To: to} }
			b := func(i int) holdMsg { return holdMsg{ID: fmt.Sprintf("%s-b%d", to, i), Scene: "h.group_b", To: to} }
			c.sendHeld(a(1), b(1), a(2), b(2), a(3))
			g.waitRows(to, 30*time.Second, "three messages collected", held(gate.HoldDigest, a(2).ID, b(2).ID, a(3).ID))
			d := checkDigest(t, c, to, 3, "h.group_a", "h.group_b")
			rows := g.waitRows(to, 30*time.Second, "rows name the digest", settled(gate.SettleDigested, a(2).ID, b(2).ID, a(3).ID))
			for _, id := range []string{a(2).ID, b(2).ID, a(3).ID} {
				if rows[id].DigestID != d.MsgID {
					t.Errorf("row of %s names digest %q, want %q", id, rows[id].DigestID, d.MsgID)
				}
			}
			all, err := c.readOut()
			if err != nil {
				t.Fatal(err)
			}
			onceEach(t, all, a(1).ID, b(1).ID, d.MsgID)
			if n := len(recipientOut(all, to)); n != 3 {
				t.Errorf("gate.out holds %d messages for %s, want a1, b1 and one digest: %v", n, to, msgIDs(recipientOut(all, to)))
			}
		})
	})
}

// checkDigest waits for recipient to's first digest and checks it
// summarises n messages of scenes in a Feishu-style post.
func checkDigest(t *testing.T, c *client, to string, n int, scenes ...string) outMsg {
	t.Helper()
	d := c.waitOut(to, 1, time.Minute, outMsg.digest)[0]
	if got := d.Header.Get(hdrDigestCount); got != strconv.Itoa(n) {
		t.Errorf("digest %s: %s %q, want %d", d.MsgID, hdrDigestCount, got, n)
	}
	if d.MsgID == "" || strings.HasPrefix(d.MsgID, to+"-") {
		t.Errorf("digest Nats-Msg-Id %q, want an id of its own", d.MsgID)
	}
	var env struct {
		ReceiveIDType string          `json:"receive_id_type"`
		ReceiveID     string          `json:"receive_id"`
		MsgType       string          `json:"msg_type"`
		Content       json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(d.Data, &env); err != nil {
		t.Fatalf("digest body: %v", err)
	}
	if env.ReceiveIDType != "open_id" || env.ReceiveID != to || env.MsgType != "post" || len(env.Content) == 0 {
		t.Errorf("digest envelope = %s, want a post to open_id %s", d.Data, to)
	}
	for _, s := range scenes {
		if !strings.Contains(string(env.Content), s) {
			t.Errorf("digest content does not name scene %s: %s", s, env.Content)
		}
	}
	return d
}
