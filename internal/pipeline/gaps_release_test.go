package pipeline

import (
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// The tests of this file hold messages the way no other release test does
// (issue 19's gaps): with a zone of their own in a scene that has one, as
// a digest that comes due inside quiet hours, and with a priority that
// bypasses the scene's rules. They drive the Releaser through Round only,
// on the clock of newReleaseEnv.

// quietNight is quiet hours from 22:00 to 08:00 that defer.
func quietNight() *gate.QuietHours {
	return &gate.QuietHours{From: 22 * time.Hour, To: 8 * time.Hour, Action: gate.ActionDefer}
}

// heldBy returns an edit of a held message: its queue's recipient, its own
// zone (tz, "" for none), held by quiet hours, expiring after max_defer.
func heldBy(recipient, tz string, expires time.Time) func(*gate.Held) {
	return func(h *gate.Held) {
		h.Queue.Recipient, h.TZ = recipient, tz
		h.Reason, h.Expires = gate.ReasonQuietHours, expires
	}
}

// A held message is released by the quiet hours of its own zone when it
// named one, and by the scene's zone when it did not: at 14:00 UTC it is
// 09:00 in New York (not quiet) and 23:00 in Tokyo, the scene's zone
// (quiet until 08:00 there, 23:00 UTC).
func TestReleaseQuietHoursInTheMessagesOwnZone(t *testing.T) {
	tokyo, err := gate.LoadZone("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	e := newReleaseEnv(t)
	e.rules.Scenes["qz"] = gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionDefer,
		MaxDefer: gate.DefaultMaxDefer, QuietHours: quietNight(), TZ: "Asia/Tokyo", Zone: tokyo}
	e.now = time.Date(2026, 11, 22, 14, 0, 0, 0, time.UTC)
	expires := e.now.Add(gate.DefaultMaxDefer)
	e.hold(gate.HoldDefer, "qz", "qz", "own", heldBy("open_id:ou_ny", "America/New_York", expires))
	e.hold(gate.HoldDefer, "qz", "qz", "scenes", heldBy("open_id:ou_sc", "", expires))
	e.round(t)
	if got := e.out.forwarded(); !slices.Equal(got, []string{"own"}) {
		t.Fatalf("forwarded %v at 09:00 in New York, 23:00 in Tokyo; want [own]: it is quiet in the scene's zone, not in the message's", got)
	}
	tokyoMorning := time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	if h, _ := e.box.row("scenes"); !h.DueAt.Equal(tokyoMorning) {
		t.Errorf("scenes due at %v, want the end of quiet hours in the scene's zone (%v)", h.DueAt, tokyoMorning)
	}
	e.now = tokyoMorning
	e.round(t)
	if got := e.out.forwarded(); !slices.Equal(got, []string{"own", "scenes"}) {
		t.Fatalf("forwarded %v at 08:00 in Tokyo, want [own scenes]", got)
	}
	e.settled(t, map[string]gate.SettleKind{"own": gate.SettleReleased, "scenes": gate.SettleReleased})
}

// A digest that comes due inside quiet hours waits for their end, whole,
// and is sent then.
func TestReleaseDigestWaitsOutQuietHours(t *testing.T) {
	e := newReleaseEnv(t)
	e.rules.Scenes["gq"] = gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionDigest,
		DigestGroup: "night", QuietHours: quietNight()}
	e.now = time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	e.hold(gate.HoldDigest, "digest:night", "gq", "a")
	e.hold(gate.HoldDigest, "digest:night", "gq", "b")
	e.round(t)
	if got := e.out.forwarded(); len(got) != 0 {
		t.Fatalf("forwarded %v at 23:00, inside quiet hours; want nothing", got)
	}
	morning := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	for _, id := range []string{"a", "b"} {
		if h, ok := e.box.row(id); !ok || !h.DueAt.Equal(morning) {
			t.Errorf("%s: held %v, due at %v; want held until the end of quiet hours (%v)", id, ok, h.DueAt, morning)
		}
	}
	e.now = morning.Add(-time.Minute)
	e.round(t)
	if got := e.out.forwarded(); len(got) != 0 {
		t.Fatalf("forwarded %v at 07:59, want nothing", got)
	}
	e.now = morning
	e.round(t)
	id := gate.DigestID(gate.Queue{Recipient: "open_id:ou_1", Name: "digest:night"}, "a", "b")
	if got := e.out.forwarded(); !slices.Equal(got, []string{id}) || e.out.fs[0].DigestCount != 2 {
		t.Fatalf("forwarded %v at 08:00, want the digest of a and b, %s", got, id)
	}
	e.settled(t, map[string]gate.SettleKind{"a": gate.SettleDigested, "b": gate.SettleDigested})
}

// A held message whose priority bypasses its scene's rules is released at
// once when it comes due: its full window does not hold it back (it is
// admitted by force), nor do the scene's quiet hours.
func TestReleaseBypassPriority(t *testing.T) {
	urgent := func(h *gate.Held) { h.Priority = gate.PriorityUrgent }
	t.Run("full window", func(t *testing.T) {
		e := newReleaseEnv(t)
		e.hold(gate.HoldDefer, "d", "d", "first")
		e.round(t) // first takes the window's one place an hour
		e.hold(gate.HoldDefer, "d", "d", "urgent", urgent)
		e.round(t)
		if got := e.out.forwarded(); !slices.Equal(got, []string{"first", "urgent"}) {
			t.Fatalf("forwarded %v, want [first urgent]: urgent bypasses the full window", got)
		}
		if f := e.out.fs[1]; !f.Bypass {
			t.Errorf("urgent forwarded as %+v, want Bypass", f)
		}
		e.settled(t, map[string]gate.SettleKind{"first": gate.SettleReleased, "urgent": gate.SettleReleased})
	})
	t.Run("quiet hours", func(t *testing.T) {
		e := newReleaseEnv(t)
		e.now = time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
		e.hold(gate.HoldDefer, "q", "q", "normal", func(h *gate.Held) { h.Reason, h.Expires = gate.ReasonQuietHours, e.now.Add(gate.DefaultMaxDefer) })
		e.hold(gate.HoldDefer, "q2", "q", "urgent", urgent, func(h *gate.Held) { h.Reason, h.Expires = gate.ReasonQuietHours, e.now.Add(gate.DefaultMaxDefer) })
		e.round(t)
		if got := e.out.forwarded(); !slices.Equal(got, []string{"urgent"}) {
			t.Fatalf("forwarded %v at 23:00, want [urgent]: its priority bypasses the scene's quiet hours", got)
		}
		if h, _ := e.box.row("normal"); !h.DueAt.Equal(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)) {
			t.Errorf("normal due at %v, want the end of quiet hours", h.DueAt)
		}
	})
}
