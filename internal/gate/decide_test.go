package gate

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	now := time.Date(2026, 11, 22, 8, 0, 0, 0, time.UTC)
	storeNow := now.Add(time.Second)
	exceeded := &Exceeded{Scope: ScopeScene, Limit: Limit{Window: time.Hour, Max: 1}, Count: 1}
	rs := &RuleSet{
		UnknownScene: ActionDrop,
		Scenes: map[string]SceneRule{
			"sup":    {Limits: []Limit{{Window: time.Hour, Max: 1}}, OnExceed: ActionSuppress, BypassPriorities: []Priority{PriorityUrgent}},
			"drop":   {Limits: []Limit{{Window: time.Hour, Max: 1}}, OnExceed: ActionDrop},
			"shadow": {Limits: []Limit{{Window: time.Hour, Max: 1}}, OnExceed: ActionSuppress, Shadow: true},
		},
	}
	admitted := AdmitResult{Admitted: true, Now: storeNow}
	rejected := AdmitResult{Exceeded: exceeded, NextAllowedAt: now.Add(time.Hour), Now: storeNow}
	tests := []struct {
		name     string
		scene    string
		priority Priority
		res      AdmitResult
		want     Decision
	}{
		{"admitted", "sup", PriorityNormal, admitted, Decision{Outcome: OutcomeForward, At: storeNow}},
		{"duplicate", "sup", PriorityNormal, AdmitResult{Admitted: true, Duplicate: true, Now: storeNow}, Decision{Outcome: OutcomeForward, Duplicate: true, At: storeNow}},
		{"suppressed", "sup", PriorityNormal, rejected, Decision{Outcome: OutcomeSuppress, Reason: "limit", Exceeded: exceeded, NextAllowedAt: now.Add(time.Hour), At: storeNow}},
		{"bypass", "sup", PriorityUrgent, admitted, Decision{Outcome: OutcomeForward, Bypass: true, At: storeNow}},
		{"dropped", "drop", PriorityNormal, rejected, Decision{Outcome: OutcomeDrop, Reason: "limit", Exceeded: exceeded, NextAllowedAt: now.Add(time.Hour), At: storeNow}},
		{"shadow", "shadow", PriorityNormal, rejected, Decision{Outcome: OutcomeForward, Shadow: true, ShadowOf: ActionSuppress, Reason: "limit", Exceeded: exceeded, NextAllowedAt: now.Add(time.Hour), At: storeNow}},
		{"unknown scene", "nope", PriorityNormal, AdmitResult{}, Decision{Outcome: OutcomeDrop, Reason: "unknown_scene", At: now}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Message{ID: "m", Scene: tt.scene, ReceiveIDType: "open_id", ReceiveID: "ou", Priority: tt.priority}
			p := PlanMessage(rs, m, now)
			if tt.scene == "nope" && p.Request != nil {
				t.Fatal("an unknown scene must not touch the window store")
			}
			if tt.priority == PriorityUrgent && (p.Request == nil || !p.Request.Force) {
				t.Fatal("a bypass priority must force admission")
			}
			got := Resolve(rs, p, tt.res, now)
			if got.Outcome != tt.want.Outcome || got.Shadow != tt.want.Shadow || got.ShadowOf != tt.want.ShadowOf ||
				got.Bypass != tt.want.Bypass || got.Duplicate != tt.want.Duplicate || got.Reason != tt.want.Reason ||
				got.Exceeded != tt.want.Exceeded || !got.NextAllowedAt.Equal(tt.want.NextAllowedAt) || !got.At.Equal(tt.want.At) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestPlanCarriesCaps(t *testing.T) {
	rs := &RuleSet{RecipientCaps: []Limit{{Window: 24 * time.Hour, Max: 20}}, Scenes: map[string]SceneRule{"s": {Limits: []Limit{{Window: time.Hour, Max: 1}}}}}
	p := PlanMessage(rs, Message{ID: "m", Scene: "s", ReceiveIDType: "email", ReceiveID: "a@b"}, time.Time{})
	if p.Request == nil || len(p.Request.Caps) != 1 || p.Request.Recipient != "email:a@b" {
		t.Fatalf("plan = %+v, want a request with the recipient caps", p.Request)
	}
}

func TestDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"500ms": 500 * time.Millisecond, "1h": time.Hour, "7d": 7 * 24 * time.Hour, "90s": 90 * time.Second} {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "1.5d", "-1d", "soon", "1x"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) succeeded, want an error", bad)
		}
	}
	for d, want := range map[time.Duration]string{time.Hour: "1h", 10 * time.Second: "10s", 90 * time.Minute: "1h30m", 48 * time.Hour: "2d", 500 * time.Millisecond: "500ms", time.Minute: "1m"} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// holdRules has a scene for each way a message can be held.
func holdRules() *RuleSet {
	hour := []Limit{{Window: time.Hour, Max: 1}}
	quiet := func(a Action) *QuietHours { return &QuietHours{From: 22 * time.Hour, To: 8 * time.Hour, Action: a} }
	return &RuleSet{UnknownScene: ActionForward, Scenes: map[string]SceneRule{
		"defer":       {Limits: hour, OnExceed: ActionDefer, MaxDefer: 6 * time.Hour, DeferFallback: ActionDrop, BypassPriorities: []Priority{PriorityUrgent}},
		"digest":      {Limits: hour, OnExceed: ActionDigest, DigestGroup: "ci"},
		"shadowdefer": {Limits: hour, OnExceed: ActionDefer, Shadow: true},
		"quietdefer":  {Limits: hour, OnExceed: ActionSuppress, QuietHours: quiet(ActionDefer), BypassPriorities: []Priority{PriorityUrgent}},
		"quietsup":    {Limits: hour, OnExceed: ActionSuppress, QuietHours: quiet(ActionSuppress)},
		"quietdrop":   {Limits: hour, OnExceed: ActionDefer, QuietHours: quiet(ActionDrop)},
		"quietshadow": {Limits: hour, OnExceed: ActionSuppress, Shadow: true, QuietHours: quiet(ActionSuppress)},
		"shanghai":    {Limits: hour, OnExceed: ActionSuppress, QuietHours: quiet(ActionDefer), Zone: time.FixedZone("UTC+8", 8*3600)},
	}}
}

// Over its limit, a message of a defer scene is held in its scene's queue
// until the window reopens, and expires after max_defer; one of a digest
// scene joins its group's digest; a shadow scene forwards.
func TestResolveHolds(t *testing.T) {
	rs := holdRules()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	next := now.Add(40 * time.Minute)
	rejected := AdmitResult{Exceeded: &Exceeded{Scope: ScopeScene, Limit: Limit{Window: time.Hour, Max: 1}, Count: 1}, NextAllowedAt: next, Now: now}
	plan := func(scene string, p Priority) Plan {
		return PlanMessage(rs, Message{ID: "m", Scene: scene, ReceiveIDType: "open_id", ReceiveID: "ou", Priority: p}, now)
	}

	p := plan("defer", PriorityNormal)
	if want := []HoldQueue{{Queue{"open_id:ou", "defer"}, HoldDefer}}; !slices.Equal(p.Queues, want) {
		t.Fatalf("defer plan queues = %v, want %v", p.Queues, want)
	}
	d := Resolve(rs, p, rejected, now)
	if d.Outcome != OutcomeDefer || d.Reason != ReasonLimit || !d.HoldUntil.Equal(next) || d.Queue != (Queue{"open_id:ou", "defer"}) ||
		!d.Expires.Equal(now.Add(6*time.Hour)) || d.Fallback != ActionDrop {
		t.Errorf("defer: got %+v", d)
	}

	if p := plan("defer", PriorityUrgent); len(p.Queues) != 0 || !p.Request.Force {
		t.Errorf("bypass: plan %+v, want no queues and a forced request", p)
	}

	p = plan("digest", PriorityNormal)
	d = Resolve(rs, p, rejected, now)
	if d.Outcome != OutcomeDigest || d.Queue != (Queue{"open_id:ou", "digest:ci"}) || !d.HoldUntil.Equal(next) || !d.Expires.IsZero() {
		t.Errorf("digest: got %+v", d)
	}

	p = plan("shadowdefer", PriorityNormal)
	d = Resolve(rs, p, rejected, now)
	if len(p.Queues) != 0 || d.Outcome != OutcomeForward || !d.Shadow || d.ShadowOf != ActionDefer || d.Holds() {
		t.Errorf("shadow defer: plan queues %v, got %+v", p.Queues, d)
	}
}

// During quiet hours no window is asked: the message gets the quiet action,
// quiet_hours is named as the limit hit, and the end of quiet hours as the
// time to come back. A bypass priority, and a time outside quiet hours in
// the message's zone, skip them.
func TestResolveQuietHours(t *testing.T) {
	rs := holdRules()
	night := time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	end := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	msg := func(scene string) Message {
		return Message{ID: "m", Scene: scene, ReceiveIDType: "open_id", ReceiveID: "ou"}
	}
	tests := []struct {
		scene   string
		outcome Outcome
		shadow  bool
	}{
		{"quietdefer", OutcomeDefer, false},
		{"quietsup", OutcomeSuppress, false},
		{"quietdrop", OutcomeDrop, false},
		{"quietshadow", OutcomeForward, true},
	}
	for _, tt := range tests {
		t.Run(tt.scene, func(t *testing.T) {
			p := PlanMessage(rs, msg(tt.scene), night)
			if !p.Quiet || !p.QuietUntil.Equal(end) {
				t.Fatalf("plan: quiet %v until %v, want quiet until %v", p.Quiet, p.QuietUntil, end)
			}
			if (p.Request != nil) != tt.shadow {
				t.Fatalf("plan request %v: only a shadow scene asks the window during quiet hours", p.Request)
			}
			res := AdmitResult{}
			if tt.shadow {
				res = AdmitResult{Admitted: true, Now: night}
			}
			d := Resolve(rs, p, res, night)
			if d.Outcome != tt.outcome || d.Shadow != tt.shadow || d.Reason != ReasonQuietHours ||
				d.Exceeded == nil || d.Exceeded.Scope != ScopeQuietHours || !d.NextAllowedAt.Equal(end) {
				t.Fatalf("got %+v, want %s (shadow %v) for quiet_hours until %v", d, tt.outcome, tt.shadow, end)
			}
			if tt.outcome == OutcomeDefer && (!d.HoldUntil.Equal(end) || d.Queue != (Queue{"open_id:ou", tt.scene}) || d.Fallback != ActionSuppress ||
				!d.Expires.Equal(night.Add(DefaultMaxDefer))) {
				t.Fatalf("quiet defer hold: %+v", d)
			}
			rec := RecordOf("m", msg(tt.scene), d, 7, "v")
			if s := rec.Suppression; tt.outcome != OutcomeDrop && (s == nil || s.Scope != ScopeQuietHours || s.Reason != ReasonQuietHours) {
				t.Fatalf("audit row %+v, want limit_scope and reason quiet_hours", s)
			}
		})
	}

	urgent := msg("quietdefer")
	urgent.Priority = PriorityUrgent
	if p := PlanMessage(rs, urgent, night); p.Quiet || p.Request == nil {
		t.Errorf("bypass priority: plan %+v, want no quiet hours and a window request", p)
	}
	// 23:00 UTC is 07:00 in UTC+8, the scene's zone: still quiet, until
	// 08:00 there. A message naming UTC-5 (18:00) is not.
	p := PlanMessage(rs, msg("shanghai"), night)
	if !p.Quiet || !p.QuietUntil.Equal(night.Add(time.Hour)) || p.Request != nil {
		t.Errorf("scene zone: quiet %v until %v, want until %v", p.Quiet, p.QuietUntil, night.Add(time.Hour))
	}
	west := msg("shanghai")
	west.TZ, west.Zone = "UTC-5", time.FixedZone("UTC-5", -5*3600)
	if p := PlanMessage(rs, west, night); p.Quiet || p.Request == nil || p.Request.Zone != west.Zone {
		t.Errorf("message zone: plan %+v, want no quiet hours and a request in the message's zone", p)
	}
}

// A message held behind others of its queue joins that queue, due at once,
// for the reason "queued".
func TestQueued(t *testing.T) {
	rs := holdRules()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	m := Message{ID: "m", Scene: "defer", ReceiveIDType: "open_id", ReceiveID: "ou", Priority: PriorityHigh, TZ: "Asia/Shanghai", Raw: []byte(`{"id":"m"}`)}
	p := PlanMessage(rs, m, now)
	d := Queued(p, p.Queues[0], now)
	if d.Outcome != OutcomeDefer || d.Reason != ReasonQueued || !d.HoldUntil.Equal(now) || d.Queue != p.Queues[0].Queue || d.Fallback != ActionDrop {
		t.Fatalf("queued: %+v", d)
	}
	rec := RecordOf("m", m, d, 42, "v1")
	want := Held{MessageID: "m", Kind: HoldDefer, Queue: Queue{"open_id:ou", "defer"}, Scene: "defer", Priority: PriorityHigh, TZ: "Asia/Shanghai",
		Seq: 42, HeldAt: now, DueAt: now, Expires: now.Add(6 * time.Hour), Fallback: ActionDrop, Reason: ReasonQueued}
	h := rec.Hold
	if h == nil || string(h.Payload) != `{"id":"m"}` {
		t.Fatalf("hold %+v, want the original bytes", h)
	}
	h.Payload = nil
	if !reflect.DeepEqual(*h, want) {
		t.Errorf("hold\n got %+v\nwant %+v", *h, want)
	}
	if s := rec.Suppression; s == nil || s.HeldAs != HoldDefer || s.Reason != ReasonQueued {
		t.Errorf("audit row %+v, want one held as defer", s)
	}
	if rec.Outcome != OutcomeDefer {
		t.Errorf("record outcome %s, want defer", rec.Outcome)
	}

	dg := PlanMessage(rs, Message{ID: "g", Scene: "digest", ReceiveIDType: "open_id", ReceiveID: "ou"}, now)
	d = Queued(dg, dg.Queues[0], now)
	if d.Outcome != OutcomeDigest || d.Queue.Name != "digest:ci" || !d.Expires.IsZero() {
		t.Fatalf("queued digest: %+v", d)
	}
	if d := d.WithoutHold(); d.Outcome != OutcomeSuppress || d.Queue != (Queue{}) {
		t.Errorf("without a hold store: %+v, want a plain suppression", d)
	}
}

// A deferred message is due by its expiry at the latest: the releaser
// meets it then and applies its fallback, not at a reopening after it.
func TestHoldDueByExpiry(t *testing.T) {
	rs := holdRules()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	m := Message{ID: "m", Scene: "defer", ReceiveIDType: "open_id", ReceiveID: "ou"}
	res := AdmitResult{Exceeded: &Exceeded{Scope: ScopeScene}, NextAllowedAt: now.Add(30 * time.Hour), Now: now}
	d := Resolve(rs, PlanMessage(rs, m, now), res, now)
	if !d.HoldUntil.Equal(now.Add(6*time.Hour)) || !d.NextAllowedAt.Equal(now.Add(30*time.Hour)) {
		t.Errorf("due %v (next allowed %v), want the expiry %v", d.HoldUntil, d.NextAllowedAt, now.Add(6*time.Hour))
	}
}
