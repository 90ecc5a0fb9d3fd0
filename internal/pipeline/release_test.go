package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/inmem"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// releaseEnv is a releaser over fakes, on a clock the test sets; the window
// store runs on the same clock.
type releaseEnv struct {
	r     *Releaser
	rules *gate.RuleSet
	box   *holdBox
	out   *outbox
	store *spyStore
	m     *metrics.Metrics
	now   time.Time
	seq   uint64
}

func newReleaseEnv(t *testing.T) *releaseEnv {
	t.Helper()
	e := &releaseEnv{rules: holdRules(), box: newHoldBox(t), out: newOutbox(t), m: metrics.New(prometheus.NewRegistry()), now: noon}
	clock := func() time.Time { return e.now }
	e.store = &spyStore{WindowStore: inmem.New(inmem.Options{Now: clock}), reject: map[string]time.Time{}}
	r, err := NewReleaser(ReleaserOptions{Rules: staticRules{e.rules}, Store: e.store, Holds: e.box, Forwarder: e.out, Metrics: e.m, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	return e
}

// hold adds a message held now and due now, deferred for 6 h unless kind
// is digest; change it with edit.
func (e *releaseEnv) hold(kind gate.HoldKind, queue, scene, id string, edit ...func(*gate.Held)) {
	e.seq++
	h := gate.Held{MessageID: id, Kind: kind, Queue: gate.Queue{Recipient: "open_id:ou_1", Name: queue}, Scene: scene,
		Priority: gate.PriorityNormal, Seq: e.seq, HeldAt: e.now, DueAt: e.now, Reason: gate.ReasonLimit,
		Payload: fmt.Appendf(nil, `{"id":%q,"scene":%q,"receive_id":"ou_1","content":{"text":"about %s"}}`, id, scene, id)}
	if kind == gate.HoldDefer {
		h.Expires, h.Fallback = e.now.Add(6*time.Hour), gate.ActionSuppress
	}
	for _, f := range edit {
		f(&h)
	}
	e.box.add(h)
}

func (e *releaseEnv) round(t *testing.T) {
	t.Helper()
	if _, err := e.r.Round(t.Context()); err != nil {
		t.Fatalf("round at %v: %v", e.now, err)
	}
}

// settled asserts how ids were settled.
func (e *releaseEnv) settled(t *testing.T, want map[string]gate.SettleKind) {
	t.Helper()
	_, got := e.box.state()
	for id, kind := range want {
		if got[id].Kind != kind {
			t.Errorf("%s: settled %+v, want %s", id, got[id], kind)
		}
	}
}

func (e *releaseEnv) queue(name string) []string {
	held, _ := e.box.state()
	return held[name]
}

// Deferred messages of a queue come out in order, one per reopening of
// their window, each with the time it was first held; the others wait,
// rescheduled to when the window reopens.
func TestReleaseInOrder(t *testing.T) {
	e := newReleaseEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		e.hold(gate.HoldDefer, "d", "d", id)
	}
	e.round(t)
	if got := e.out.forwarded(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("forwarded %v, want [a]", got)
	}
	if f := e.out.fs[0]; !f.DeferredFrom.Equal(noon) || string(f.Data) == "" || f.Scene != "d" {
		t.Errorf("release %+v, want its bytes, deferred from %v", f, noon)
	}
	if b, _ := e.box.row("b"); !b.DueAt.Equal(noon.Add(time.Hour)) {
		t.Errorf("b due at %v, want when the window reopens (%v)", b.DueAt, noon.Add(time.Hour))
	}
	e.round(t) // nothing is due
	for i := 1; i <= 2; i++ {
		e.now = noon.Add(time.Duration(i) * time.Hour)
		e.round(t)
	}
	if got := e.out.forwarded(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("forwarded %v, want [a b c]", got)
	}
	e.settled(t, map[string]gate.SettleKind{"a": gate.SettleReleased, "b": gate.SettleReleased, "c": gate.SettleReleased})
	if got := counterValue(t, e.m.Settled.WithLabelValues("d", "released")); got != 3 {
		t.Errorf("released counted %v, want 3", got)
	}
	if got := counterValue(t, e.m.Settled.WithLabelValues("d", "rescheduled")); got != 3 {
		t.Errorf("rescheduled counted %v, want 3 (b once, c twice)", got)
	}
}

// Should the window admit a message behind one it held back, that message
// stays behind it, and its admission is taken back.
func TestReleaseKeepsOrderBehindAHeldOne(t *testing.T) {
	e := newReleaseEnv(t)
	e.store.reject["a"] = noon.Add(30 * time.Minute)
	e.hold(gate.HoldDefer, "s", "s", "a", func(h *gate.Held) { h.Fallback = gate.ActionDrop })
	e.hold(gate.HoldDefer, "s", "s", "b")
	e.rules.Scenes["s"] = gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 100}}, OnExceed: gate.ActionDefer}
	e.round(t)
	if got := e.out.forwarded(); len(got) != 0 {
		t.Fatalf("forwarded %v, want nothing ahead of a", got)
	}
	if !slices.Equal(e.store.forgot, []string{"b"}) {
		t.Errorf("admissions taken back %v, want [b]", e.store.forgot)
	}
	for _, id := range []string{"a", "b"} {
		if h, _ := e.box.row(id); !h.DueAt.Equal(noon.Add(30 * time.Minute)) {
			t.Errorf("%s due at %v, want %v", id, h.DueAt, noon.Add(30*time.Minute))
		}
	}
}

// Past max_defer a message gets its fallback, wherever it is in its queue:
// suppress, drop, or a move to its scene's digest queue.
func TestReleaseFallbacks(t *testing.T) {
	e := newReleaseEnv(t)
	e.store.reject["first"] = noon.Add(8 * time.Hour)
	e.hold(gate.HoldDefer, "d", "d", "first", func(h *gate.Held) { h.Expires = noon.Add(8 * time.Hour) })
	e.hold(gate.HoldDefer, "d", "d", "x", func(h *gate.Held) { h.Fallback = gate.ActionDrop })
	e.hold(gate.HoldDefer, "d", "d", "y", func(h *gate.Held) { h.Fallback = gate.ActionDigest })
	e.hold(gate.HoldDefer, "d", "d", "z", func(h *gate.Held) { h.Fallback = "" })
	e.now = noon.Add(7 * time.Hour) // past the 6 h of x, y and z
	e.round(t)
	_, got := e.box.state()
	if s := got["x"]; s.Kind != gate.SettleFellBack || s.Fallback != gate.ActionDrop {
		t.Errorf("x: %+v, want fell back to drop", s)
	}
	if s := got["z"]; s.Kind != gate.SettleFellBack || s.Fallback != gate.ActionSuppress {
		t.Errorf("z: %+v, want fell back to suppress", s)
	}
	if s := got["y"]; s.Kind != gate.SettleMoved || s.Queue != (gate.Queue{Recipient: "open_id:ou_1", Name: "digest:d"}) || !s.DueAt.Equal(e.now) {
		t.Errorf("y: %+v, want moved to digest:d, due now", s)
	}
	if got := e.queue("d"); !slices.Equal(got, []string{"first"}) {
		t.Errorf("queue d holds %v, want [first]", got)
	}
	if got := e.queue("digest:d"); !slices.Equal(got, []string{"y"}) {
		t.Errorf("digest:d holds %v, want [y]", got)
	}
}

// Quiet hours hold a due message until they end, in the message's own zone
// when it named one; a message held by quiet hours in a scene that does not
// defer over its limit gets the scene's on_exceed when its window is full.
func TestReleaseQuietHours(t *testing.T) {
	e := newReleaseEnv(t)
	e.now = time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	tokyo := func(h *gate.Held) { h.Queue.Recipient, h.TZ = "open_id:ou_2", "Asia/Tokyo" } // 08:00 there
	e.hold(gate.HoldDefer, "q", "q", "utc", func(h *gate.Held) { h.Reason, h.Expires = gate.ReasonQuietHours, e.now.Add(gate.DefaultMaxDefer) })
	e.hold(gate.HoldDefer, "q", "q", "tokyo1", tokyo)
	e.hold(gate.HoldDefer, "q", "q", "tokyo2", tokyo)
	e.round(t)
	if h, _ := e.box.row("utc"); !h.DueAt.Equal(time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("utc due at %v, want the end of quiet hours", h.DueAt)
	}
	if got := e.out.forwarded(); !slices.Equal(got, []string{"tokyo1"}) {
		t.Errorf("forwarded %v, want [tokyo1]", got)
	}
	// The scene suppresses over its limit (1 an hour): tokyo2 falls back.
	e.settled(t, map[string]gate.SettleKind{"tokyo1": gate.SettleReleased, "tokyo2": gate.SettleFellBack})
	if _, got := e.box.state(); got["tokyo2"].Fallback != gate.ActionSuppress {
		t.Errorf("tokyo2: %+v, want the scene's on_exceed, suppress", got["tokyo2"])
	}
}

// A digest queue whose oldest message is due is forwarded as one summary,
// under an id derived from the queue and that message, taking its window's
// slot; each message is settled as carried by it. While the window is full
// the queue waits, whole.
func TestReleaseDigest(t *testing.T) {
	e := newReleaseEnv(t)
	e.hold(gate.HoldDigest, "digest:grp", "g1", "a")
	e.hold(gate.HoldDigest, "digest:grp", "g2", "b")
	e.hold(gate.HoldDigest, "digest:grp", "g1", "c")
	e.round(t)
	q := gate.Queue{Recipient: "open_id:ou_1", Name: "digest:grp"}
	id := gate.DigestID(q, "a", "c")
	if got := e.out.forwarded(); !slices.Equal(got, []string{id}) {
		t.Fatalf("forwarded %v, want the digest %s", got, id)
	}
	f := e.out.fs[0]
	var env struct {
		ID        string `json:"id"`
		ReceiveID string `json:"receive_id"`
		Content   struct {
			Post struct {
				EnUS struct {
					Title string `json:"title"`
				} `json:"en_us"`
			} `json:"post"`
		} `json:"content"`
	}
	if err := json.Unmarshal(f.Data, &env); err != nil || env.ID != id || env.ReceiveID != "ou_1" || env.Content.Post.EnUS.Title != "3 notifications held back" {
		t.Errorf("digest %s (%v), want the summary of 3 for ou_1", f.Data, err)
	}
	if f.DigestCount != 3 || f.Scene != "digest:grp" || !f.DeferredFrom.IsZero() {
		t.Errorf("digest forward %+v, want count 3 on scene digest:grp", f)
	}
	_, got := e.box.state()
	for _, m := range []string{"a", "b", "c"} {
		if s := got[m]; s.Kind != gate.SettleDigested || s.DigestID != id {
			t.Errorf("%s: %+v, want digested by %s", m, s, id)
		}
	}
	if n := counterValue(t, e.m.Digests); n != 1 {
		t.Errorf("digests counted %v, want 1", n)
	}

	// The digest took g1's slot: the next waits for it to reopen.
	e.hold(gate.HoldDigest, "digest:grp", "g1", "d")
	e.hold(gate.HoldDigest, "digest:grp", "g2", "e")
	e.round(t)
	if got := e.queue("digest:grp"); !slices.Equal(got, []string{"d", "e"}) || len(e.out.forwarded()) != 1 {
		t.Fatalf("queue %v, forwarded %v: want d and e held, one digest sent", got, e.out.forwarded())
	}
	if h, _ := e.box.row("e"); !h.DueAt.Equal(noon.Add(time.Hour)) {
		t.Errorf("e due at %v, want %v", h.DueAt, noon.Add(time.Hour))
	}
	e.now = noon.Add(time.Hour)
	e.round(t)
	if got := e.out.forwarded(); len(got) != 2 || got[1] != gate.DigestID(q, "d", "e") || e.out.fs[1].DigestCount != 2 {
		t.Errorf("forwarded %v, want a second digest of 2", got)
	}
}

// A held message whose scene lost its rule gets unknown_scene: forwarded
// without a window, or fallen back to its action.
func TestReleaseUnknownScene(t *testing.T) {
	e := newReleaseEnv(t)
	e.hold(gate.HoldDefer, "gone", "gone", "a")
	e.round(t)
	if got := e.out.forwarded(); !slices.Equal(got, []string{"a"}) || e.store.wasAsked("a") {
		t.Errorf("forwarded %v (asked the window: %v), want a forwarded unchecked", got, e.store.wasAsked("a"))
	}
	e.rules.UnknownScene = gate.ActionDrop
	e.hold(gate.HoldDefer, "gone", "gone", "b")
	e.round(t)
	if _, got := e.box.state(); got["b"].Kind != gate.SettleFellBack || got["b"].Fallback != gate.ActionDrop {
		t.Errorf("b: %+v, want fallen back to drop", got["b"])
	}
}

// A round that cannot reach its window store is rolled back whole: nothing
// is settled, and the next round does it, once. A round whose forwards
// fail to publish (or whose forwarder panics) has settled its messages:
// their forwards wait in the outbox, in order, and the next round
// publishes them, once each; the queue waits meanwhile.
func TestReleaseFailuresRollBack(t *testing.T) {
	for _, tt := range []struct {
		name    string
		breakIt func(e *releaseEnv)
		mend    func(e *releaseEnv)
		settled bool // the failed round settled (its forwards wait in the outbox)
	}{
		{"forward fails", func(e *releaseEnv) {
			e.out.fail = func(f gate.Forward) error {
				if f.MessageID == "b" {
					return fmt.Errorf("fake: %w", gate.ErrUnavailable)
				}
				return nil
			}
		}, func(e *releaseEnv) { e.out.fail = nil }, true},
		{"window store down", func(e *releaseEnv) { e.store.fail = fmt.Errorf("fake: %w", gate.ErrUnavailable) },
			func(e *releaseEnv) { e.store.fail = nil }, false},
		{"panic", func(e *releaseEnv) { e.out.fail = func(gate.Forward) error { panic("a forwarder bug") } },
			func(e *releaseEnv) { e.out.fail = nil }, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newReleaseEnv(t)
			e.rules.Scenes["s"] = gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 100}}, OnExceed: gate.ActionDefer}
			e.hold(gate.HoldDefer, "s", "s", "a")
			e.hold(gate.HoldDefer, "s", "s", "b")
			e.hold(gate.HoldDigest, "digest:grp", "g1", "c")
			tt.breakIt(e)
			if _, err := e.r.Round(t.Context()); err == nil {
				t.Fatal("the round succeeded")
			}
			want := map[string]gate.SettleKind{"a": gate.SettleReleased, "b": gate.SettleReleased, "c": gate.SettleDigested}
			if _, got := e.box.state(); !tt.settled && len(got) != 0 {
				t.Fatalf("settled %v in a round rolled back", got)
			} else if tt.settled {
				e.settled(t, want)
				q := gate.Queue{Recipient: "open_id:ou_1", Name: "s"}
				if w, _ := e.box.Waiting(t.Context(), []gate.Queue{q}); !w[q] {
					t.Errorf("queue %v not waiting while its forwards are in the outbox", q)
				}
				if n := counterValue(t, e.m.OutboxLeft); n < 1 {
					t.Errorf("gate_release_outbox_left = %v after a round that could not publish, want at least 1", n)
				}
			}
			// a was published before b failed: GATE_OUT keeps one copy.
			e.out.mayPublishAgain("a", gate.DigestID(gate.Queue{Recipient: "open_id:ou_1", Name: "digest:grp"}, "c", "c"))
			tt.mend(e)
			e.round(t)
			e.settled(t, want)
			if got := e.out.forwarded(); len(got) != 3 {
				t.Errorf("forwarded %v, want a, b and one digest", got)
			}
			if fs, _ := e.box.Outbox(t.Context(), 10); len(fs) != 0 {
				t.Errorf("outbox still holds %d forwards after a round that published them", len(fs))
			}
			if n := counterValue(t, e.m.OutboxLeft); n != 0 {
				t.Errorf("gate_release_outbox_left = %v after the outbox was published, want 0", n)
			}
			if tt.name == "panic" {
				if n := counterValue(t, e.m.Recovered.WithLabelValues("release")); n != 1 {
					t.Errorf("recovered panics counted %v, want 1", n)
				}
			}
		})
	}
}

// Run releases what comes due until its context ends.
func TestReleaserRuns(t *testing.T) {
	e := newReleaseEnv(t)
	e.r.o.Interval = 5 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { e.r.Run(ctx); close(done) }()
	e.hold(gate.HoldDefer, "d", "d", "a")
	deadline := time.Now().Add(30 * time.Second)
	for len(e.out.forwarded()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the releaser did not release a due message")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return once its context ended")
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal(ctx.Err())
	}
}

// A digest whose publish lost its ack was settled all the same: the outbox
// publishes it again under the same id (GATE_OUT keeps one copy), and a
// message that joins the queue meanwhile starts the next digest, never
// changing one that may have been sent.
func TestDigestRolledBackAndJoined(t *testing.T) {
	e := newReleaseEnv(t)
	q := gate.Queue{Recipient: "open_id:ou_1", Name: "digest:grp"}
	e.rules.Scenes["g3"] = gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 100}}, OnExceed: gate.ActionDigest, DigestGroup: "grp"}
	e.hold(gate.HoldDigest, "digest:grp", "g3", "a")
	e.hold(gate.HoldDigest, "digest:grp", "g3", "b")
	e.out.fail = func(f gate.Forward) error {
		e.out.fail = nil
		e.out.publishes++ // published, but its ack lost: the round fails
		e.out.stored[f.MessageID], e.out.ids, e.out.fs = true, append(e.out.ids, f.MessageID), append(e.out.fs, f)
		return fmt.Errorf("fake: ack lost: %w", gate.ErrUnavailable)
	}
	if _, err := e.r.Round(t.Context()); err == nil {
		t.Fatal("the round succeeded")
	}
	first := gate.DigestID(q, "a", "b")
	e.out.mayPublishAgain(first)
	e.hold(gate.HoldDigest, "digest:grp", "g3", "c")
	e.round(t)
	second := gate.DigestID(q, "c", "c")
	if got := e.out.forwarded(); !slices.Equal(got, []string{first, second}) {
		t.Fatalf("forwarded %v, want the lost-ack digest %s and the next one, with c, %s", got, first, second)
	}
	if e.out.fs[0].DigestCount != 2 || e.out.fs[1].DigestCount != 1 {
		t.Errorf("digests carry %d and %d, want 2 and 1", e.out.fs[0].DigestCount, e.out.fs[1].DigestCount)
	}
	if _, got := e.box.state(); got["a"].DigestID != first || got["c"].DigestID != second {
		t.Errorf("a: %+v, c: %+v; want carried by %s and %s", got["a"], got["c"], first, second)
	}
}

// A message rescheduled past its expiry is due at its expiry, to fall back
// then.
func TestRescheduleStopsAtExpiry(t *testing.T) {
	e := newReleaseEnv(t)
	e.store.reject["a"] = noon.Add(30 * time.Hour)
	e.hold(gate.HoldDefer, "d", "d", "a")
	e.round(t)
	if h, _ := e.box.row("a"); !h.DueAt.Equal(noon.Add(6 * time.Hour)) {
		t.Fatalf("a due at %v, want its expiry %v", h.DueAt, noon.Add(6*time.Hour))
	}
	e.now = noon.Add(6 * time.Hour)
	e.round(t)
	e.settled(t, map[string]gate.SettleKind{"a": gate.SettleFellBack})
}
