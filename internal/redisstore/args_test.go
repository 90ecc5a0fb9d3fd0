package redisstore

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/redis/go-redis/v9"
)

func TestBuildCalls(t *testing.T) {
	s, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), Options{KeyPrefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []gate.AdmitRequest{
		{ID: "a", Recipient: "open_id:x", Scene: "s", Force: true,
			Limits: []gate.Limit{{Window: time.Hour, Max: 1}, {Window: 1500 * time.Microsecond, Max: 3}},
			Caps:   []gate.Limit{{Window: 24 * time.Hour, Max: 20}}},
		{ID: "b", Recipient: "open_id:y", Scene: "t"},
		{ID: "c", Recipient: "open_id:z", Scene: "u", Limits: []gate.Limit{{Window: time.Second, Max: 2}}},
	}
	// A call starts with its limit sets, each sent once; a request names its
	// set by number, from 1.
	// A request names its recipient's key, and sends its scene's tag member.
	ka, sa := []string{"p:{open_id:x}"}, []any{2, 1, int64(3600000), 1, int64(2), 3, int64(86400000), 20}
	kb, sb := []string{"p:{open_id:y}"}, []any{0, 0}
	kc, sc := []string{"p:{open_id:z}"}, []any{1, 0, int64(1000), 2}
	a := func(set int) []any { return []any{member("a"), 1, set, "#s"} }
	b := func(set int) []any { return []any{member("b"), 0, set, "#t"} }
	c := func(set int) []any { return []any{member("c"), 0, set, "#u"} }
	tests := []struct {
		perCall int
		want    []call
	}{
		{1, []call{
			{lo: 0, hi: 1, keys: ka, args: concat([]any{1}, sa, a(1))},
			{lo: 1, hi: 2, keys: kb, args: concat([]any{1}, sb, b(1))},
			{lo: 2, hi: 3, keys: kc, args: concat([]any{1}, sc, c(1))}}},
		{2, []call{
			{lo: 0, hi: 2, keys: concat(ka, kb), args: concat([]any{2}, sa, sb, a(1), b(2))},
			{lo: 2, hi: 3, keys: kc, args: concat([]any{1}, sc, c(1))}}},
		{64, []call{{lo: 0, hi: 3, keys: concat(ka, kb, kc), args: concat([]any{3}, sa, sb, sc, a(1), b(2), c(3))}}},
	}
	for _, tt := range tests {
		calls, _, err := s.buildCalls(reqs, tt.perCall)
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != len(tt.want) {
			t.Fatalf("%d per call: %d calls, want %d", tt.perCall, len(calls), len(tt.want))
		}
		for i := range tt.want {
			if got := calls[i]; !equalCall(got, tt.want[i]) {
				t.Errorf("%d per call: call %d = %#v, want %#v", tt.perCall, i, got, tt.want[i])
			}
			// Appending to one call's args must not overwrite the next call's.
			if c := calls[i].args; cap(c) != len(c) {
				t.Errorf("%d per call: call %d args have spare capacity %d", tt.perCall, i, cap(c)-len(c))
			}
		}
	}
}

// A request with rate limits sends their TAT keys after its windows', their
// intervals after its pairs, and the flags say so; a dry run sets its flag.
func TestBuildCallsRate(t *testing.T) {
	s, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), Options{KeyPrefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []gate.AdmitRequest{
		{ID: "d", Recipient: "open_id:w", Scene: "v", DryRun: true,
			Limits: []gate.Limit{{Window: time.Hour, Max: 1}, {Rate: 10 * time.Minute, Max: 3}},
			Caps:   []gate.Limit{{Rate: 2 * time.Minute, Max: 10}}},
		{ID: "e", Recipient: "open_id:w", Scene: "v", Force: true, Caps: []gate.Limit{{Rate: time.Second, Max: 1}}},
		{ID: "c", Recipient: "open_id:z", Scene: "u", Limits: []gate.Limit{{Window: time.Second, Max: 2}}},
	}
	want := call{lo: 0, hi: 3,
		keys: []string{"p:{open_id:w}", "p:{open_id:w}", "p:{open_id:z}"},
		args: []any{
			3, 2, 1, int64(3600000), 1, 0, 3, 0, 10, // the limit sets
			0, 1, 0, 1,
			1, 0, int64(1000), 2,
			member("d"), flagDryRun + flagSceneRate + flagCapRate, 1, "#v", int64(600000), int64(120000),
			member("e"), 1 + flagCapRate, 2, "#v", int64(1000),
			member("c"), 0, 3, "#u",
		}}
	calls, _, err := s.buildCalls(reqs, perCallSingle)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || !equalCall(calls[0], want) {
		t.Fatalf("calls = %#v, want %#v", calls, want)
	}
	// With LegacyKeys, the old layout's keys follow the recipient's, and the
	// flags say so.
	s.layout = layoutLegacy
	want.keys = []string{"p:{open_id:w}", "p:{open_id:w}:s:v", "p:{open_id:w}:c", "p:{open_id:w}:g:v", "p:{open_id:w}:gc",
		"p:{open_id:w}", "p:{open_id:w}:s:v", "p:{open_id:w}:c", "p:{open_id:w}:gc",
		"p:{open_id:z}", "p:{open_id:z}:s:u", "p:{open_id:z}:c"}
	for _, i := range []int{18, 24, 29} {
		want.args[i] = want.args[i].(int) + flagLegacy
	}
	if calls, _, err = s.buildCalls(reqs, perCallSingle); err != nil || len(calls) != 1 || !equalCall(calls[0], want) {
		t.Fatalf("legacy: calls = %#v (%v), want %#v", calls, err, want)
	}
}

// Requests of equal limits and caps share one limit set, sent once, even
// when their slices differ; the same limits under other caps make another.
func TestBuildCallsSharedSets(t *testing.T) {
	s, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), Options{KeyPrefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	day := []gate.Limit{{Window: 24 * time.Hour, Max: 20}}
	reqs := []gate.AdmitRequest{
		{ID: "a", Recipient: "open_id:x", Scene: "s", Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, Caps: day},
		{ID: "b", Recipient: "open_id:y", Scene: "s", Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, Caps: slices.Clone(day)},
		{ID: "c", Recipient: "open_id:y", Scene: "s", Limits: []gate.Limit{{Window: time.Hour, Max: 1}}},
		{ID: "d", Recipient: "open_id:x", Scene: "s", Force: true, Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, Caps: day},
	}
	calls, _, err := s.buildCalls(reqs, perCallSingle)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{
		2, 1, 1, int64(3600000), 1, int64(86400000), 20, // the limit sets
		1, 0, int64(3600000), 1,
		member("a"), 0, 1, "#s",
		member("b"), 0, 1, "#s",
		member("c"), 0, 2, "#s",
		member("d"), 1, 1, "#s",
	}
	if len(calls) != 1 || !equalCall(calls[0], call{lo: 0, hi: 4, keys: calls[0].keys, args: want}) {
		t.Fatalf("calls = %#v, want args %#v", calls, want)
	}
}

func concat[T any](s ...[]T) []T {
	var out []T
	for _, x := range s {
		out = append(out, x...)
	}
	return out
}

func equalCall(a, b call) bool {
	if a.lo != b.lo || a.hi != b.hi || len(a.keys) != len(b.keys) || len(a.args) != len(b.args) {
		return false
	}
	for i := range a.keys {
		if a.keys[i] != b.keys[i] {
			return false
		}
	}
	for i := range a.args {
		if a.args[i] != b.args[i] {
			return false
		}
	}
	return true
}

// BenchmarkBuildCalls measures the Go side of a decision: keys and ARGV for
// a batch of messages of a scene {1h/1, 24h/3} under a cap {24h/20}, and of
// {1h/1, day/3} under {day/20}.
func BenchmarkBuildCalls(b *testing.B) {
	s, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), Options{})
	if err != nil {
		b.Fatal(err)
	}
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		n            int
		limits, caps []gate.Limit
	}{
		{"batch1", 1, []gate.Limit{{Window: time.Hour, Max: 1}, {Window: 24 * time.Hour, Max: 3}}, []gate.Limit{{Window: 24 * time.Hour, Max: 20}}},
		{"batch64", 64, []gate.Limit{{Window: time.Hour, Max: 1}, {Window: 24 * time.Hour, Max: 3}}, []gate.Limit{{Window: 24 * time.Hour, Max: 20}}},
		// The same with the day counted in Asia/Shanghai: one period triple more per request.
		{"batch64-calendar", 64, []gate.Limit{{Window: time.Hour, Max: 1}, {Calendar: gate.CalendarDay, Max: 3}}, []gate.Limit{{Calendar: gate.CalendarDay, Max: 20}}},
	} {
		reqs := make([]gate.AdmitRequest, tc.n)
		for i := range reqs {
			reqs[i] = gate.AdmitRequest{ID: "7f1c4d8e-2b3a-4c5d-9e8f-0a1b2c3d4e5f", Recipient: "open_id:ou_84aad35d084aa403a838cf73ee18467", Scene: "alert.disk_full", Limits: tc.limits, Caps: tc.caps, Zone: sh}
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := s.buildCalls(reqs, perCallSingle); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Members are short and fixed-length whatever the id, and distinct ids get
// distinct members.
func TestMember(t *testing.T) {
	seen := map[string]string{}
	for i := range 100_000 {
		id := "7f1c4d8e-2b3a-4c5d-9e8f-" + strconv.Itoa(i)
		m := member(id)
		if len(m) != memberBytes {
			t.Fatalf("member(%q) is %d bytes, want %d", id, len(m), memberBytes)
		}
		if other, ok := seen[m]; ok {
			t.Fatalf("ids %q and %q share a member", other, id)
		}
		seen[m] = id
	}
	if first := member("7f1c4d8e-2b3a-4c5d-9e8f-0"); seen[first] != "7f1c4d8e-2b3a-4c5d-9e8f-0" {
		t.Fatalf("member of the same id differs from one call to the next")
	}
}
