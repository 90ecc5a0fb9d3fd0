package preview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/inmem"
)

// Notes are what every preview says it cannot know.
var Notes = []string{
	"deferred and digested messages are counted as held when decided; their release, fallback or digest is not simulated",
	"a message that would have been queued behind held messages of its recipient is decided on its own windows",
	"the windows start with the decisions of the longest limit's span before since (at most 8 days), which are replayed but not counted",
	"invalid and parked messages are not replayed: they are counted as they were",
}

// maxWarmup bounds how far before since a preview reads to fill its
// windows: a calendar week and a day of zone offsets.
const maxWarmup = 8 * 24 * time.Hour

// warmup is how far back from a period's start a decision can still count
// in a window of rs: the longest rolling window, the longest calendar
// period (a week, or a day, plus a zone's offset), a rate limit's burst.
func warmup(rs *gate.RuleSet) time.Duration {
	var d time.Duration
	span := func(ls []gate.Limit) {
		for _, l := range ls {
			switch {
			case l.Calendar == gate.CalendarWeek:
				d = max(d, maxWarmup)
			case l.Calendar == gate.CalendarDay:
				d = max(d, 2*24*time.Hour)
			case l.Rate > 0:
				d = max(d, l.Rate*time.Duration(l.Max))
			default:
				d = max(d, l.Window)
			}
		}
	}
	span(rs.RecipientCaps)
	for _, r := range rs.Scenes {
		span(r.Limits)
	}
	return min(d, maxWarmup)
}

// replay is one preview in progress: the proposed rules, windows of its
// own on a clock that is each decision's time, and the counts so far.
// Decisions before since only fill the windows.
type replay struct {
	rs    *gate.RuleSet
	store *inmem.Store
	clock time.Time
	max   int64
	since time.Time
	work  int64 // rows replayed, warm-up included: what max bounds

	scenes        map[string]*gate.ScenePreview
	zones         map[string]*time.Location
	read          int64
	replayed      int64
	notReplayable int64
	truncated     bool
	reached       time.Time
	req           [1]gate.AdmitRequest
}

func newReplay(rs *gate.RuleSet, max int64, since time.Time) *replay {
	rp := &replay{rs: rs, max: max, since: since, scenes: map[string]*gate.ScenePreview{}, zones: map[string]*time.Location{}}
	// A sweep walks every window: one a minute of ledger time, the store's
	// default, would walk them all every few hundred decisions of a busy
	// ledger. One an hour keeps expired windows at most an hour longer.
	rp.store = inmem.New(inmem.Options{Now: func() time.Time { return rp.clock }, SweepEvery: time.Hour})
	return rp
}

// page replays one page of the ledger, or returns errEnough once the bound
// of decisions is reached and there is more.
func (rp *replay) page(ctx context.Context, page []gate.LedgerEntry) error {
	for i := range page {
		if rp.work >= rp.max {
			rp.truncated = true
			return errEnough
		}
		rp.work++
		if page[i].At.Before(rp.since) {
			if err := rp.warm(ctx, &page[i]); err != nil {
				return err
			}
			continue
		}
		rp.read++
		if err := rp.entry(ctx, &page[i]); err != nil {
			return err
		}
	}
	return nil
}

// entry counts one ledger row then, and, when it can be replayed, now.
func (rp *replay) entry(ctx context.Context, e *gate.LedgerEntry) error {
	rp.reached = e.At
	if e.Outcome == gate.OutcomeInvalid || e.Outcome == gate.OutcomeParked {
		s := rp.scene(e.Scene)
		s.Then.Add(e.Outcome, false)
		s.Now.Add(e.Outcome, false)
		return nil
	}
	if e.Scene == "" || e.Recipient == "" {
		rp.notReplayable++
		return nil
	}
	d, err := rp.decide(ctx, e)
	if err != nil {
		return err
	}
	rp.replayed++
	s := rp.scene(e.Scene)
	s.Then.Add(e.Outcome, false)
	s.Now.Add(d.Outcome, d.Shadow)
	return nil
}

// warm replays a decision before the period into the windows, uncounted.
func (rp *replay) warm(ctx context.Context, e *gate.LedgerEntry) error {
	if e.Outcome == gate.OutcomeInvalid || e.Outcome == gate.OutcomeParked || e.Scene == "" || e.Recipient == "" {
		return nil
	}
	_, err := rp.decide(ctx, e)
	return err
}

// decide decides e's message under the proposed rules at e's time, as the
// pipeline would: plan, then the window store's verdict when the plan asks
// for one, then resolve.
func (rp *replay) decide(ctx context.Context, e *gate.LedgerEntry) (gate.Decision, error) {
	typ, id, _ := strings.Cut(e.Recipient, ":")
	m := gate.Message{ID: e.Key, Scene: e.Scene, ReceiveIDType: typ, ReceiveID: id,
		Priority: e.Priority, TZ: e.TZ, Zone: rp.zone(e.TZ)}
	at := e.At.UTC()
	p := gate.PlanMessage(rp.rs, m, at)
	var res gate.AdmitResult
	if p.Request != nil {
		rp.clock = at
		rp.req[0] = *p.Request
		out, err := rp.store.Admit(ctx, rp.req[:])
		if err != nil {
			if errors.Is(err, gate.ErrInvalidRequest) {
				return gate.Decision{}, &badRequest{fmt.Errorf("the proposed document cannot be replayed: scene %q: %w", e.Scene, err)}
			}
			return gate.Decision{}, fmt.Errorf("replay %s: %w", e.Key, err)
		}
		res = out[0]
	}
	return gate.Resolve(rp.rs, p, res, at), nil
}

// zone loads a message's zone once per preview. The ledger holds only
// zones the gate accepted; one that no longer loads is decided in its
// scene's zone, as a message naming none.
func (rp *replay) zone(tz string) *time.Location {
	if tz == "" {
		return nil
	}
	if z, ok := rp.zones[tz]; ok {
		return z
	}
	z, err := gate.LoadZone(tz)
	if err != nil {
		z = nil
	}
	rp.zones[tz] = z
	return z
}

func (rp *replay) scene(name string) *gate.ScenePreview {
	s := rp.scenes[name]
	if s == nil {
		s = &gate.ScenePreview{Scene: name}
		rp.scenes[name] = s
	}
	return s
}

// result is the preview of what was replayed.
func (rp *replay) result(since, until time.Time) *gate.RulePreview {
	out := &gate.RulePreview{
		Version: rp.rs.Version, Since: since.UTC(), Until: until.UTC(),
		Decisions: rp.read, Replayed: rp.replayed, NotReplayable: rp.notReplayable,
		Truncated: rp.truncated, Limit: rp.max,
		Scenes: make([]gate.ScenePreview, 0, len(rp.scenes)),
		Notes:  slices.Clone(Notes),
	}
	if rp.truncated {
		out.ReachedAt = rp.reached.UTC()
	}
	for _, s := range rp.scenes {
		out.Scenes = append(out.Scenes, *s)
		out.Total.Then.Merge(s.Then)
		out.Total.Now.Merge(s.Now)
	}
	sort.Slice(out.Scenes, func(i, j int) bool { return out.Scenes[i].Scene < out.Scenes[j].Scene })
	return out
}
