package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go"
)

// clockOf is t's wall-clock time of day, to the minute, as quiet hours
// are written (HH:MM).
func clockOf(t time.Time) string { return fmt.Sprintf("%02d:%02d", t.Hour(), t.Minute()) }

// quietRules writes a document whose quiet hours are quiet now: q.suppress
// and q.drop for an hour either side of now in UTC, q.tz and q.tzrev for an
// hour either side of now in Asia/Tokyo's wall clock (which UTC's is nine
// hours from), and q.defer until end. q.queue is quiet until end on
// Tokyo's wall clock only: in its own zone (UTC) it is not quiet.
func quietRules(now, end time.Time, tokyo *time.Location) string {
	utc, tk := now.UTC(), now.In(tokyo)
	around := func(t time.Time) string {
		return fmt.Sprintf(`{from: "%s", to: "%s"`, clockOf(t.Add(-time.Hour)), clockOf(t.Add(time.Hour)))
	}
	return fmt.Sprintf(`
scenes:
  q.suppress:
    limits: [{window: 1m, max: 10}]
    quiet_hours: %[1]s, action: suppress}
    bypass_priorities: [urgent]
  q.drop:
    limits: [{window: 1m, max: 10}]
    quiet_hours: %[1]s, action: drop}
  q.defer:
    limits: [{window: 1m, max: 10}]
    quiet_hours: {from: "%[3]s", to: "%[4]s", action: defer}
  q.tz:
    limits: [{window: 1m, max: 10}]
    quiet_hours: %[2]s, action: suppress}
  q.tzrev:
    limits: [{window: 1m, max: 10}]
    tz: Asia/Tokyo
    quiet_hours: %[2]s, action: suppress}
  q.queue:
    limits: [{window: 1m, max: 10}]
    quiet_hours: {from: "%[5]s", to: "%[6]s", action: defer}
`, around(utc), around(tk), clockOf(end.UTC().Add(-2*time.Hour)), clockOf(end.UTC()),
		clockOf(end.In(tokyo).Add(-2*time.Hour)), clockOf(end.In(tokyo)))
}

// publishMsg publishes one message with headers and waits until the gate
// has settled it.
func (c *client) publishMsg(m *nats.Msg) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		c.t.Fatalf("publish: %v", err)
	}
	c.waitIdle()
}

// TestQuietHours: during quiet hours a message gets the scene's action
// (suppress, drop, or defer until the end of the span), urgent messages
// bypass them, and a message's zone (tz field or Gate-TZ header) overrides
// the scene's; an unknown zone is a dead letter naming it.
func TestQuietHours(t *testing.T) {
	t.Parallel()
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	forEachStack(t, func(t *testing.T, kind stack) {
		// The deferred message is released at the first whole minute at
		// least 20 s away: time to start the gate and decide it while still
		// quiet. It is reckoned here, when the parallel subtest runs, which
		// may be long after the test began.
		now := time.Now()
		end := now.Truncate(time.Minute).Add(time.Minute)
		if end.Sub(now) < 20*time.Second {
			end = end.Add(time.Minute)
		}
		e := newEnv(t, kind, quietRules(now, end, tokyo))
		g := e.start(nil)
		c := e.client()
		to := testenv.Unique("quiet")
		m := func(name, scene string) holdMsg { return holdMsg{ID: to + "-" + name, Scene: scene, To: to} }
		s1, s2 := m("s1", "q.suppress"), m("s2", "q.suppress")
		s2.Priority = "urgent"
		d1, f1 := m("d1", "q.drop"), m("f1", "q.defer")
		t1, t2 := m("t1", "q.tz"), m("t2", "q.tz")
		t2.TZ = "Asia/Tokyo"
		r1, r2 := m("r1", "q.tzrev"), m("r2", "q.tzrev")
		r2.TZ = "UTC"
		// qa is quiet in its own zone and held until end; qb, of the same
		// (recipient, scene), is not quiet in the scene's zone, but must not
		// overtake qa: it is held behind it.
		qa, qb := m("qa", "q.queue"), m("qb", "q.queue")
		qa.TZ = "Asia/Tokyo"
		c.sendHeld(s1, s2, d1, f1, t1, t2, r1, r2, qa, qb)
		if time.Now().After(end) {
			t.Fatalf("the messages were decided after the quiet span of q.defer ended (%s): the machine is too slow for this test", end)
		}
		// Gate-TZ overrides the scene's zone as the tz field does.
		t3 := m("t3", "q.tz")
		hm := nats.NewMsg("gate.in")
		hm.Data = t3.json()
		hm.Header.Set(hdrTZ, "Asia/Tokyo")
		c.publishMsg(hm)

		rows := g.rows(to)
		for _, x := range []holdMsg{s1, t2, t3, r1} {
			r, ok := rows[x.ID]
			switch {
			case !ok:
				t.Errorf("%s (%s, tz %q) has no audit row; want it suppressed by quiet hours", x.ID, x.Scene, x.TZ)
			case r.Scope != gate.ScopeQuietHours || r.Reason != gate.ReasonQuietHours || r.HeldAs != "":
				t.Errorf("row of %s = %+v, want limit_scope and reason quiet_hours, not held", x.ID, r)
			}
		}
		if r, ok := rows[f1.ID]; !ok || r.HeldAs != gate.HoldDefer || r.Scope != gate.ScopeQuietHours || r.Reason != gate.ReasonQuietHours {
			t.Errorf("row of %s = %+v, want held_as defer by quiet_hours", f1.ID, r)
		} else if d := r.NextAllowedAt.Sub(end); d < -time.Second || d > time.Second {
			t.Errorf("%s is held until %s, want the end of quiet hours %s", f1.ID, r.NextAllowedAt, end)
		}
		if r := rows[qa.ID]; r.HeldAs != gate.HoldDefer || r.Reason != gate.ReasonQuietHours {
			t.Errorf("row of %s = %+v, want held_as defer by quiet_hours (its own zone)", qa.ID, r)
		}
		if r := rows[qb.ID]; r.HeldAs != gate.HoldDefer || r.Reason != gate.ReasonQueued {
			t.Errorf("row of %s = %+v, want held_as defer, queued behind %s", qb.ID, r, qa.ID)
		}
		for _, x := range []holdMsg{s2, d1, t1, r2} {
			if _, ok := rows[x.ID]; ok {
				t.Errorf("%s has an audit row: %+v", x.ID, rows[x.ID])
			}
		}
		out := c.outFor(to)
		if got, want := strings.Join(msgIDs(out), " "), strings.Join([]string{s2.ID, t1.ID, r2.ID}, " "); got != want {
			t.Errorf("gate.out during quiet hours: %s, want %s (urgent, and the two whose zone is not quiet)", got, want)
		} else if out[0].Header.Get(natsbus.HeaderBypass) != "true" {
			t.Errorf("the urgent %s passed quiet hours without %s", s2.ID, natsbus.HeaderBypass)
		}
		sum := g.summary()
		if s := sum["q.drop"]; s.Received != 1 || s.Dropped != 1 {
			t.Errorf("q.drop summary = %+v, want 1 received, 1 dropped", s)
		}
		if s := sum["q.suppress"]; s.Received != 2 || s.Suppressed != 1 || s.Forwarded != 1 {
			t.Errorf("q.suppress summary = %+v, want 1 suppressed, 1 forwarded", s)
		}

		t.Run("unknown zone", func(t *testing.T) {
			bad := m("u1", "q.tz")
			bad.TZ = "Mars/Olympus_Mons"
			c.sendHeld(bad)
			hb := nats.NewMsg("gate.in")
			hb.Data = m("u2", "q.tz").json()
			hb.Header.Set(hdrTZ, "Moon/Tranquility")
			c.publishMsg(hb)
			found := map[string]string{}
			for _, d := range c.stored(natsbus.StreamDead) {
				for _, id := range []string{to + "-u1", to + "-u2"} {
					if strings.Contains(string(d.Data), `"`+id+`"`) {
						found[id] = d.Header.Get(natsbus.HeaderError)
					}
				}
			}
			for id, zone := range map[string]string{to + "-u1": "Mars/Olympus_Mons", to + "-u2": "Moon/Tranquility"} {
				if reason, ok := found[id]; !ok || !strings.Contains(reason, zone) {
					t.Errorf("%s: dead letter %v with Gate-Error %q, want one naming %s", id, ok, reason, zone)
				}
			}
			for _, o := range c.outFor(to) {
				if o.MsgID == to+"-u1" || o.MsgID == to+"-u2" {
					t.Errorf("%s, with an unknown zone, was forwarded", o.MsgID)
				}
			}
		})

		// Last, as it waits for the end of the span: the deferred message
		// comes out then, once.
		rel := c.waitOut(to, 1, 3*time.Minute, func(o outMsg) bool { return o.MsgID == f1.ID })[0]
		if rel.Time.Before(end.Add(-500 * time.Millisecond)) {
			t.Errorf("%s released at %s, before quiet hours end at %s", f1.ID, rel.Time, end)
		}
		if from := deferredFrom(t, rel); from.After(end) || from.Before(now.Add(-time.Second)) {
			t.Errorf("%s: %s %s, want when it was held (after %s)", f1.ID, hdrDeferredFrom, from, now)
		}
		queue := c.waitOut(to, 2, time.Minute, func(o outMsg) bool { return o.MsgID == qa.ID || o.MsgID == qb.ID })
		if got := msgIDs(queue); got[0] != qa.ID || got[1] != qb.ID {
			t.Errorf("q.queue released %v, want %s then %s (in the order they arrived)", got, qa.ID, qb.ID)
		}
		if queue[0].Time.Before(end.Add(-500 * time.Millisecond)) {
			t.Errorf("%s released at %s, before its quiet hours end at %s", qa.ID, queue[0].Time, end)
		}
		g.waitRows(to, 30*time.Second, "the deferred messages settled", settled(gate.SettleReleased, f1.ID, qa.ID, qb.ID))
		all, err := c.readOut()
		if err != nil {
			t.Fatal(err)
		}
		onceEach(t, all, f1.ID, s2.ID, qa.ID, qb.ID)
		waitFor(t, 10*time.Second, func() bool { return g.summary()["q.defer"].Released == 1 })
		if s := g.summary()["q.defer"]; s.Received != 1 || s.Deferred != 1 || s.Released != 1 || s.Forwarded != 0 {
			t.Errorf("q.defer summary = %+v, want received 1, deferred 1, released 1", s)
		}
	})
}

const calendarRules = `
scenes:
  c.day:
    limits: [{calendar: day, max: 2}]
    tz: Asia/Shanghai
  c.berlin:
    limits: [{calendar: day, max: 1}]
    tz: Europe/Berlin
  c.week:
    limits: [{calendar: week, max: 1}]
    tz: Asia/Shanghai
  c.mixed:
    limits: [{calendar: day, max: 3}, {window: 2s, max: 1}]
    tz: Asia/Shanghai
`

// nextMidnight is the local midnight after t in loc. (None of the zones
// used here moves its clocks across midnight, so time.Date is exact.)
func nextMidnight(t time.Time, loc *time.Location) time.Time {
	y, m, d := t.In(loc).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, loc)
}

// nextMonday is the local Monday 00:00 after t in loc.
func nextMonday(t time.Time, loc *time.Location) time.Time {
	lt := t.In(loc)
	y, m, d := lt.Date()
	return time.Date(y, m, d+7-(int(lt.Weekday())+6)%7, 0, 0, 0, 0, loc)
}

// TestCalendarLimits: a calendar limit counts in the scene's (or the
// message's) zone and names the next local midnight (or Monday) as
// next_allowed_at; rolling limits still work beside it, on the real clock.
// Europe/Berlin's DST days need a shifted clock: TestDSTCalendarDay
// (dst_e2e_test.go) runs them through NATS on both stacks; this test checks
// Berlin's next midnight on whatever day it runs.
func TestCalendarLimits(t *testing.T) {
	t.Parallel()
	zone := func(name string) *time.Location {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	shanghai, berlin, newYork := zone("Asia/Shanghai"), zone("Europe/Berlin"), zone("America/New_York")
	forEachStack(t, func(t *testing.T, kind stack) {
		// Messages of one check must fall in one local day: wait out a
		// midnight closer than the test takes on two busy cores (it took up
		// to a minute in make test). Here, when the parallel subtest runs,
		// which may be long after the test began.
		for _, loc := range []*time.Location{shanghai, berlin, newYork} {
			if d := time.Until(nextMidnight(time.Now(), loc)); d < 3*time.Minute {
				time.Sleep(d + time.Second)
			}
		}
		e := newEnv(t, kind, calendarRules)
		g := e.start(nil)
		c := e.client()
		check := func(to, id string, max int, next func(time.Time) time.Time) {
			t.Helper()
			r, ok := g.rows(to)[id]
			if !ok {
				t.Errorf("%s has no suppression row", id)
				return
			}
			want := next(r.DecidedAt)
			t.Logf("%s (%s): next_allowed_at %s, want %s", id, r.Scene, r.NextAllowedAt, want)
			if d := r.NextAllowedAt.Sub(want); d < -time.Second || d > time.Second || r.LimitMax != max || r.CountSeen != max || r.Scope != gate.ScopeScene {
				t.Errorf("row of %s = %+v, want scene limit %d with %d seen, next_allowed_at %s", id, r, max, max, want)
			}
		}
		send := func(to, scene, tz string, n int) []holdMsg {
			ms := series(to, scene, n)
			for i := range ms {
				ms[i].TZ = tz
			}
			c.sendHeld(ms...)
			return ms
		}

		to := testenv.Unique("day")
		ms := send(to, "c.day", "", 3)
		if got := msgIDs(c.outFor(to)); len(got) != 2 || got[0] != ms[0].ID || got[1] != ms[1].ID {
			t.Errorf("c.day forwarded %v, want the first two", got)
		}
		check(to, ms[2].ID, 2, func(at time.Time) time.Time { return nextMidnight(at, shanghai) })

		ny := testenv.Unique("day-ny")
		ms = send(ny, "c.day", "America/New_York", 3)
		check(ny, ms[2].ID, 2, func(at time.Time) time.Time { return nextMidnight(at, newYork) })

		be := testenv.Unique("berlin")
		ms = send(be, "c.berlin", "", 2)
		check(be, ms[1].ID, 1, func(at time.Time) time.Time { return nextMidnight(at, berlin) })
		if day := nextMidnight(nextMidnight(time.Now(), berlin), berlin).Sub(nextMidnight(time.Now(), berlin)); day != 24*time.Hour {
			t.Logf("tomorrow in Europe/Berlin is %s long", day)
		}

		wk := testenv.Unique("week")
		ms = send(wk, "c.week", "", 2)
		check(wk, ms[1].ID, 1, func(at time.Time) time.Time { return nextMonday(at, shanghai) })

		mx := testenv.Unique("mixed")
		ms = send(mx, "c.mixed", "", 2)
		if r := g.rows(mx)[ms[1].ID]; time.Duration(r.LimitWindow) != 2*time.Second || r.LimitMax != 1 {
			t.Errorf("row of %s = %+v, want the rolling 1/2s limit beside the calendar one", ms[1].ID, r)
		}

		if s := g.summary()["c.day"]; s.Received != 6 || s.Forwarded != 4 || s.Suppressed != 2 {
			t.Errorf("c.day summary = %+v, want received 6, forwarded 4, suppressed 2", s)
		}
	})
}
