package rules

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

func TestParseRate(t *testing.T) {
	rs := mustParse(t, "recipient_caps: [{calendar: day, max: 100}, {rate: 30/1h, burst: 10}]\n"+
		"scenes:\n  a:\n    limits: [{rate: 1/10m, burst: 3}, {window: 1d, max: 20}]\n  b:\n    limits: [{rate: 1/1m}]\n")
	wantCaps := []gate.Limit{{Calendar: gate.CalendarDay, Max: 100}, {Rate: 2 * time.Minute, Max: 10}}
	if !reflect.DeepEqual(rs.RecipientCaps, wantCaps) {
		t.Errorf("recipient_caps = %+v, want %+v (the rate limit last, 30/1h as one per 2m)", rs.RecipientCaps, wantCaps)
	}
	wantA := []gate.Limit{{Window: 24 * time.Hour, Max: 20}, {Rate: 10 * time.Minute, Max: 3}}
	if got := rs.Scenes["a"].Limits; !reflect.DeepEqual(got, wantA) {
		t.Errorf("scene a limits = %+v, want %+v", got, wantA)
	}
	wantB := []gate.Limit{{Rate: time.Minute, Max: DefaultBurst}}
	if got := rs.Scenes["b"].Limits; !reflect.DeepEqual(got, wantB) {
		t.Errorf("scene b limits = %+v, want %+v (burst defaults to %d)", got, wantB, DefaultBurst)
	}
	checkFormatRoundTrip(t, rs)

	// The JSON of /v1/rules reads back to the same limits.
	b, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	var back gate.RuleSet
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	if !reflect.DeepEqual(back.RecipientCaps, wantCaps) || !reflect.DeepEqual(back.Scenes["a"].Limits, wantA) {
		t.Errorf("JSON round trip: caps %+v, scene a %+v; want %+v, %+v\n%s", back.RecipientCaps, back.Scenes["a"].Limits, wantCaps, wantA, b)
	}
}

// Rates that name one interval are one rule, with one Version; the rate and
// the burst each change it.
func TestVersionRate(t *testing.T) {
	doc := func(limit string) string { return "scenes:\n  a:\n    limits: [" + limit + "]\n" }
	base := mustParse(t, doc("{rate: 1/10m, burst: 3}")).Version
	for _, same := range []string{"{rate: 6/1h, burst: 3}", "{burst: 3, rate: 1/600s}", "{rate: 144/1d, burst: 3}"} {
		if v := mustParse(t, doc(same)).Version; v != base {
			t.Errorf("%s: version %s, want %s as for {rate: 1/10m, burst: 3}", same, v, base)
		}
	}
	for _, other := range []string{"{rate: 1/10m}", "{rate: 1/10m, burst: 4}", "{rate: 1/5m, burst: 3}", "{window: 10m, max: 3}"} {
		if v := mustParse(t, doc(other)).Version; v == base {
			t.Errorf("%s: version %s, the same as {rate: 1/10m, burst: 3}'s", other, v)
		}
	}
	if d, b := mustParse(t, doc("{rate: 1/10m}")).Version, mustParse(t, doc("{rate: 1/10m, burst: 1}")).Version; d != b {
		t.Errorf("default burst: version %s, want %s as with burst: 1", d, b)
	}
}

func TestRateParseErrors(t *testing.T) {
	for in, want := range map[string]string{
		"1/0s":  `rate "1/0s": the duration must be positive`,
		"1/0":   `rate "1/0": the duration must be positive`,
		"x/1h":  `rate "x/1h": "x" before the / must be a whole number of at least 1`,
		"2/1ms": `rate "2/1ms" is faster than one per millisecond, the stores' resolution`,
		"1/1h/": `rate "1/1h/": invalid duration "1h/": want a Go duration such as 90s, 1h or 24h, or days such as 7d`,
		"7/1s":  `rate "7/1s" is one per 142.857142ms, not a whole number of milliseconds: write one such as 1/142ms`,
	} {
		_, err := gate.ParseRate(in)
		if err == nil || err.Error() != want {
			t.Errorf("ParseRate(%q) = %v, want %q", in, err, want)
		}
	}
	for in, want := range map[string]time.Duration{"1/10m": 10 * time.Minute, "4/1s": 250 * time.Millisecond, "1/1ms": time.Millisecond, " 2 / 1d ": 12 * time.Hour} {
		if got, err := gate.ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}
