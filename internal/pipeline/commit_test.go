package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// forgetful admits every request and records the ids taken back out.
type forgetful struct {
	admitAll
	mu     sync.Mutex
	forgot []string
}

func (f *forgetful) Forget(_ context.Context, reqs []gate.AdmitRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range reqs {
		f.forgot = append(f.forgot, r.ID)
	}
	return nil
}

func (f *forgetful) forgotten() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(slices.Values(f.forgot))
}

// refusingPipeline is a pipeline over a ledger that refuses the keys in
// refused, a window store that records what it is told to forget, and
// metrics.
func refusingPipeline(t *testing.T, refused ...string) (*Pipeline, *ledger, *outbox, *forgetful, *metrics.Metrics) {
	t.Helper()
	rs := &gate.RuleSet{UnknownScene: gate.ActionForward, Scenes: map[string]gate.SceneRule{
		"s": {OnExceed: gate.ActionSuppress, Limits: []gate.Limit{{Window: time.Hour, Max: 100}}},
	}}
	led, out, win := newLedger(t), newOutbox(t), &forgetful{}
	led.refuse = func(k string) bool { return slices.Contains(refused, k) }
	m := metrics.New(prometheus.NewRegistry())
	p, err := New(Options{Rules: staticRules{rs}, Store: win, Audit: led, Forwarder: out, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return p, led, out, win, m
}

// sequenced are deliveries of ids with stream sequences 1, 2, ….
func sequenced(ids ...string) []gate.Delivery {
	ds := deliveries(ids...)
	for i := range ds {
		ds[i].Seq = uint64(i + 1)
	}
	return ds
}

func counterValue(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

// wantVerdicts checks that the messages of parked got an invalid error
// naming the audit store's refusal, and the others none.
func wantVerdicts(t *testing.T, ids []string, errs []error, parked ...string) {
	t.Helper()
	for i, err := range errs {
		switch {
		case !slices.Contains(parked, ids[i]):
			if err != nil {
				t.Errorf("%s: got %v, want it decided", ids[i], err)
			}
		case !gate.IsInvalid(err) || !strings.Contains(gate.InvalidReason(err), "the audit store refused it"):
			t.Errorf("%s: got %v, want an invalid error naming the audit store's refusal", ids[i], err)
		}
	}
}

// A record the audit store refuses for good parks its message alone: the
// rest of its batch is committed and forwarded, the refused message goes to
// the dead letter (an invalid error) and is counted once as invalid under
// its stream sequence, and the admission the window counted for it is taken
// out again. Its redelivery (a failed Term) is parked again, uncounted.
func TestRefusedRecordParksAlone(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	p, led, out, win, m := refusingPipeline(t, "c", "f")
	wantVerdicts(t, ids, handle(p, t.Context(), sequenced(ids...)), "c", "f")

	want := map[string]int{"a": 1, "b": 1, "d": 1, "e": 1, "g": 1, "h": 1, "seq:3": 1, "seq:6": 1}
	if !maps.Equal(led.commits, want) {
		t.Errorf("committed %v, want %v", led.commits, want)
	}
	if got, want := out.forwarded(), []string{"a", "b", "d", "e", "g", "h"}; !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
	if got, want := win.forgotten(), []string{"c", "f"}; !slices.Equal(got, want) {
		t.Errorf("taken out of the window: %v, want %v", got, want)
	}
	// Two refused among eight: at most 2·2·log2(8)+1 commits of the batch,
	// and one of the counts.
	if limit := 2*2*(bits.Len(uint(len(ids)))-1) + 1 + 1; led.calls > limit {
		t.Errorf("%d commits, want at most %d", led.calls, limit)
	}
	for _, c := range []struct {
		c    prometheus.Counter
		want float64
	}{
		{m.Decisions.WithLabelValues("s", string(gate.OutcomeForward), "false"), 6},
		{m.Decisions.WithLabelValues("s", string(gate.OutcomeInvalid), "false"), 2},
		{m.Invalid.WithLabelValues("s"), 2},
	} {
		if got := counterValue(t, c.c); got != c.want {
			t.Errorf("%s: %v, want %v", c.c.Desc(), got, c.want)
		}
	}

	// The ledger cannot even look c up: it was never decided, and is parked
	// again; its count, under the same sequence, is found made.
	led.mayCommitAgain("seq:3")
	out.mayPublishAgain("a", "b") // a redelivered forward is published again
	again := sequenced("a", "b", "c")
	for i := range again {
		again[i].NumDelivered = 2
	}
	wantVerdicts(t, []string{"a", "b", "c"}, handle(p, t.Context(), again), "c")
	if n := led.commits["seq:3"]; n != 1 {
		t.Errorf("seq:3 claimed %d times, want once", n)
	}
}

// A batch whose every record is refused parks every message, at once: none
// is left to retry forever.
func TestEveryRecordRefused(t *testing.T) {
	ids := []string{"x", "y", "z"}
	p, led, out, _, _ := refusingPipeline(t, ids...)
	wantVerdicts(t, ids, handle(p, t.Context(), sequenced(ids...)), ids...)
	if got := out.forwarded(); len(got) != 0 {
		t.Errorf("forwarded %v, want none", got)
	}
	if want := map[string]int{"seq:1": 1, "seq:2": 1, "seq:3": 1}; !maps.Equal(led.commits, want) {
		t.Errorf("committed %v, want %v", led.commits, want)
	}
}

// While the batch is split, the messages of a part that meets a transient
// error are retried (ErrUnavailable); the others are committed, the
// refused one parked.
func TestRefusedAndTransientInOneBatch(t *testing.T) {
	ids := []string{"a", "b", "c", "d"}
	p, led, out, _, _ := refusingPipeline(t, "a")
	down := true
	led.fail = func(recs []gate.Record) error {
		if down && len(recs) < len(ids) && slices.ContainsFunc(recs, func(r gate.Record) bool { return r.Key == "d" }) {
			return fmt.Errorf("fake store: %w: connection reset", gate.ErrUnavailable)
		}
		return nil
	}
	// a, b refused; then a refused, b committed; c, d failed together.
	errs := handle(p, t.Context(), sequenced(ids...))
	wantVerdicts(t, ids[:2], errs[:2], "a")
	for i, err := range errs[2:] {
		if !errors.Is(err, gate.ErrUnavailable) {
			t.Errorf("%s: got %v, want an error wrapping ErrUnavailable", ids[2+i], err)
		}
	}
	down = false
	retry := sequenced(ids...)[2:]
	for i := range retry {
		retry[i].NumDelivered = 2
	}
	noErrors(t, handle(p, t.Context(), retry))
	if got, want := out.forwarded(), []string{"b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
	if want := map[string]int{"b": 1, "c": 1, "d": 1, "seq:1": 1}; !maps.Equal(led.commits, want) {
		t.Errorf("committed %v, want %v", led.commits, want)
	}
}

// An invalid message whose key the store refuses keeps its own reason and
// is counted under its stream sequence; without a sequence, it is parked
// uncounted. An invalid message whose Nats-Msg-Id no store could hold is
// known by its sequence from the start.
func TestRefusedInvalidMessage(t *testing.T) {
	p, led, _, _, _ := refusingPipeline(t, "invalid:x")
	bad := func(seq uint64, header string) gate.Delivery {
		return gate.Delivery{Data: []byte(`{"id":"x","receive_id":"ou_1"}`), HeaderID: header, Seq: seq, NumDelivered: 1}
	}
	errs := handle(p, t.Context(), []gate.Delivery{bad(7, "x"), bad(0, "x2"), bad(9, "bad\xff")})
	for i, err := range errs {
		if !gate.IsInvalid(err) || strings.Contains(gate.InvalidReason(err), "audit store") {
			t.Errorf("delivery %d: got %v, want its own invalid error", i, err)
		}
	}
	if want := map[string]int{"seq:7": 1, "invalid:x2": 1, "seq:9": 1}; !maps.Equal(led.commits, want) {
		t.Errorf("committed %v, want %v", led.commits, want)
	}

	p, led, _, _, _ = refusingPipeline(t, "y")
	errs = handle(p, t.Context(), deliveries("y")) // no sequence
	wantVerdicts(t, []string{"y"}, errs, "y")
	if len(led.commits) != 0 {
		t.Errorf("committed %v, want nothing", led.commits)
	}
}

// A redelivered batch whose lookup the store refuses for one key finds the
// others' outcomes all the same.
func TestRefusedLookup(t *testing.T) {
	p, led, out, _, _ := refusingPipeline(t, "bad")
	led.priors["lost"] = gate.Prior{Outcome: gate.OutcomeForward, At: time.Now()}
	ds := sequenced("lost", "bad", "new")
	for i := range ds {
		ds[i].NumDelivered = 2
	}
	wantVerdicts(t, []string{"lost", "bad", "new"}, handle(p, t.Context(), ds), "bad")
	if got, want := out.forwarded(), []string{"lost", "new"}; !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
	if want := map[string]int{"new": 1, "seq:2": 1}; !maps.Equal(led.commits, want) {
		t.Errorf("committed %v, want %v", led.commits, want)
	}
}

// bisect calls try on the whole, then halves only while a part is refused,
// and hands over exactly the elements refused on their own.
func TestBisect(t *testing.T) {
	for _, tt := range []struct {
		n     int
		bad   []int
		calls int
	}{
		{0, nil, 0},
		{1, nil, 1},
		{1, []int{0}, 1},
		{5, nil, 1},
		{8, []int{3}, 7},           // 1 + 2 per level below the top: 1+2+2+2
		{8, []int{0, 7}, 11},       // 1 + 2 + 4 + 4: apart from the top
		{3, []int{0, 1, 2}, 5},     // every one: 2n-1
		{16, []int{5, 6}, 11},      // together down to 4..7
		{500, []int{499}, 1 + 2*9}, // a depth of ceil(log2(500)) = 9
	} {
		var calls int
		var got []int
		s := make([]int, tt.n)
		for i := range s {
			s[i] = i
		}
		bisect(s, func(part []int) error {
			calls++
			for _, v := range part {
				if slices.Contains(tt.bad, v) {
					return errors.New("refused")
				}
			}
			return nil
		}, func(v int, _ error) { got = append(got, v) })
		if !slices.Equal(got, tt.bad) || calls != tt.calls {
			t.Errorf("n=%d bad=%v: refused %v in %d calls, want %v in %d", tt.n, tt.bad, got, calls, tt.bad, tt.calls)
		}
	}
}

// validating admits every request but those Validate refuses, and refuses
// the whole call then, as every window store does.
type validating struct{ admitAll }

func (v validating) Admit(ctx context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	for _, r := range reqs {
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	return v.admitAll.Admit(ctx, reqs)
}

// A request the window store can never decide makes its message invalid,
// alone: the rest of its batch is decided and forwarded.
func TestRequestTheWindowRefuses(t *testing.T) {
	rs := &gate.RuleSet{UnknownScene: gate.ActionForward, Scenes: map[string]gate.SceneRule{
		"s": {OnExceed: gate.ActionSuppress, Limits: []gate.Limit{{Window: time.Hour, Max: 100}}},
		// A limit no store takes, as a rule set built in code may hold.
		"broken": {OnExceed: gate.ActionSuppress, Limits: []gate.Limit{{Window: time.Hour, Max: 0}}},
	}}
	led, out := newLedger(t), newOutbox(t)
	p, err := New(Options{Rules: staticRules{rs}, Store: validating{}, Audit: led, Forwarder: out})
	if err != nil {
		t.Fatal(err)
	}
	ds := deliveries("a", "b", "c")
	ds[1].Data = []byte(`{"id":"b","scene":"broken","receive_id":"ou_1"}`)
	errs := handle(p, t.Context(), ds)
	if errs[0] != nil || errs[2] != nil {
		t.Errorf("a, c: got %v, %v, want both decided", errs[0], errs[2])
	}
	if !gate.IsInvalid(errs[1]) || !strings.Contains(gate.InvalidReason(errs[1]), "the window store refused it") {
		t.Errorf("b: got %v, want an invalid error naming the window store's refusal", errs[1])
	}
	if got, want := out.forwarded(), []string{"a", "c"}; !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
	if got := led.priors["b"].Outcome; got != gate.OutcomeInvalid {
		t.Errorf("b: ledger says %q, want invalid", got)
	}
}

// A refusal's reason becomes a NATS header: one line of valid UTF-8 of
// bounded length, whatever the store said.
func TestRefusalReasonIsOneLine(t *testing.T) {
	why := fmt.Errorf("ERROR: bad\r\nGate-Forged: yes\x00\xff %s", strings.Repeat("x", 2000))
	reason := refusedBy("audit", why).Reason
	if strings.ContainsAny(reason, "\r\n\x00") || !utf8.ValidString(reason) || len(reason) > 500 {
		t.Errorf("reason %q: want one line of valid UTF-8 within 500 bytes", reason)
	}
	if !strings.HasPrefix(reason, "the audit store refused it: ERROR: bad  Gate-Forged: yes") {
		t.Errorf("reason %q does not quote the store", reason)
	}
}

// An id a check (POST /v1/check, gate.check) claimed in the ledger while
// this message was being decided shares the message's admission: the
// check's own admission found the id recorded (a duplicate) and counted
// nothing. That slot stays. An id forwarded earlier, or refused, has its
// admission by this batch taken out again, as before.
func TestDecidedBeforeKeepsASharedSlot(t *testing.T) {
	p, led, _, win, _ := refusingPipeline(t)
	now := time.Now()
	led.priors["checked"] = gate.Prior{Outcome: gate.OutcomeForward, At: now.Add(time.Second)}
	led.priors["old"] = gate.Prior{Outcome: gate.OutcomeForward, At: now.Add(-2 * time.Hour)}
	led.priors["refused"] = gate.Prior{Outcome: gate.OutcomeSuppress, At: now.Add(time.Second)}
	noErrors(t, handle(p, t.Context(), deliveries("checked", "old", "refused", "new")))
	if got, want := win.forgotten(), []string{"old", "refused"}; !slices.Equal(got, want) {
		t.Errorf("taken out of the window: %v, want %v (a forward decided after this admission shares its slot)", got, want)
	}
}
