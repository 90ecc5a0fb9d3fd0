package pipeline

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// prefBox is a preference store in memory that counts its lookups; fail,
// when set, fails them.
type prefBox struct {
	gate.PreferenceStore
	mu      sync.Mutex
	prefs   map[string]gate.Preferences
	lookups [][]string
	fail    error
}

func (b *prefBox) Preferences(_ context.Context, rs []string) (map[string]gate.Preferences, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lookups = append(b.lookups, slices.Clone(rs))
	if b.fail != nil {
		return nil, b.fail
	}
	out := map[string]gate.Preferences{}
	for _, r := range rs {
		if p, ok := b.prefs[r]; ok {
			out[r] = p
		}
	}
	return out, nil
}

func newPrefEnv(t *testing.T, prefs gate.Preferences) (*holdEnv, *prefBox) {
	t.Helper()
	e := newHoldEnv(t, true)
	box := &prefBox{prefs: map[string]gate.Preferences{prefs.Recipient: prefs}}
	e.p.core.prefs = box
	return e, box
}

// A muted scene's message is suppressed with reason and scope preference,
// without asking its window (it takes no slot); a bypass priority of the
// scene passes; a shadow scene forwards and says it would have suppressed;
// another scene is untouched. One lookup serves the batch.
func TestPreferenceMute(t *testing.T) {
	until := noon.Add(3 * time.Hour)
	e, box := newPrefEnv(t, gate.Preferences{Recipient: "open_id:ou_1", MutedScenes: []string{"d", "sh"}, MutedUntil: until})
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{
		e.msg("d", "d1", ""), e.msg("d", "d2", gate.PriorityUrgent), e.msg("sh", "sh1", ""), e.msg("s", "s1", ""),
	}))
	r := e.record(t, "d1")
	if r.Outcome != gate.OutcomeSuppress || r.Suppression == nil || r.Suppression.Reason != gate.ReasonPreference ||
		r.Suppression.Scope != gate.ScopePreference || !r.Suppression.NextAllowedAt.Equal(until) {
		t.Errorf("d1: %s, row %+v; want suppressed for preference until %v", r.Outcome, r.Suppression, until)
	}
	if e.store.wasAsked("d1") {
		t.Error("a muted message took a window slot")
	}
	if got, want := e.out.forwarded(), []string{"d2", "sh1", "s1"}; !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
	if sh := e.record(t, "sh1"); !sh.Shadow || sh.ShadowOf != gate.ActionSuppress || sh.Suppression == nil || sh.Suppression.Reason != gate.ReasonPreference {
		t.Errorf("sh1: %+v, want a shadow forward of a preference suppression", sh)
	}
	if len(box.lookups) != 1 || !slices.Equal(box.lookups[0], []string{"open_id:ou_1"}) {
		t.Errorf("lookups %q, want one for the batch's one recipient", box.lookups)
	}

	e.now = until // the mute is over
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("d", "d3", "")}))
	if got := e.out.forwarded(); !slices.Contains(got, "d3") {
		t.Errorf("after muted_until: forwarded %v, want d3 too", got)
	}
}

// A digest_only scene's messages join the scene's digest queue, due one of
// its shortest windows later (here 1 h), without asking the window; the
// queue's later messages join them there.
func TestPreferenceDigestOnly(t *testing.T) {
	e, _ := newPrefEnv(t, gate.Preferences{Recipient: "open_id:ou_1", DigestScenes: []string{"s", "g1"}})
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("s", "s1", ""), e.msg("s", "s2", ""), e.msg("g1", "g1", "")}))
	for _, id := range []string{"s1", "s2"} {
		if h := e.held(t, id, gate.HoldDigest, "digest:s", gate.ReasonPreference); !h.DueAt.Equal(noon.Add(time.Hour)) {
			t.Errorf("%s due at %v, want %v", id, h.DueAt, noon.Add(time.Hour))
		}
		if e.store.wasAsked(id) {
			t.Errorf("%s: a digest_only message asked its window", id)
		}
	}
	e.held(t, "g1", gate.HoldDigest, "digest:grp", gate.ReasonPreference)
	if got := e.out.forwarded(); len(got) != 0 {
		t.Errorf("forwarded %v, want nothing", got)
	}
}

// A failing lookup fails open: the batch is decided without preferences.
func TestPreferenceLookupFailsOpen(t *testing.T) {
	e, box := newPrefEnv(t, gate.Preferences{Recipient: "open_id:ou_1", MutedScenes: []string{gate.MuteAll}})
	box.fail = errors.New("audit store down")
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("s", "s1", "")}))
	if got := e.out.forwarded(); !slices.Equal(got, []string{"s1"}) {
		t.Errorf("forwarded %v, want [s1]: preferences fail open", got)
	}
}
