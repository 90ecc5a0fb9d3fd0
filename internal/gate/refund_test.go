package gate

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseRefund(t *testing.T) {
	for _, tt := range []struct {
		body, want string // want "" means refused
	}{
		{`{"id":"m-1"}`, "m-1"},
		{` {"id": "m-1", "scene": "ignored", "content": {"text": "x"}} `, "m-1"},
		{`{"id":"m-1"}` + "\n", "m-1"},
		{``, ""},
		{`null`, ""},
		{`[]`, ""},
		{`"m-1"`, ""},
		{`{}`, ""},
		{`{"id":null}`, ""},
		{`{"id":1}`, ""},
		{`{"id":""}`, ""},
		{`{"id":" "}`, ""},
		{`{"id":"a\nb"}`, ""},
		{`{"id":"` + strings.Repeat("x", MaxIDBytes+1) + `"}`, ""},
		{`{"id":"m-1"} {"id":"m-2"}`, ""},
		{`{"id":"m-1"`, ""},
		// Not UTF-8: read as U+FFFD, it would name another id.
		{"{\"id\":\"\xff\"}", ""},
		{"{\"id\":\"m-1\",\"content\":\"\xff\"}", ""},
		// Keys as in an envelope: exact, none twice.
		{`{"ID":"m-1"}`, ""},
		{`{"id":"m-1","id":"m-2"}`, ""},
		{`{"id":"m-1","Id":"m-2"}`, ""},
		{`{"id":"m-1","scene":"a","scene":"b"}`, ""},
		{`{"id":"m\u002d1"}`, "m-1"},
		// A lone surrogate escape would be read as U+FFFD: another id. A
		// pair is one character; content is not read.
		{`{"id":"m-\ud800"}`, ""},
		{`{"id":"m-\udfff"}`, ""},
		{`{"id":"m-\ud83d\ude00"}`, "m-\U0001F600"},
		{`{"id":"m-1","content":{"text":"\ud800"}}`, "m-1"},
	} {
		got, err := ParseRefund([]byte(tt.body))
		switch {
		case tt.want == "" && !IsInvalid(err):
			t.Errorf("ParseRefund(%.40q) = %q, %v; want an *InvalidError", tt.body, got, err)
		case tt.want != "" && (err != nil || got != tt.want):
			t.Errorf("ParseRefund(%.40q) = %q, %v; want %q", tt.body, got, err, tt.want)
		}
	}
	for body, want := range map[string]string{
		"{\"id\":\"\xff\"}":       "message is not valid UTF-8 JSON",
		`{"id":"m-1","ID":"m-2"}`: `refund body is ambiguous: key "ID" is "id" in other letter case`,
		`{"id":"m-1","id":"m-2"}`: `refund body is ambiguous: key "id" is given twice`,
	} {
		if _, err := ParseRefund([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRefund(%q): %v; want it to say %q", body, err, want)
		}
	}
}

func TestCheckRefundable(t *testing.T) {
	fwd := LedgerEntry{Key: "m", Scene: "s", Recipient: "open_id:u", Outcome: OutcomeForward}
	with := func(o Outcome) LedgerEntry { e := fwd; e.Outcome = o; return e }
	for _, tt := range []struct {
		name         string
		e            LedgerEntry
		ok, released bool
		want         error // nil: refundable
		words        string
	}{
		{"forward", fwd, true, false, nil, ""},
		{"released defer", with(OutcomeDefer), true, true, nil, ""},
		{"unknown", LedgerEntry{}, false, false, ErrNeverDecided, "never decided by this gate"},
		{"suppressed", with(OutcomeSuppress), true, false, ErrNotForwarded, "was suppressed, not forwarded"},
		{"dropped", with(OutcomeDrop), true, false, ErrNotForwarded, "was dropped"},
		{"held defer", with(OutcomeDefer), true, false, ErrNotForwarded, "deferred and not released"},
		{"digest", with(OutcomeDigest), true, true, ErrNotForwarded, "digest"},
		{"parked", with(OutcomeParked), true, false, ErrNotForwarded, "parked"},
		{"before 0007", LedgerEntry{Key: "m", Outcome: OutcomeForward}, true, false, ErrLedgerIncomplete, "before the gate's ledger kept recipients"},
	} {
		err := CheckRefundable("m", tt.e, tt.ok, tt.released)
		if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) || (err != nil && !strings.Contains(err.Error(), tt.words)) {
			t.Errorf("%s: CheckRefundable = %v; want %v saying %q", tt.name, err, tt.want, tt.words)
		}
		if err != nil && !RefundRefused(err) {
			t.Errorf("%s: %v is not a refusal", tt.name, err)
		}
	}
	if RefundRefused(ErrUnavailable) || RefundRefused(invalidf("x")) {
		t.Error("RefundRefused takes a transient or invalid error for a refusal")
	}
}

// TestRefundRequestOf: the request to forget names the message's windows,
// with the rules in force and the message's own zone, else the scene's.
func TestRefundRequestOf(t *testing.T) {
	shanghai, err := LoadZone("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	berlin, err := LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	rs := &RuleSet{
		RecipientCaps: []Limit{{Window: time.Hour, Max: 5}},
		Scenes: map[string]SceneRule{"s": {Limits: []Limit{{Calendar: CalendarDay, Max: 1}}, Zone: berlin, TZ: "Europe/Berlin",
			BypassPriorities: []Priority{"urgent"}}},
	}
	e := LedgerEntry{Key: "m", Scene: "s", Recipient: "open_id:u", Priority: "urgent", TZ: "Asia/Shanghai", Outcome: OutcomeForward}
	r := RefundRequestOf(rs, e)
	if r.ID != "m" || r.Scene != "s" || r.Recipient != "open_id:u" || len(r.Limits) != 1 || len(r.Caps) != 1 || !r.Force || r.Zone != shanghai {
		t.Errorf("RefundRequestOf = %+v; want m's windows, the scene's limits, the caps, forced, in Asia/Shanghai", r)
	}
	e.TZ, e.Priority = "", ""
	if r := RefundRequestOf(rs, e); r.Zone != berlin || r.Force {
		t.Errorf("without a zone of its own: %+v; want the scene's zone, not forced", r)
	}
	e.Scene = "gone"
	if r := RefundRequestOf(rs, e); r.Scene != "gone" || len(r.Limits) != 0 || len(r.Caps) != 1 {
		t.Errorf("of a scene without a rule now: %+v; want its scene window named, the caps", r)
	}
}
