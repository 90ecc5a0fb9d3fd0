package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseCheck(t *testing.T) {
	ok := `{"id":"c1","scene":"s","receive_id_type":"user_id","receive_id":"u1","priority":"high","tz":"Europe/Berlin","dry_run":true}`
	req, err := ParseCheck([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	m := req.Message
	if m.ID != "c1" || m.Scene != "s" || m.Recipient() != "user_id:u1" || m.Priority != PriorityHigh ||
		m.TZ != "Europe/Berlin" || m.Zone == nil || !req.DryRun || m.Raw != nil {
		t.Errorf("got %+v dry_run %v", m, req.DryRun)
	}
	req, err = ParseCheck([]byte(`{"id":"c1","scene":"s","receive_id":"u1","dry_run":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Message.ReceiveIDType != "open_id" || req.Message.Priority != PriorityNormal || req.DryRun {
		t.Errorf("defaults: got %+v dry_run %v, want open_id, normal, not dry", req.Message, req.DryRun)
	}

	bad := []struct {
		name, body, want string
	}{
		{"empty", ``, "empty"},
		{"not JSON", `id=1`, "not a JSON object"},
		{"array", `[1]`, "not a JSON object"},
		{"unknown field", `{"id":"c","scene":"s","receive_id":"u","dryrun":true}`, `unknown field "dryrun"`},
		{"uuid is not an id here", `{"uuid":"c","scene":"s","receive_id":"u"}`, `unknown field "uuid"`},
		{"content is not a check's", `{"id":"c","scene":"s","receive_id":"u","content":{}}`, `unknown field "content"`},
		{"trailing data", `{"id":"c","scene":"s","receive_id":"u"} {}`, "data after"},
		{"dry_run not a bool", `{"id":"c","scene":"s","receive_id":"u","dry_run":"yes"}`, `"dry_run" must be a bool`},
		{"id a number", `{"id":1,"scene":"s","receive_id":"u"}`, `"id" must be a string`},
		{"no id", `{"scene":"s","receive_id":"u"}`, "id is missing"},
		{"no scene", `{"id":"c","receive_id":"u"}`, "scene is missing"},
		{"no receive_id", `{"id":"c","scene":"s"}`, "receive_id is missing"},
		{"bad id type", `{"id":"c","scene":"s","receive_id":"u","receive_id_type":"phone"}`, "receive_id_type"},
		{"bad priority", `{"id":"c","scene":"s","receive_id":"u","priority":"max"}`, "priority"},
		{"bad zone", `{"id":"c","scene":"s","receive_id":"u","tz":"Mars/Olympus"}`, "unknown time zone"},
		{"control in scene", `{"id":"c","scene":"a\u0007b","receive_id":"u"}`, "scene contains"},
		{"id too long", fmt.Sprintf(`{"id":%q,"scene":"s","receive_id":"u"}`, strings.Repeat("x", MaxIDBytes+1)), "over the limit"},
		{"invalid UTF-8", "{\"id\":\"\xff\",\"scene\":\"s\",\"receive_id\":\"u\"}", "UTF-8"},
		{"NUL byte", "{\"id\":\"c\",\"scene\":\"s\",\"receive_id\":\"u\"}\x00", "NUL"},
		{"too large", `{"id":"c","scene":"s","receive_id":"u","tz":"` + strings.Repeat(" ", MaxCheckBytes) + `"}`, "over the limit"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCheck([]byte(tt.body))
			if !IsInvalid(err) {
				t.Fatalf("got %v, want an *InvalidError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to say %q", err, tt.want)
			}
		})
	}
}

func TestAnswerOf(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	next := at.Add(time.Hour)
	hour := Limit{Window: time.Hour, Max: 3}
	day := Limit{Calendar: CalendarDay, Max: 5}
	rate := Limit{Rate: 10 * time.Minute, Max: 3}
	tests := []struct {
		name string
		d    Decision
		res  AdmitResult
		want string // the answer's JSON
	}{
		{"admitted, tightest named", Decision{Outcome: OutcomeForward, At: at},
			AdmitResult{Admitted: true, Tightest: &Exceeded{Scope: ScopeScene, Limit: hour, Count: 2}},
			`{"decision":"forward","admitted":true,"limit":{"scope":"scene","window":"1h","max":3},"count":2,"next_allowed_at":null,"rules_version":"v1","decided_at":"2026-11-24T09:00:00Z"}`},
		{"admitted, no limit", Decision{Outcome: OutcomeForward, At: at}, AdmitResult{Admitted: true},
			`{"decision":"forward","admitted":true,"limit":null,"count":0,"next_allowed_at":null,"rules_version":"v1","decided_at":"2026-11-24T09:00:00Z"}`},
		{"suppressed by a calendar cap", Decision{Outcome: OutcomeSuppress, Reason: ReasonLimit, At: at, NextAllowedAt: next,
			Exceeded: &Exceeded{Scope: ScopeRecipient, Limit: day, Count: 5}}, AdmitResult{},
			`{"decision":"suppress","admitted":false,"limit":{"scope":"recipient","calendar":"day","max":5},"count":5,"next_allowed_at":"2026-11-24T10:00:00Z","rules_version":"v1","reason":"limit","decided_at":"2026-11-24T09:00:00Z"}`},
		{"deferred by a rate", Decision{Outcome: OutcomeDefer, Reason: ReasonLimit, At: at, NextAllowedAt: next, HoldUntil: next,
			Exceeded: &Exceeded{Scope: ScopeScene, Limit: rate, Count: 3}}, AdmitResult{},
			`{"decision":"defer","admitted":false,"limit":{"scope":"scene","rate":"10m","max":3},"count":3,"next_allowed_at":"2026-11-24T10:00:00Z","rules_version":"v1","reason":"limit","decided_at":"2026-11-24T09:00:00Z"}`},
		{"quiet hours", Decision{Outcome: OutcomeDrop, Reason: ReasonQuietHours, At: at, NextAllowedAt: next,
			Exceeded: &Exceeded{Scope: ScopeQuietHours}}, AdmitResult{},
			`{"decision":"drop","admitted":false,"limit":{"scope":"quiet_hours","max":0},"count":0,"next_allowed_at":"2026-11-24T10:00:00Z","rules_version":"v1","reason":"quiet_hours","decided_at":"2026-11-24T09:00:00Z"}`},
		{"muted by a preference", Decision{Outcome: OutcomeSuppress, Reason: ReasonPreference, At: at, NextAllowedAt: next,
			Exceeded: &Exceeded{Scope: ScopePreference}}, AdmitResult{},
			`{"decision":"suppress","admitted":false,"limit":{"scope":"preference","max":0},"count":0,"next_allowed_at":"2026-11-24T10:00:00Z","rules_version":"v1","reason":"preference","decided_at":"2026-11-24T09:00:00Z"}`},
		{"shadow over its limit", Decision{Outcome: OutcomeForward, Shadow: true, ShadowOf: ActionSuppress, Reason: ReasonLimit, At: at,
			NextAllowedAt: next, Exceeded: &Exceeded{Scope: ScopeScene, Limit: hour, Count: 3}}, AdmitResult{},
			`{"decision":"forward","admitted":false,"limit":{"scope":"scene","window":"1h","max":3},"count":3,"next_allowed_at":"2026-11-24T10:00:00Z","rules_version":"v1","reason":"limit","shadow_of":"suppress","decided_at":"2026-11-24T09:00:00Z"}`},
		{"unchecked", Decision{Outcome: OutcomeForward, Unchecked: true, Reason: "store_error", At: at}, AdmitResult{},
			`{"decision":"forward","admitted":true,"limit":null,"count":0,"next_allowed_at":null,"rules_version":"v1","reason":"store_error","unchecked":true,"decided_at":"2026-11-24T09:00:00Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(AnswerOf(tt.d, tt.res, "v1"))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
			var back CheckAnswer
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("the answer does not read back: %v", err)
			}
			again, _ := json.Marshal(back)
			if string(again) != string(b) {
				t.Errorf("read back and written again: %s, want %s", again, b)
			}
		})
	}
}

func TestCheckRecordHoldsNothing(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	m := Message{ID: "c1", Scene: "s", ReceiveIDType: "open_id", ReceiveID: "u", Priority: PriorityNormal}
	d := Decision{Outcome: OutcomeDigest, Reason: ReasonLimit, At: at, NextAllowedAt: at.Add(time.Hour), HoldUntil: at.Add(time.Hour),
		Queue: Queue{"open_id:u", "digest:s"}, Exceeded: &Exceeded{Scope: ScopeScene, Limit: Limit{Window: time.Hour, Max: 1}, Count: 1}}
	rec := CheckRecord(m, d, "v1")
	if rec.Key != "c1" || rec.Outcome != OutcomeSuppress || rec.Hold != nil || rec.Recipient != "open_id:u" {
		t.Fatalf("got %+v, want a suppression of c1 that holds nothing", rec)
	}
	s := rec.Suppression
	if s == nil || s.Reason != ReasonLimit || s.HeldAs != "" || s.LimitMax != 1 || s.Payload != "" || s.RulesVersion != "v1" {
		t.Errorf("audit row: got %+v, want reason limit, not held, max 1, no payload", s)
	}
	if rec := CheckRecord(m, Decision{Outcome: OutcomeForward, At: at}, "v1"); rec.Outcome != OutcomeForward || rec.Suppression != nil {
		t.Errorf("forward: got %+v, want a forward without an audit row", rec)
	}
}

// TestClassify: every sentinel and the error type land in their class,
// wrapped as the stores and services wrap them, and an error wrapping two
// takes the first class of Classify's order.
func TestClassify(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want Class
	}{
		{"nil", nil, ClassNone},
		{"invalid message", invalidf("no id"), ClassPark},
		{"invalid, wrapped", fmt.Errorf("commit: %w", &InvalidError{Reason: "the audit store refused it"}), ClassPark},
		{"bad request", fmt.Errorf("list: %w: malformed cursor", ErrBadRequest), ClassInvalid},
		{"bad request refused for good", fmt.Errorf("settle: %w: %w: 2 queues", ErrPermanent, ErrBadRequest), ClassInvalid},
		{"not found", fmt.Errorf("%w: recipient has no preferences", ErrNotFound), ClassNotFound},
		{"never decided", fmt.Errorf("refund %q: %w", "m1", ErrNeverDecided), ClassNotFound},
		{"not forwarded", fmt.Errorf("refund %q: %w", "m1", ErrNotForwarded), ClassConflict},
		{"ledger incomplete", fmt.Errorf("refund %q: %w", "m1", ErrLedgerIncomplete), ClassConflict},
		{"unavailable", fmt.Errorf("redis: %w: dial tcp", ErrUnavailable), ClassUnavailable},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), ClassUnavailable},
		{"canceled", fmt.Errorf("query: %w", context.Canceled), ClassUnavailable},
		{"permanent alone", fmt.Errorf("commit: %w: invalid byte sequence", ErrPermanent), ClassInternal},
		{"invalid admit request alone", fmt.Errorf("%w: empty id", ErrInvalidRequest), ClassInternal},
		{"unknown", errors.New("nil map"), ClassInternal},
		{"invalid before unavailable", fmt.Errorf("%w: %w", ErrUnavailable, invalidf("x")), ClassPark},
		{"bad request before unavailable", fmt.Errorf("%w: %w", ErrUnavailable, ErrBadRequest), ClassInvalid},
		{"unavailable before not found", fmt.Errorf("%w: %w", ErrNeverDecided, ErrUnavailable), ClassUnavailable},
		{"unavailable before conflict", fmt.Errorf("%w: %w", ErrNotForwarded, context.DeadlineExceeded), ClassUnavailable},
	} {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("%s: Classify(%v) = %d, want %d", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestCheckFailure(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{invalidf("bad"), "invalid check: bad"},
		{fmt.Errorf("window admit: %w", ErrUnavailable), "the window store or the audit store did not answer: ask again, with the same id"},
		{fmt.Errorf("redis at 10.0.0.1: %w", context.Canceled), "the window store or the audit store did not answer: ask again, with the same id"},
		{errors.New("bug at 10.0.0.1"), "internal error"},
	} {
		if got := CheckFailure(tt.err); got != tt.want {
			t.Errorf("CheckFailure(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestPriorAnswer(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	a := PriorAnswer(Prior{Outcome: OutcomeForward, At: at})
	if a.Decision != OutcomeForward || !a.Admitted || !a.Duplicate || !a.DecidedAt.Equal(at) || a.Limit != nil {
		t.Errorf("got %+v", a)
	}
	if a := PriorAnswer(Prior{Outcome: OutcomeSuppress, At: at}); a.Admitted {
		t.Errorf("a suppression read back as admitted: %+v", a)
	}
}
