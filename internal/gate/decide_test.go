package gate

import (
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
			p := PlanMessage(rs, m)
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
	p := PlanMessage(rs, Message{ID: "m", Scene: "s", ReceiveIDType: "email", ReceiveID: "a@b"})
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
