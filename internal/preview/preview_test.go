package preview

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/rules"
)

// sliceLedger is a ledger in a slice, already in time order, handed out in
// pages of pageSize so that a replay crosses pages.
type sliceLedger struct {
	entries  []gate.LedgerEntry
	pageSize int
}

func (l *sliceLedger) LedgerRange(ctx context.Context, since, until time.Time, fn func([]gate.LedgerEntry) error) error {
	var page []gate.LedgerEntry
	for _, e := range l.entries {
		if e.At.Before(since) || !e.At.Before(until) {
			continue
		}
		page = append(page, e)
		if len(page) == l.pageSize {
			if err := fn(page); err != nil {
				return err
			}
			page = nil
		}
	}
	if len(page) > 0 {
		return fn(page)
	}
	return nil
}

var t0 = time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)

// entries makes n decisions of scene for recipient, step apart from start,
// each with outcome.
func entries(scene, recipient string, n int, start time.Time, step time.Duration, o gate.Outcome) []gate.LedgerEntry {
	out := make([]gate.LedgerEntry, n)
	for i := range out {
		out[i] = gate.LedgerEntry{Key: fmt.Sprintf("%s-%s-%d-%d", scene, recipient, start.Unix(), i),
			Scene: scene, Recipient: recipient, Priority: gate.PriorityNormal, Outcome: o, At: start.Add(time.Duration(i) * step)}
	}
	return out
}

func run(t *testing.T, doc string, es []gate.LedgerEntry) *gate.RulePreview {
	t.Helper()
	r := New(&sliceLedger{entries: es, pageSize: 3}, Options{})
	got, err := r.Preview(context.Background(), []byte(doc), t0.Add(-time.Hour), t0.Add(30*24*time.Hour))
	if err != nil {
		t.Fatalf("Preview: %v", err)
	}
	return got
}

func sceneOf(t *testing.T, p *gate.RulePreview, name string) gate.ScenePreview {
	t.Helper()
	for _, s := range p.Scenes {
		if s.Scene == name {
			return s
		}
	}
	t.Fatalf("no scene %q in %+v", name, p.Scenes)
	return gate.ScenePreview{}
}

func wantCounts(t *testing.T, what string, got, want gate.PreviewCounts) {
	t.Helper()
	if got != want {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func TestStricterRuleSuppresses(t *testing.T) {
	// Five forwards 10 minutes apart; the proposed rule allows 2 an hour.
	es := entries("alert", "open_id:u1", 5, t0, 10*time.Minute, gate.OutcomeForward)
	p := run(t, `
scenes:
  alert:
    limits: [{window: 1h, max: 2}]
`, es)
	s := sceneOf(t, p, "alert")
	wantCounts(t, "then", s.Then, gate.PreviewCounts{Forwarded: 5})
	wantCounts(t, "now", s.Now, gate.PreviewCounts{Forwarded: 2, Suppressed: 3})
	if p.Decisions != 5 || p.Replayed != 5 || p.Truncated {
		t.Errorf("decisions %d replayed %d truncated %v, want 5 5 false", p.Decisions, p.Replayed, p.Truncated)
	}
	wantCounts(t, "total now", p.Total.Now, s.Now)
}

func TestLooserRuleForwards(t *testing.T) {
	// Then one forward, then four suppressions (1 an hour); the proposed
	// rule allows 10 an hour, and drops the rest of another scene.
	es := entries("alert", "open_id:u1", 5, t0, time.Minute, gate.OutcomeSuppress)
	es[0].Outcome = gate.OutcomeForward
	p := run(t, `
scenes:
  alert:
    limits: [{window: 1h, max: 10}]
    on_exceed: drop
`, es)
	s := sceneOf(t, p, "alert")
	wantCounts(t, "then", s.Then, gate.PreviewCounts{Forwarded: 1, Suppressed: 4})
	wantCounts(t, "now", s.Now, gate.PreviewCounts{Forwarded: 5})
}

func TestSlidingWindowReopens(t *testing.T) {
	// One an hour, messages every 25 minutes: 0, 25, 50 | 75, 100 | 125 ...
	es := entries("alert", "open_id:u1", 6, t0, 25*time.Minute, gate.OutcomeForward)
	p := run(t, `
scenes:
  alert:
    limits: [{window: 1h, max: 1}]
    on_exceed: drop
`, es)
	// Forwarded at 0, 75 (0 left at 60), 150 is past the end: 0,25,50,75,100,125 -> 0 and 75.
	wantCounts(t, "now", sceneOf(t, p, "alert").Now, gate.PreviewCounts{Forwarded: 2, Dropped: 4})
}

func TestRecipientCaps(t *testing.T) {
	// Two scenes without limits of their own; a cap of 3 a day across them.
	var es []gate.LedgerEntry
	es = append(es, entries("a", "open_id:u1", 2, t0, time.Minute, gate.OutcomeForward)...)
	es = append(es, entries("b", "open_id:u1", 2, t0.Add(10*time.Minute), time.Minute, gate.OutcomeForward)...)
	es = append(es, entries("b", "open_id:u2", 2, t0.Add(20*time.Minute), time.Minute, gate.OutcomeForward)...)
	p := run(t, `
recipient_caps: [{window: 24h, max: 3}]
scenes:
  a: {limits: [{window: 1h, max: 100}]}
  b: {limits: [{window: 1h, max: 100}]}
`, es)
	wantCounts(t, "a", sceneOf(t, p, "a").Now, gate.PreviewCounts{Forwarded: 2})
	// u1's fourth message (b's second) is over the cap; u2 is not.
	wantCounts(t, "b", sceneOf(t, p, "b").Now, gate.PreviewCounts{Forwarded: 3, Suppressed: 1})
	wantCounts(t, "total", p.Total.Now, gate.PreviewCounts{Forwarded: 5, Suppressed: 1})
}

func TestCalendarDayInSceneZone(t *testing.T) {
	// 2 a calendar day in Shanghai (UTC+8). Messages at 15:00, 15:30 and
	// 16:30 UTC: the last is past Shanghai midnight (16:00 UTC), a new day.
	day := time.Date(2026, 11, 20, 15, 0, 0, 0, time.UTC)
	es := []gate.LedgerEntry{}
	for i, at := range []time.Time{day, day.Add(20 * time.Minute), day.Add(40 * time.Minute), day.Add(90 * time.Minute)} {
		es = append(es, gate.LedgerEntry{Key: fmt.Sprint("k", i), Scene: "r", Recipient: "open_id:u1", Outcome: gate.OutcomeForward, At: at})
	}
	p := run(t, `
scenes:
  r:
    limits: [{calendar: day, max: 2}]
    tz: Asia/Shanghai
`, es)
	wantCounts(t, "now", sceneOf(t, p, "r").Now, gate.PreviewCounts{Forwarded: 3, Suppressed: 1})
}

func TestQuietHoursUseEntryZone(t *testing.T) {
	// Quiet from 22:00 to 08:00 in the scene's zone (UTC), deferred. At
	// 23:00 UTC: quiet for a message without a zone; for one in Shanghai
	// it is 07:00 -- still quiet; for one in New York 18:00 -- not quiet.
	at := time.Date(2026, 11, 20, 23, 0, 0, 0, time.UTC)
	es := []gate.LedgerEntry{
		{Key: "utc", Scene: "m", Recipient: "open_id:a", Outcome: gate.OutcomeForward, At: at},
		{Key: "sh", Scene: "m", Recipient: "open_id:b", TZ: "Asia/Shanghai", Outcome: gate.OutcomeForward, At: at},
		{Key: "ny", Scene: "m", Recipient: "open_id:c", TZ: "America/New_York", Outcome: gate.OutcomeForward, At: at},
		{Key: "urgent", Scene: "m", Recipient: "open_id:d", Priority: gate.PriorityUrgent, Outcome: gate.OutcomeForward, At: at},
	}
	p := run(t, `
scenes:
  m:
    limits: [{window: 24h, max: 5}]
    quiet_hours: {from: "22:00", to: "08:00", action: defer}
    bypass_priorities: [urgent]
`, es)
	wantCounts(t, "now", sceneOf(t, p, "m").Now, gate.PreviewCounts{Forwarded: 2, Deferred: 2})
}

func TestBypassAndDigest(t *testing.T) {
	es := entries("ci", "open_id:u1", 4, t0, time.Minute, gate.OutcomeForward)
	es[3].Priority = gate.PriorityHigh
	p := run(t, `
scenes:
  ci:
    limits: [{window: 1h, max: 1}]
    on_exceed: digest
    bypass_priorities: [high]
`, es)
	wantCounts(t, "now", sceneOf(t, p, "ci").Now, gate.PreviewCounts{Forwarded: 2, Digested: 2})
}

func TestUnknownScene(t *testing.T) {
	es := entries("gone", "open_id:u1", 3, t0, time.Minute, gate.OutcomeForward)
	p := run(t, `
unknown_scene: drop
scenes:
  other: {limits: [{window: 1h, max: 1}]}
`, es)
	wantCounts(t, "now", sceneOf(t, p, "gone").Now, gate.PreviewCounts{Dropped: 3})
}

func TestShadowCounted(t *testing.T) {
	es := entries("s", "open_id:u1", 3, t0, time.Minute, gate.OutcomeForward)
	p := run(t, `
scenes:
  s:
    limits: [{window: 1h, max: 1}]
    shadow: true
`, es)
	wantCounts(t, "now", sceneOf(t, p, "s").Now, gate.PreviewCounts{Forwarded: 3, Shadow: 2})
}

func TestInvalidParkedAndOldRows(t *testing.T) {
	es := []gate.LedgerEntry{
		{Key: "invalid:1", Scene: "alert", Outcome: gate.OutcomeInvalid, At: t0},
		{Key: "seq:2", Outcome: gate.OutcomeInvalid, At: t0.Add(time.Second)},
		{Key: "p", Scene: "alert", Recipient: "open_id:u1", Outcome: gate.OutcomeParked, At: t0.Add(2 * time.Second)},
		{Key: "old1", Outcome: gate.OutcomeForward, At: t0.Add(3 * time.Second)},
		{Key: "old2", Outcome: gate.OutcomeSuppress, At: t0.Add(4 * time.Second)},
		{Key: "new", Scene: "alert", Recipient: "open_id:u1", Outcome: gate.OutcomeForward, At: t0.Add(5 * time.Second)},
	}
	p := run(t, "scenes:\n  alert: {limits: [{window: 1h, max: 1}]}\n", es)
	s := sceneOf(t, p, "alert")
	wantCounts(t, "then", s.Then, gate.PreviewCounts{Forwarded: 1, Invalid: 1, Parked: 1})
	wantCounts(t, "now", s.Now, gate.PreviewCounts{Forwarded: 1, Invalid: 1, Parked: 1})
	wantCounts(t, "no scene", sceneOf(t, p, "").Now, gate.PreviewCounts{Invalid: 1})
	if p.Decisions != 6 || p.Replayed != 1 || p.NotReplayable != 2 {
		t.Errorf("decisions %d replayed %d not replayable %d, want 6 1 2", p.Decisions, p.Replayed, p.NotReplayable)
	}
}

func TestBoundOfDecisions(t *testing.T) {
	es := entries("alert", "open_id:u1", 10, t0, time.Minute, gate.OutcomeForward)
	r := New(&sliceLedger{entries: es, pageSize: 4}, Options{MaxDecisions: 7})
	p, err := r.Preview(context.Background(), []byte("scenes:\n  alert: {limits: [{window: 1h, max: 100}]}\n"), t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Truncated || p.Decisions != 7 || p.Limit != 7 || !p.ReachedAt.Equal(es[6].At) {
		t.Errorf("truncated %v decisions %d limit %d reached %v, want true 7 7 %v", p.Truncated, p.Decisions, p.Limit, p.ReachedAt, es[6].At)
	}
	// Exactly the bound is not cut.
	r = New(&sliceLedger{entries: es, pageSize: 4}, Options{MaxDecisions: 10})
	if p, err = r.Preview(context.Background(), []byte("scenes:\n  alert: {limits: [{window: 1h, max: 100}]}\n"), t0, t0.Add(time.Hour)); err != nil || p.Truncated {
		t.Errorf("10 of 10: truncated %v, err %v; want false, nil", p.Truncated, err)
	}
}

func TestPeriodIsBounded(t *testing.T) {
	es := entries("alert", "open_id:u1", 10, t0, time.Minute, gate.OutcomeForward)
	r := New(&sliceLedger{entries: es, pageSize: 100}, Options{})
	p, err := r.Preview(context.Background(), []byte("scenes: {alert: {limits: [{window: 1h, max: 100}]}}"), t0.Add(2*time.Minute), t0.Add(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if p.Decisions != 3 || !p.Since.Equal(t0.Add(2*time.Minute)) || !p.Until.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("decisions %d since %v until %v, want 3 in [+2m, +5m)", p.Decisions, p.Since, p.Until)
	}
}

func TestBadDocument(t *testing.T) {
	r := New(&sliceLedger{}, Options{})
	_, err := r.Preview(context.Background(), []byte("scenes:\n  alert:\n    limits: [{window: 1h, max: 0}]\n"), t0, t0.Add(time.Hour))
	if !errors.Is(err, gate.ErrBadRequest) {
		t.Fatalf("err = %v, want a gate.ErrBadRequest", err)
	}
	if !strings.Contains(err.Error(), DocumentName+":3") {
		t.Errorf("err = %q, want the parser's place (%s:3:…)", err, DocumentName)
	}
}

func TestVersionIsTheDocument(t *testing.T) {
	doc := "scenes:\n  alert: {limits: [{window: 1h, max: 1}]}\n"
	a := run(t, doc, nil)
	b := run(t, "# same rules\n"+doc, nil)
	c := run(t, "scenes:\n  alert: {limits: [{window: 1h, max: 2}]}\n", nil)
	if a.Version == "" || a.Version != b.Version || a.Version == c.Version {
		t.Errorf("versions %q %q %q: want the first two equal and not empty, the third different", a.Version, b.Version, c.Version)
	}
	if a.Scenes == nil || len(a.Notes) == 0 {
		t.Errorf("scenes %v notes %v: want an empty list and the notes", a.Scenes, a.Notes)
	}
}

type failingLedger struct{ err error }

func (l failingLedger) LedgerRange(context.Context, time.Time, time.Time, func([]gate.LedgerEntry) error) error {
	return l.err
}

func TestLedgerError(t *testing.T) {
	r := New(failingLedger{fmt.Errorf("db: %w", gate.ErrUnavailable)}, Options{})
	_, err := r.Preview(context.Background(), []byte("scenes: {}"), t0, t0.Add(time.Hour))
	if !errors.Is(err, gate.ErrUnavailable) || errors.Is(err, gate.ErrBadRequest) {
		t.Errorf("err = %v, want ErrUnavailable and not ErrBadRequest", err)
	}
}

func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := New(&sliceLedger{entries: entries("a", "open_id:u", 3, t0, time.Second, gate.OutcomeForward), pageSize: 2}, Options{})
	_, err := r.Preview(ctx, []byte("scenes: {a: {limits: [{window: 1h, max: 1}]}}"), t0, t0.Add(time.Hour))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestRateLimit(t *testing.T) {
	// A burst of 2, then one per 10 minutes: of messages a minute apart
	// from 0 to 11, those at 0 and 1 pass (the burst), then the one at 10,
	// when the theoretical arrival time (20m) is within a burst's slack.
	es := entries("r", "open_id:u1", 12, t0, time.Minute, gate.OutcomeForward)
	p := run(t, `
scenes:
  r:
    limits: [{rate: 1/10m, burst: 2}]
`, es)
	wantCounts(t, "now", sceneOf(t, p, "r").Now, gate.PreviewCounts{Forwarded: 3, Suppressed: 9})
}

// blockingLedger holds its first caller until release is closed.
type blockingLedger struct {
	entered chan struct{}
	release chan struct{}
}

func (l *blockingLedger) LedgerRange(ctx context.Context, _, _ time.Time, _ func([]gate.LedgerEntry) error) error {
	l.entered <- struct{}{}
	<-l.release
	return nil
}

func TestOnePreviewAtATime(t *testing.T) {
	l := &blockingLedger{entered: make(chan struct{}, 2), release: make(chan struct{})}
	r := New(l, Options{})
	first := make(chan error, 1)
	go func() {
		_, err := r.Preview(context.Background(), []byte("scenes: {}"), t0, t0.Add(time.Hour))
		first <- err
	}()
	<-l.entered
	// A second preview waits for the first; its context ends first.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Preview(ctx, []byte("scenes: {}"), t0, t0.Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Errorf("second preview while the first runs: %v, want context.Canceled", err)
	}
	if len(l.entered) != 0 {
		t.Error("the second preview read the ledger while the first ran")
	}
	close(l.release)
	if err := <-first; err != nil {
		t.Errorf("first preview: %v", err)
	}
	if _, err := r.Preview(context.Background(), []byte("scenes: {}"), t0, t0.Add(time.Hour)); err != nil {
		t.Errorf("a preview after the first: %v", err)
	}
}

func TestWindowsStartWithTheDecisionsBefore(t *testing.T) {
	// One an hour. A forward 30 minutes before since fills the window: the
	// message 10 minutes after since would be suppressed, as the gate's
	// own windows would have done; the one before is not counted.
	since := t0
	es := []gate.LedgerEntry{
		{Key: "long-before", Scene: "a", Recipient: "open_id:u1", Outcome: gate.OutcomeForward, At: since.Add(-3 * time.Hour)},
		{Key: "before", Scene: "a", Recipient: "open_id:u1", Outcome: gate.OutcomeForward, At: since.Add(-30 * time.Minute)},
		{Key: "after", Scene: "a", Recipient: "open_id:u1", Outcome: gate.OutcomeSuppress, At: since.Add(10 * time.Minute)},
		{Key: "later", Scene: "a", Recipient: "open_id:u1", Outcome: gate.OutcomeForward, At: since.Add(40 * time.Minute)},
	}
	l := &countingLedger{sliceLedger: sliceLedger{entries: es, pageSize: 10}}
	p, err := New(l, Options{}).Preview(context.Background(), []byte("scenes: {a: {limits: [{window: 1h, max: 1}]}}"), since, since.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	s := sceneOf(t, p, "a")
	wantCounts(t, "then", s.Then, gate.PreviewCounts{Forwarded: 1, Suppressed: 1})
	wantCounts(t, "now", s.Now, gate.PreviewCounts{Forwarded: 1, Suppressed: 1})
	if p.Decisions != 2 || p.Replayed != 2 {
		t.Errorf("decisions %d replayed %d, want 2 2 (the warm-up uncounted)", p.Decisions, p.Replayed)
	}
	if want := since.Add(-time.Hour); !l.since.Equal(want) {
		t.Errorf("read the ledger from %v, want %v (the longest window before since)", l.since, want)
	}
}

func TestWarmupSpan(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want time.Duration
	}{
		{"scenes: {a: {limits: [{window: 1h, max: 1}]}}", time.Hour},
		{"recipient_caps: [{window: 24h, max: 5}]\nscenes: {a: {limits: [{window: 1h, max: 1}]}}", 24 * time.Hour},
		{"scenes: {a: {limits: [{calendar: day, max: 1}]}}", 48 * time.Hour},
		{"scenes: {a: {limits: [{calendar: week, max: 1}]}}", 8 * 24 * time.Hour},
		{"scenes: {a: {limits: [{window: 30d, max: 1}]}}", 8 * 24 * time.Hour},
		{"scenes: {a: {limits: [{rate: 1/10m, burst: 3}]}}", 30 * time.Minute},
	} {
		rs, err := rules.Parse("t", []byte(tc.doc))
		if err != nil {
			t.Fatal(err)
		}
		if got := warmup(rs); got != tc.want {
			t.Errorf("%s: warm-up %v, want %v", tc.doc, got, tc.want)
		}
	}
}

// countingLedger is a sliceLedger that remembers the since it was asked.
type countingLedger struct {
	sliceLedger
	since time.Time
}

func (l *countingLedger) LedgerRange(ctx context.Context, since, until time.Time, fn func([]gate.LedgerEntry) error) error {
	l.since = since
	return l.sliceLedger.LedgerRange(ctx, since, until, fn)
}
