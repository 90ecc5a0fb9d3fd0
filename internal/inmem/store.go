package inmem

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// DefaultSweepEvery is how often, by default, Admit drops expired windows.
const DefaultSweepEvery = time.Minute

// expiryMargin keeps a window a little past its longest limit (or the end
// of its calendar period), as the Redis store's PEXPIRE does.
const expiryMargin = 1000 // ms

// Options tunes a Store. The zero value means the defaults.
type Options struct {
	// Now is the store's clock (default time.Now). Decisions use it at
	// millisecond resolution, like Redis TIME.
	Now func() time.Time
	// SweepEvery is how much store time passes between two sweeps of expired
	// windows (default one minute). Admit runs the sweep when it is due, so
	// memory is bounded without a background goroutine: an idle store does
	// not grow, and a busy one holds a window at most its longest limit,
	// plus one second, plus SweepEvery.
	SweepEvery time.Duration
}

// Store is a gate.WindowStore in process memory. It is safe for concurrent
// use; every Admit call holds one mutex, so a batch is decided as one step.
// Memory per window is bounded by the largest Max of its limits.
type Store struct {
	now        func() time.Time
	sweepEvery int64 // ms

	mu      sync.Mutex
	windows map[windowKey]*window
	// rates holds the GCRA state of rate limits, by the key of the window
	// they belong to: a scene's, or the recipient's caps.
	rates     map[windowKey]*rateState
	nextSweep int64 // ms
}

// rateState is a rate limit's theoretical arrival time: the store time at
// which every slot of its burst is free again.
type rateState struct {
	tat     int64 // ms
	expires int64 // ms; tat plus the margin
}

var _ gate.WindowStore = (*Store)(nil)

// windowKey names a window: a (recipient, scene) window, or with capWindow
// set, the recipient's window across scenes.
type windowKey struct {
	recipient, scene string
	capWindow        bool
}

// window is one sorted set: entries ascending by (at, id), as Redis orders
// equal scores by member, so trims remove the same members in both stores.
type window struct {
	entries []entry
	expires int64 // ms; the window is gone once the clock passes it
}

type entry struct {
	at int64 // ms
	id string
	// took is set on the entries of a forced admission (nil on every
	// other): what it took, which Forget gives back.
	took *took
}

// took is what a forced admission took where it may have taken less than a
// plain one, which takes its entries and one interval of each rate limit:
// past a full limit, it moves a rate limit's TAT only up to a burst ahead
// of now, and in a full window its entry takes the place of the oldest.
// Forget gives back exactly this, so that a bypass message's refund never
// frees a slot that someone else's message holds.
type took struct {
	// kept is set when the entry stands where an entry it pushed out of a
	// full window stood (a window keeps only its newest members): that one
	// still counted, so the entry stays and holds its place.
	kept bool
	// scene and caps are how far the admission moved the TAT of the
	// scene's and the caps' rate limit (ms).
	scene, caps int64
}

// plain is what a plain admission took: its entries, and one interval of
// each rate limit (-1).
var plain = took{scene: -1, caps: -1}

func compareEntries(a, b entry) int {
	return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.id, b.id))
}

// New returns an empty Store.
func New(opts Options) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SweepEvery <= 0 {
		opts.SweepEvery = DefaultSweepEvery
	}
	return &Store{
		now:        opts.Now,
		sweepEvery: opts.SweepEvery.Milliseconds(),
		windows:    make(map[windowKey]*window),
		rates:      make(map[windowKey]*rateState),
	}
}

// Admit decides reqs in order; see gate.WindowStore. It fails only when ctx
// is already done (wrapping gate.ErrUnavailable, as a remote store would) or
// when a request is malformed (see gate.AdmitRequest.Validate), which fails
// the whole batch before anything changes. Calendar limits count in the
// period of gate.Limit.Period holding the store's clock, in the request's
// Zone.
func (s *Store) Admit(ctx context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("admit: %w: %w", gate.ErrUnavailable, err)
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, fmt.Errorf("admit: request %d (id %q): %w", i, reqs[i].ID, err)
		}
	}
	results := make([]gate.AdmitResult, len(reqs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range reqs {
		now := s.now().UnixMilli()
		if now >= s.nextSweep {
			s.sweep(now)
			s.nextSweep = now + s.sweepEvery
		}
		results[i] = s.admit(now, &reqs[i])
	}
	return results, nil
}

// keysOf names the windows of r: its scene's and its recipient's caps.
func keysOf(r *gate.AdmitRequest) (scene, caps windowKey) {
	return windowKey{recipient: r.Recipient, scene: r.Scene}, windowKey{recipient: r.Recipient, capWindow: true}
}

// Forget gives back what the admissions of reqs' ids took, as admit.lua's
// forget.lua does; see gate.WindowStore. Their entries leave the scene and
// cap windows, and when the scene window still held the id, the rate
// limits of reqs' Limits and Caps get back what the admission moved their
// theoretical arrival times: one emission interval, or less for a forced
// admission past a full limit (see took).
func (s *Store) Forget(ctx context.Context, reqs []gate.AdmitRequest) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("forget: %w: %w", gate.ErrUnavailable, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMilli()
	for i := range reqs {
		r := &reqs[i]
		sk, ck := keysOf(r)
		t, counted := s.forget(sk, r.ID)
		s.forget(ck, r.ID)
		if !counted {
			continue
		}
		s.giveBack(sk, r.Limits, t.scene, now)
		s.giveBack(ck, r.Caps, t.caps, now)
	}
	return nil
}

// forget takes id out of the window of k and returns what its admission
// took, or false when the window does not hold it. An entry that holds the
// place of one it pushed out (took.kept) stays, and gives nothing back
// again.
func (s *Store) forget(k windowKey, id string) (took, bool) {
	w := s.windows[k]
	if w == nil {
		return took{}, false
	}
	i := slices.IndexFunc(w.entries, func(e entry) bool { return e.id == id })
	if i < 0 {
		return took{}, false
	}
	e := &w.entries[i]
	t := plain
	if e.took != nil {
		t = *e.took
	}
	if t.kept {
		e.took = &took{kept: true}
		return t, true
	}
	w.entries = slices.Delete(w.entries, i, i+1)
	if len(w.entries) == 0 {
		delete(s.windows, k)
	}
	return t, true
}

// giveBack moves the theoretical arrival time of the rate limit among
// limits, kept under k, back by (ms): what the admission moved it, never
// more than one emission interval of the rules in force (what a plain
// admission gets back), which by -1 stands for.
func (s *Store) giveBack(k windowKey, limits []gate.Limit, by, now int64) {
	l, i := gate.RateLimit(limits)
	st := s.rates[k]
	if i < 0 || st == nil {
		return
	}
	if every := l.RateMillis(); by < 0 || by > every {
		by = every
	}
	st.tat -= by
	if st.tat <= now {
		delete(s.rates, k)
		return
	}
	st.expires = st.tat + expiryMargin
}

// admit decides one request at now (ms), step for step like admit.lua.
// A dry run decides alike and changes nothing but the dropping of expired
// members, which a real decision would also drop.
func (s *Store) admit(now int64, r *gate.AdmitRequest) gate.AdmitResult {
	res := gate.AdmitResult{Now: time.UnixMilli(now).UTC()}
	if len(r.Limits)+len(r.Caps) == 0 {
		res.Admitted = true // nothing limits the message, so nothing is kept
		return res
	}
	// A scene without limits still keeps its ids (for duplicates) as long as
	// the caps need them.
	sceneSpan := r.Limits
	if len(sceneSpan) == 0 {
		sceneSpan = r.Caps
	}
	sk, ck := keysOf(r)
	sFrom, sUntil, sMax := span(sceneSpan, now, r.Zone)
	cFrom, cUntil, cMax := span(r.Caps, now, r.Zone)
	scene := s.live(sk, now, sFrom)
	var caps *window
	if len(r.Caps) > 0 {
		caps = s.live(ck, now, cFrom)
	}

	if scene.has(r.ID) {
		res.Admitted, res.Duplicate = true, true
		return res
	}
	sRate, si := gate.RateLimit(r.Limits)
	cRate, ci := gate.RateLimit(r.Caps)
	sTAT, cTAT := now, now
	if si >= 0 {
		sTAT = s.tat(sk, now)
	}
	if ci >= 0 {
		cTAT = s.tat(ck, now)
	}
	v := verdict{track: r.WantTightest}
	v.check(scene, sTAT, now, r.Zone, gate.ScopeScene, r.Limits)
	v.check(caps, cTAT, now, r.Zone, gate.ScopeRecipient, r.Caps)
	if v.exceeded != nil && !r.Force {
		res.Exceeded = v.exceeded
		res.NextAllowedAt = time.UnixMilli(v.reopen).UTC()
		return res
	}
	res.Admitted, res.Tightest = true, v.tightest
	if r.DryRun {
		return res
	}
	// What a forced admission takes is kept with its entries (see took).
	var st, ct *took
	if r.Force {
		st, ct = &took{scene: -1, caps: -1}, &took{scene: -1, caps: -1}
	}
	// A scene without limits counts none of the ids it keeps.
	sCounts := now + 1
	if len(r.Limits) > 0 {
		sCounts = windowFrom(r.Limits, now, r.Zone)
	}
	sPushed := s.record(sk, scene, entry{now, r.ID, st}, sMax, sUntil+expiryMargin, sCounts)
	var cPushed bool
	if counted(r.Caps) {
		cPushed = s.record(ck, caps, entry{now, r.ID, ct}, cMax, cUntil+expiryMargin, windowFrom(r.Caps, now, r.Zone))
	}
	var sMoved, cMoved int64
	if si >= 0 {
		sMoved = s.advance(sk, sTAT, now, sRate)
	}
	if ci >= 0 {
		cMoved = s.advance(ck, cTAT, now, cRate)
	}
	if r.Force {
		st.kept, ct.kept = sPushed, cPushed
		if si >= 0 && sMoved < sRate.RateMillis() {
			st.scene = sMoved
		}
		if ci >= 0 && cMoved < cRate.RateMillis() {
			st.caps = cMoved
		}
	}
	return res
}

// tat returns the theoretical arrival time kept under k, or now when there
// is none or it has passed: the GCRA's max(TAT, now).
func (s *Store) tat(k windowKey, now int64) int64 {
	if st := s.rates[k]; st != nil && st.tat > now {
		return st.tat
	}
	return now
}

// advance records an admission in the rate limit l, whose TAT at now is
// tat: one interval later, but never more than a burst ahead of now, so
// that forced admissions hold the limit shut for one interval at most, as
// a window keeps no more members than its largest max; and never earlier
// (a TAT further ahead, from a longer interval of rules since changed,
// stays). A state kept under k is updated in place. It returns how far the
// TAT moved (ms).
func (s *Store) advance(k windowKey, tat, now int64, l gate.Limit) int64 {
	every := l.RateMillis()
	next := max(tat, min(tat+every, now+int64(l.Max)*every))
	if st := s.rates[k]; st != nil {
		st.tat, st.expires = next, next+expiryMargin
	} else {
		s.rates[k] = &rateState{tat: next, expires: next + expiryMargin}
	}
	return next - tat
}

// live returns the window of k with the members admitted before from (ms)
// dropped, or nil when nothing is left of it.
func (s *Store) live(k windowKey, now, from int64) *window {
	w := s.windows[k]
	if w == nil {
		return nil
	}
	if now > w.expires {
		delete(s.windows, k)
		return nil
	}
	// Members are ascending: the expired ones are a prefix.
	old, _ := slices.BinarySearchFunc(w.entries, from, func(e entry, at int64) int { return cmp.Compare(e.at, at) })
	w.entries = slices.Delete(w.entries, 0, old)
	if len(w.entries) == 0 {
		delete(s.windows, k)
		return nil
	}
	return w
}

// record adds e to the window of k, keeps its newest keep members and sets
// its expiry. It reports whether a member it drops was still counted by a
// window of the key (admitted at or after counts): only a forced admission
// pushes such a member out.
func (s *Store) record(k windowKey, w *window, e entry, keep int, expires, counts int64) (pushed bool) {
	if w == nil {
		w = &window{}
		s.windows[k] = w
	}
	at, _ := slices.BinarySearchFunc(w.entries, e, compareEntries)
	w.entries = slices.Insert(w.entries, at, e)
	if extra := len(w.entries) - keep; extra > 0 {
		pushed = slices.ContainsFunc(w.entries[:extra], func(o entry) bool { return o.at >= counts })
		w.entries = slices.Delete(w.entries, 0, extra)
	}
	w.expires = expires
	return pushed
}

func (w *window) has(id string) bool {
	if w == nil {
		return false
	}
	return slices.ContainsFunc(w.entries, func(e entry) bool { return e.id == id })
}

// count returns how many members were admitted at or after from (ms).
func (w *window) count(from int64) int {
	if w == nil {
		return 0
	}
	i, _ := slices.BinarySearchFunc(w.entries, from, func(e entry, at int64) int { return cmp.Compare(e.at, at) })
	return len(w.entries) - i
}

// Sweep drops every expired window now. Admit calls it every SweepEvery;
// call it yourself to release memory sooner.
func (s *Store) Sweep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(s.now().UnixMilli())
}

func (s *Store) sweep(now int64) {
	for k, w := range s.windows {
		if now > w.expires {
			delete(s.windows, k)
		}
	}
	for k, st := range s.rates {
		if now > st.expires {
			delete(s.rates, k)
		}
	}
}

// Len returns how many windows and rate states the store holds, expired
// ones not yet swept included: what its memory is proportional to.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.windows) + len(s.rates)
}

// Ping reports whether ctx is still live: the store itself is always up.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ping: %w: %w", gate.ErrUnavailable, err)
	}
	return nil
}
