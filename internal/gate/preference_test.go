package gate

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPreferencesMutes(t *testing.T) {
	now := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		p     *Preferences
		scene string
		want  bool
	}{
		{"nil", nil, "a", false},
		{"listed", &Preferences{MutedScenes: []string{"a"}}, "a", true},
		{"not listed", &Preferences{MutedScenes: []string{"a"}}, "b", false},
		{"all", &Preferences{MutedScenes: []string{MuteAll}}, "b", true},
		{"until later", &Preferences{MutedScenes: []string{"a"}, MutedUntil: now.Add(time.Minute)}, "a", true},
		{"until now", &Preferences{MutedScenes: []string{"a"}, MutedUntil: now}, "a", false},
		{"until past", &Preferences{MutedScenes: []string{MuteAll}, MutedUntil: now.Add(-time.Minute)}, "a", false},
		{"digest only is no mute", &Preferences{DigestScenes: []string{"a"}}, "a", false},
	}
	for _, tt := range tests {
		if got := tt.p.Mutes(tt.scene, now); got != tt.want {
			t.Errorf("%s: Mutes(%q) = %v, want %v", tt.name, tt.scene, got, tt.want)
		}
	}
	p := &Preferences{DigestScenes: []string{"a"}}
	if !p.DigestOnly("a") || p.DigestOnly("b") || (*Preferences)(nil).DigestOnly("a") {
		t.Errorf("DigestOnly: want a only, got a=%v b=%v", p.DigestOnly("a"), p.DigestOnly("b"))
	}
}

func TestPreferencesCheck(t *testing.T) {
	ok := Preferences{Recipient: "open_id:ou_1", MutedScenes: []string{"b", "*", "a", "b"}, DigestScenes: nil,
		MutedUntil: time.Date(2026, 11, 24, 9, 0, 0, 0, time.FixedZone("x", 3600))}
	if err := ok.Check(); err != nil {
		t.Fatalf("Check(%+v) = %v, want nil", ok, err)
	}
	if want := []string{"*", "a", "b"}; !slices.Equal(ok.MutedScenes, want) {
		t.Errorf("muted_scenes = %q, want %q (sorted, once each)", ok.MutedScenes, want)
	}
	if ok.DigestScenes == nil || ok.MutedUntil.Location() != time.UTC {
		t.Errorf("digest_only = %#v, muted_until in %v: want [] and UTC", ok.DigestScenes, ok.MutedUntil.Location())
	}
	many := make([]string, MaxPreferenceScenes+1)
	for i := range many {
		many[i] = strings.Repeat("s", i+1)
	}
	bad := []struct {
		name string
		p    Preferences
		want string
	}{
		{"no colon", Preferences{Recipient: "ou_1"}, "receive_id_type:receive_id"},
		{"bad type", Preferences{Recipient: "phone:1"}, "receive_id_type"},
		{"empty id", Preferences{Recipient: "open_id:"}, "missing or empty"},
		{"control in id", Preferences{Recipient: "open_id:a\x01"}, "control"},
		{"long id", Preferences{Recipient: "open_id:" + strings.Repeat("x", MaxReceiveIDBytes+1)}, "over the limit"},
		{"too many", Preferences{Recipient: "open_id:a", MutedScenes: many}, "over the limit of"},
		{"empty scene", Preferences{Recipient: "open_id:a", DigestScenes: []string{" "}}, "digest_only[0]"},
		{"star in digest", Preferences{Recipient: "open_id:a", DigestScenes: []string{"*"}}, "digest_only[0]"},
		{"bidi", Preferences{Recipient: "open_id:a", MutedScenes: []string{"*", "\u202e"}}, "muted_scenes[1]"},
		{"long scene", Preferences{Recipient: "open_id:a", MutedScenes: []string{strings.Repeat("s", MaxSceneBytes+1)}}, "muted_scenes[0]"},
		{"year", Preferences{Recipient: "open_id:a", MutedUntil: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "muted_until"},
	}
	for _, tt := range bad {
		err := tt.p.Check()
		if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Check = %v, want an ErrBadRequest saying %q", tt.name, err, tt.want)
		}
	}
}

func TestPlanWithPreferences(t *testing.T) {
	now := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	rs := &RuleSet{Scenes: map[string]SceneRule{
		"s": {Limits: []Limit{{Window: 24 * time.Hour, Max: 5}, {Window: 10 * time.Minute, Max: 1}}, OnExceed: ActionDefer,
			BypassPriorities: []Priority{PriorityUrgent}, QuietHours: &QuietHours{From: 0, To: 24*time.Hour - time.Minute, Action: ActionDefer}},
		"cal":    {Limits: []Limit{{Calendar: CalendarDay, Max: 1}}, OnExceed: ActionSuppress, DigestGroup: "g"},
		"shadow": {Limits: []Limit{{Window: time.Hour, Max: 1}}, OnExceed: ActionSuppress, Shadow: true},
	}}
	msg := func(scene string, p Priority) Message {
		return Message{ID: "m", Scene: scene, ReceiveIDType: "open_id", ReceiveID: "ou", Priority: p}
	}
	muted := &Preferences{MutedScenes: []string{MuteAll}, MutedUntil: now.Add(time.Hour), DigestScenes: []string{"s"}}
	digest := &Preferences{DigestScenes: []string{"s", "cal", "shadow"}}
	tests := []struct {
		name  string
		m     Message
		prefs *Preferences
		want  Decision
		ask   bool // the plan asks the window store
	}{
		{"muted wins over digest and quiet hours", msg("s", PriorityNormal), muted,
			Decision{Outcome: OutcomeSuppress, Reason: ReasonPreference, NextAllowedAt: now.Add(time.Hour)}, false},
		{"digest only, shortest window", msg("s", PriorityNormal), digest,
			Decision{Outcome: OutcomeDigest, Reason: ReasonPreference, Queue: Queue{"open_id:ou", "digest:s"}, HoldUntil: now.Add(10 * time.Minute)}, false},
		{"digest only, no rolling window, digest group", msg("cal", PriorityNormal), digest,
			Decision{Outcome: OutcomeDigest, Reason: ReasonPreference, Queue: Queue{"open_id:ou", "digest:g"}, HoldUntil: now.Add(DefaultPreferenceDigestDelay)}, false},
		{"bypass passes a mute", msg("s", PriorityUrgent), muted, Decision{Outcome: OutcomeForward, Bypass: true}, true},
		{"shadow forwards a mute", msg("shadow", PriorityNormal), muted,
			Decision{Outcome: OutcomeForward, Shadow: true, ShadowOf: ActionSuppress, Reason: ReasonPreference, NextAllowedAt: now.Add(time.Hour)}, true},
		{"shadow forwards a digest", msg("shadow", PriorityNormal), digest,
			Decision{Outcome: OutcomeForward, Shadow: true, ShadowOf: ActionDigest, Reason: ReasonPreference}, true},
		{"other scene unmuted", msg("cal", PriorityNormal), &Preferences{MutedScenes: []string{"s"}}, Decision{Outcome: OutcomeForward}, true},
		{"mute over", msg("cal", PriorityNormal), &Preferences{MutedScenes: []string{"cal"}, MutedUntil: now}, Decision{Outcome: OutcomeForward}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PlanWithPreferences(rs, tt.m, tt.prefs, now)
			if (p.Request != nil) != tt.ask {
				t.Fatalf("plan asks the window store: %v, want %v", p.Request != nil, tt.ask)
			}
			if p.Preference != "" && !p.Rule.Shadow && len(p.Queues) != 0 {
				t.Errorf("queues = %v, want none: preferences decide whatever the held queues hold", p.Queues)
			}
			got := Resolve(rs, p, AdmitResult{Admitted: true, Now: now}, now)
			got.At = time.Time{}
			if tt.want.Reason == ReasonPreference {
				if got.Exceeded == nil || got.Exceeded.Scope != ScopePreference {
					t.Errorf("exceeded = %+v, want scope preference", got.Exceeded)
				}
				got.Exceeded = nil
			}
			if tt.want.Outcome == OutcomeDigest {
				tt.want.NextAllowedAt = tt.want.HoldUntil
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if got := PlanWithPreferences(rs, msg("nope", PriorityNormal), muted, now); got.Known || got.Preference != "" {
		t.Errorf("unknown scene: plan %+v, want the unknown_scene action, preferences unread", got)
	}
}
