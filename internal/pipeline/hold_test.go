package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/inmem"
)

// spyStore is a window store that records what it is asked, and rejects the
// ids in reject whatever its windows hold (a window full for them only).
type spyStore struct {
	gate.WindowStore
	mu     sync.Mutex
	asked  []string
	forgot []string
	reject map[string]time.Time // id -> its next_allowed_at
	fail   error                // when set, Admit fails with it
}

func (s *spyStore) Admit(ctx context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	s.mu.Lock()
	if s.fail != nil {
		s.mu.Unlock()
		return nil, s.fail
	}
	var pass []gate.AdmitRequest
	for _, r := range reqs {
		s.asked = append(s.asked, r.ID)
		if _, ok := s.reject[r.ID]; !ok {
			pass = append(pass, r)
		}
	}
	s.mu.Unlock()
	inner, err := s.WindowStore.Admit(ctx, pass)
	if err != nil {
		return nil, err
	}
	res := make([]gate.AdmitResult, len(reqs))
	for i, r := range reqs {
		if next, ok := s.reject[r.ID]; ok {
			res[i] = gate.AdmitResult{Exceeded: &gate.Exceeded{Scope: gate.ScopeScene, Limit: r.Limits[0], Count: r.Limits[0].Max}, NextAllowedAt: next, Now: next.Add(-time.Minute)}
			continue
		}
		res[i], inner = inner[0], inner[1:]
	}
	return res, nil
}

func (s *spyStore) Forget(ctx context.Context, reqs []gate.AdmitRequest) error {
	s.mu.Lock()
	for _, r := range reqs {
		s.forgot = append(s.forgot, r.ID)
	}
	s.mu.Unlock()
	return s.WindowStore.Forget(ctx, reqs)
}

func (s *spyStore) wasAsked(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.asked, id)
}

// holdRules has a scene for each way the gate holds messages.
func holdRules() *gate.RuleSet {
	hour := func(max int) []gate.Limit { return []gate.Limit{{Window: time.Hour, Max: max}} }
	quiet := func(a gate.Action) *gate.QuietHours {
		return &gate.QuietHours{From: 22 * time.Hour, To: 8 * time.Hour, Action: a}
	}
	urgent := []gate.Priority{gate.PriorityUrgent}
	return &gate.RuleSet{UnknownScene: gate.ActionForward, Version: "v1", Scenes: map[string]gate.SceneRule{
		"s":  {Limits: hour(100), OnExceed: gate.ActionSuppress},
		"d":  {Limits: hour(1), OnExceed: gate.ActionDefer, MaxDefer: 6 * time.Hour, BypassPriorities: urgent},
		"g1": {Limits: hour(1), OnExceed: gate.ActionDigest, DigestGroup: "grp"},
		"g2": {Limits: hour(5), OnExceed: gate.ActionDigest, DigestGroup: "grp", BypassPriorities: urgent},
		"q":  {Limits: hour(1), OnExceed: gate.ActionSuppress, QuietHours: quiet(gate.ActionDefer), BypassPriorities: urgent},
		"qs": {Limits: hour(1), OnExceed: gate.ActionSuppress, QuietHours: quiet(gate.ActionSuppress)},
		"qd": {Limits: hour(1), OnExceed: gate.ActionSuppress, QuietHours: quiet(gate.ActionDrop)},
		"sh": {Limits: hour(1), OnExceed: gate.ActionDefer, Shadow: true},
	}}
}

// holdEnv is a pipeline with a hold store, on a clock the test sets.
type holdEnv struct {
	p     *Pipeline
	led   *ledger
	out   *outbox
	box   *holdBox
	store *spyStore
	now   time.Time
	seq   uint64
}

var noon = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func newHoldEnv(t *testing.T, withHolds bool) *holdEnv {
	t.Helper()
	e := &holdEnv{led: newLedger(t), out: newOutbox(t), box: newHoldBox(t), now: noon}
	clock := func() time.Time { return e.now }
	e.store = &spyStore{WindowStore: inmem.New(inmem.Options{Now: clock}), reject: map[string]time.Time{}}
	o := Options{Rules: staticRules{holdRules()}, Store: e.store, Audit: e.led, Forwarder: e.out, Now: clock}
	if withHolds {
		o.Holds = e.box
		e.led.holds = e.box
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	return e
}

// msg is a delivery of id in scene for ou_1, with the next stream sequence;
// prio may be empty.
func (e *holdEnv) msg(scene, id string, prio gate.Priority) gate.Delivery {
	e.seq++
	body := fmt.Sprintf(`{"id":%q,"scene":%q,"receive_id":"ou_1","content":{"text":"about %s"}}`, id, scene, id)
	if prio != "" {
		body = fmt.Sprintf(`{"id":%q,"scene":%q,"receive_id":"ou_1","priority":%q}`, id, scene, prio)
	}
	return gate.Delivery{Data: []byte(body), Seq: e.seq, NumDelivered: 1, ReceivedAt: e.now}
}

func (e *holdEnv) record(t *testing.T, id string) gate.Record {
	t.Helper()
	r, ok := e.led.recs[id]
	if !ok {
		t.Fatalf("no record of %q", id)
	}
	return r
}

// held asserts that id was held as kind in queue, for reason.
func (e *holdEnv) held(t *testing.T, id string, kind gate.HoldKind, queue, reason string) gate.Held {
	t.Helper()
	r := e.record(t, id)
	if r.Hold == nil || r.Hold.Kind != kind || r.Hold.Queue != (gate.Queue{Recipient: "open_id:ou_1", Name: queue}) || r.Hold.Reason != reason {
		t.Fatalf("%s: outcome %s, hold %+v; want held as %s in %s for %s", id, r.Outcome, r.Hold, kind, queue, reason)
	}
	if r.Suppression == nil || r.Suppression.HeldAs != kind {
		t.Fatalf("%s: audit row %+v, want one held as %s", id, r.Suppression, kind)
	}
	return *r.Hold
}

var queueD = gate.Queue{Recipient: "open_id:ou_1", Name: "d"}

// A message whose queue holds messages is held behind them, without asking
// its window, and keeps its stream sequence for the order; one Waiting
// call serves the batch, and a batch no message of which can be held asks
// none.
func TestHeldBehindItsQueue(t *testing.T) {
	e := newHoldEnv(t, true)
	e.box.add(gate.Held{MessageID: "old", Kind: gate.HoldDefer, Queue: queueD, Scene: "d", Seq: 1, DueAt: noon.Add(time.Hour)})
	e.seq = 1
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("d", "d1", ""), e.msg("s", "s1", "")}))
	h := e.held(t, "d1", gate.HoldDefer, "d", gate.ReasonQueued)
	if h.Seq != 2 || !h.HeldAt.Equal(noon) || !h.Expires.Equal(noon.Add(6*time.Hour)) || string(h.Payload) == "" {
		t.Errorf("held %+v, want seq 2, held at %v for 6h, with its bytes", h, noon)
	}
	if e.store.wasAsked("d1") {
		t.Error("the window store was asked about a message held behind its queue")
	}
	if got := e.out.forwarded(); !slices.Equal(got, []string{"s1"}) {
		t.Errorf("forwarded %v, want [s1]", got)
	}
	if want := [][]gate.Queue{{queueD}}; fmt.Sprint(e.box.waits) != fmt.Sprint(want) {
		t.Errorf("Waiting calls %v, want %v", e.box.waits, want)
	}
	if due, _ := e.box.row("d1"); !due.DueAt.Equal(noon.Add(time.Hour)) {
		t.Errorf("d1 due at %v, want after the queue's last (%v)", due.DueAt, noon.Add(time.Hour))
	}

	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("s", "s2", "")}))
	if len(e.box.waits) != 1 {
		t.Errorf("a batch without holding scenes asked Waiting: %v", e.box.waits)
	}
}

// During quiet hours each action applies, no window is asked, and the
// audit row names quiet_hours as the limit; a bypass priority is
// forwarded.
func TestQuietHoursActions(t *testing.T) {
	e := newHoldEnv(t, true)
	e.now = time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	end := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{
		e.msg("q", "q1", ""), e.msg("qs", "qs1", ""), e.msg("qd", "qd1", ""), e.msg("q", "q2", gate.PriorityUrgent),
	}))
	h := e.held(t, "q1", gate.HoldDefer, "q", gate.ReasonQuietHours)
	if !h.DueAt.Equal(end) {
		t.Errorf("q1 due at %v, want the end of quiet hours %v", h.DueAt, end)
	}
	for id, want := range map[string]gate.Outcome{"q1": gate.OutcomeDefer, "qs1": gate.OutcomeSuppress, "qd1": gate.OutcomeDrop, "q2": gate.OutcomeForward} {
		r := e.record(t, id)
		if r.Outcome != want {
			t.Errorf("%s: outcome %s, want %s", id, r.Outcome, want)
		}
		if id != "q2" && e.store.wasAsked(id) {
			t.Errorf("%s: the window was asked during quiet hours", id)
		}
		if s := r.Suppression; want != gate.OutcomeForward && want != gate.OutcomeDrop &&
			(s == nil || s.Scope != gate.ScopeQuietHours || s.Reason != gate.ReasonQuietHours || !s.NextAllowedAt.Equal(end)) {
			t.Errorf("%s: audit row %+v, want limit_scope quiet_hours until %v", id, s, end)
		}
	}
	if got := e.out.forwarded(); !slices.Equal(got, []string{"q2"}) {
		t.Errorf("forwarded %v, want [q2]", got)
	}
}

// A bypass priority is never held: not behind its queue, and not by a
// message of its queue held earlier in its batch.
func TestBypassIsNeverHeld(t *testing.T) {
	e := newHoldEnv(t, true)
	e.box.add(gate.Held{MessageID: "old", Kind: gate.HoldDefer, Queue: queueD, Scene: "d", DueAt: noon})
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("d", "u1", gate.PriorityUrgent)}))
	if len(e.box.waits) != 0 {
		t.Errorf("Waiting asked for a bypass message: %v", e.box.waits)
	}
	if got := e.out.forwarded(); !slices.Equal(got, []string{"u1"}) {
		t.Errorf("forwarded %v, want [u1]", got)
	}

	e = newHoldEnv(t, true)
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("d", "d1", ""), e.msg("d", "d2", ""), e.msg("d", "u2", gate.PriorityUrgent)}))
	e.held(t, "d2", gate.HoldDefer, "d", gate.ReasonLimit)
	if got := e.out.forwarded(); !slices.Equal(got, []string{"d1", "u2"}) {
		t.Errorf("forwarded %v, want [d1 u2]", got)
	}
}

// A shadow scene forwards what it would hold, and audits it like a shadow
// suppression.
func TestShadowDeferForwards(t *testing.T) {
	e := newHoldEnv(t, true)
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("sh", "a", ""), e.msg("sh", "b", "")}))
	if got := e.out.forwarded(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("forwarded %v, want [a b]", got)
	}
	r := e.record(t, "b")
	if r.Outcome != gate.OutcomeForward || !r.Shadow || r.ShadowOf != gate.ActionDefer || r.Hold != nil || r.Suppression == nil || !r.Suppression.Shadow {
		t.Errorf("b: %+v, want a shadow forward of defer with a shadow audit row and nothing held", r)
	}
	if e.out.fs[1].ShadowOf != gate.ActionDefer || len(e.box.waits) != 0 {
		t.Errorf("forward %+v (want Gate-Shadow: defer); Waiting calls %v (want none)", e.out.fs[1], e.box.waits)
	}
}

// Within a batch, a message never overtakes one held earlier in its queue:
// a scene of a digest group with room in its window joins the group's
// digest behind a message of another scene held in it, and its admission
// is taken back.
func TestOrderWithinBatch(t *testing.T) {
	e := newHoldEnv(t, true)
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{
		e.msg("g1", "a1", ""), e.msg("g1", "a2", ""), e.msg("g2", "b1", ""), e.msg("g2", "u", gate.PriorityUrgent),
	}))
	e.held(t, "a2", gate.HoldDigest, "digest:grp", gate.ReasonLimit)
	e.held(t, "b1", gate.HoldDigest, "digest:grp", gate.ReasonQueued)
	if got := e.out.forwarded(); !slices.Equal(got, []string{"a1", "u"}) {
		t.Errorf("forwarded %v, want [a1 u]", got)
	}
	if !slices.Equal(e.store.forgot, []string{"b1"}) {
		t.Errorf("admissions taken back: %v, want [b1]", e.store.forgot)
	}
	held, _ := e.box.state()
	if got := held["digest:grp"]; !slices.Equal(got, []string{"a2", "b1"}) {
		t.Errorf("digest queue %v, want [a2 b1]", got)
	}
}

// A batch decided while an earlier one commits holds a message behind one
// that the earlier batch held: the hold store does not know it yet.
func TestHeldInFlightIsNotOvertaken(t *testing.T) {
	e := newHoldEnv(t, true)
	e.store.reject["a1"] = noon.Add(time.Hour)
	ctx := t.Context()
	finishA := e.p.Start(ctx, []gate.Delivery{e.msg("d", "a1", "")})
	finishB := e.p.Start(ctx, []gate.Delivery{e.msg("d", "b1", ""), e.msg("s", "s1", "")})
	noErrors(t, finishA())
	noErrors(t, finishB())
	e.held(t, "a1", gate.HoldDefer, "d", gate.ReasonLimit)
	e.held(t, "b1", gate.HoldDefer, "d", gate.ReasonQueued)
	if e.store.wasAsked("b1") {
		t.Error("b1 was asked of its window: it was not held behind a1")
	}
	if len(e.box.waits) != 1 {
		t.Errorf("Waiting was asked %v, want once, by the first batch: the second's queue was held in flight", e.box.waits)
	}
	// Once both are committed, the store knows the queue.
	noErrors(t, handle(e.p, ctx, []gate.Delivery{e.msg("d", "c1", "")}))
	e.held(t, "c1", gate.HoldDefer, "d", gate.ReasonQueued)
	held, _ := e.box.state()
	if got := held["d"]; !slices.Equal(got, []string{"a1", "b1", "c1"}) {
		t.Errorf("queue d holds %v, want [a1 b1 c1]", got)
	}
	e.p.mu.Lock()
	defer e.p.mu.Unlock()
	if len(e.p.held) != 0 {
		t.Errorf("queues still counted in flight: %v", e.p.held)
	}
}

// Without a hold store, what would be held is suppressed.
func TestWithoutHoldStoreSuppresses(t *testing.T) {
	e := newHoldEnv(t, false)
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("d", "d1", ""), e.msg("d", "d2", "")}))
	if r := e.record(t, "d2"); r.Outcome != gate.OutcomeSuppress || r.Hold != nil || r.Suppression == nil || r.Suppression.HeldAs != "" {
		t.Errorf("d2: %+v, want a plain suppression", r)
	}
}

// A hold store that cannot answer fails the batch, to be retried: nothing
// is decided without knowing what is held.
func TestWaitingFailureRetries(t *testing.T) {
	e := newHoldEnv(t, true)
	e.box.failWaiting = fmt.Errorf("fake: %w", gate.ErrUnavailable)
	errs := handle(e.p, t.Context(), []gate.Delivery{e.msg("d", "d1", ""), e.msg("s", "s1", "")})
	for i, err := range errs {
		if !errors.Is(err, gate.ErrUnavailable) {
			t.Errorf("message %d: %v, want a transient error", i, err)
		}
	}
	if len(e.led.recs) != 0 || len(e.out.forwarded()) != 0 {
		t.Errorf("committed %v and forwarded %v, want nothing", e.led.recs, e.out.forwarded())
	}
}

// A queue the hold store refuses for good holds nothing: its messages are
// decided as if it were empty (the commit then meets the same refusal).
func TestWaitingRefusalIsNoQueue(t *testing.T) {
	e := newHoldEnv(t, true)
	e.box.failWaiting = fmt.Errorf("fake: %w", gate.ErrPermanent)
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("d", "d1", ""), e.msg("d", "d2", "")}))
	if got := e.out.forwarded(); !slices.Equal(got, []string{"d1"}) {
		t.Errorf("forwarded %v, want [d1]", got)
	}
	e.held(t, "d2", gate.HoldDefer, "d", gate.ReasonLimit)
}
