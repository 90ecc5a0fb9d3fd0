package gormstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/migrations"
)

// freshFunc returns the options of an empty database that only the calling
// test uses; opening them twice opens the same database.
type freshFunc func(t *testing.T) Options

// runConformance is the behaviour every dialect of the audit store must
// have.
func runConformance(t *testing.T, fresh freshFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, fresh freshFunc)
	}{
		{"MigrationsRecordedOnce", testMigrationsRecordedOnce},
		{"ConcurrentOpen", testConcurrentOpen},
		{"CommitIdempotent", testCommitIdempotent},
		{"DuplicateKeysInBatch", testDuplicateKeysInBatch},
		{"CountsByOutcome", testCountsByOutcome},
		{"ConcurrentOverlappingCommits", testConcurrentOverlappingCommits},
		{"BadRecords", testBadRecords},
		{"RefusedRecords", testRefusedRecords},
		{"RefusedKeysLookedUp", testRefusedKeysLookedUp},
		{"SuppressionRoundTrip", testSuppressionRoundTrip},
		{"CalendarSuppressionRoundTrip", testCalendarSuppressionRoundTrip},
		{"Redaction", testRedaction},
		{"DecidedAndLargeBatch", testDecidedAndLargeBatch},
		{"SuppressionFilters", testSuppressionFilters},
		{"SuppressionTimeOrder", testSuppressionTimeOrder},
		{"SuppressionPages", testSuppressionPages},
		{"SuppressionBadQueries", testSuppressionBadQueries},
		{"SummaryRanges", testSummaryRanges},
		{"Prune", testPrune},
		{"LedgerReads", testLedgerReads},
		{"Closed", testClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, fresh) })
	}
}

func testMigrationsRecordedOnce(t *testing.T, fresh freshFunc) {
	opts := fresh(t)
	s := MustOpen(t, opts)
	want, err := migrations.Load(s.dialect.name)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Version   int
		Name      string
		AppliedAt scanTime
	}
	read := func(s *Store) []row {
		t.Helper()
		rows, err := s.db.Raw(`SELECT version, name, applied_at FROM schema_migrations ORDER BY version`).Rows()
		if err != nil {
			t.Fatalf("read schema_migrations: %v", err)
		}
		defer rows.Close()
		var out []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.Version, &r.Name, &r.AppliedAt); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	first := read(s)
	if len(first) != len(want) {
		t.Fatalf("schema_migrations: got %d rows, want %d", len(first), len(want))
	}
	for i, m := range want {
		if first[i].Version != m.Version || first[i].Name != m.Name || first[i].AppliedAt.t.IsZero() {
			t.Errorf("schema_migrations[%d]: got %d %q at %v, want %d %q at a time", i,
				first[i].Version, first[i].Name, first[i].AppliedAt.t, m.Version, m.Name)
		}
	}
	// Re-opening is a no-op: nothing applied again, nothing re-recorded.
	again := read(MustOpen(t, opts))
	if !slices.Equal(again, first) {
		t.Errorf("after re-open: got %+v, want %+v", again, first)
	}
}

func testConcurrentOpen(t *testing.T, fresh freshFunc) {
	opts := fresh(t)
	const n = 4
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(context.Background(), opts) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d of %d at once: %v", i, n, err)
			continue
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	if t.Failed() {
		return
	}
	want, _ := migrations.Load(stores[0].dialect.name)
	if got := countRows(t, stores[0], "schema_migrations"); got != int64(len(want)) {
		t.Errorf("schema_migrations after %d concurrent opens: got %d rows, want %d", n, got, len(want))
	}
}

// testCommitIdempotent: a batch committed three times, with a new key the
// third time, is counted and written once per key (what Commit returns of
// it is porttest's CommitIdempotent).
func testCommitIdempotent(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	batch := []gate.Record{
		record("m1", "disk", gate.OutcomeForward, t0),
		suppressed("m2", "disk", "open_id:ou_1", t0.Add(time.Second)),
		record("m3", "disk", gate.OutcomeDrop, t0.Add(2*time.Second)),
	}
	MustCommit(t, s, batch...)
	MustCommit(t, s, batch...)
	MustCommit(t, s, append(batch, record("m4", "disk", gate.OutcomeForward, t0))...)

	want := gate.SceneSummary{Scene: "disk", Received: 4, Forwarded: 2, Suppressed: 1, Dropped: 1}
	if got := summaryOf(t, s, "disk"); got != want {
		t.Errorf("summary after committing a batch three times: got %+v, want %+v", got, want)
	}
	if got := countRows(t, s, "suppressions"); got != 1 {
		t.Errorf("suppressions: got %d rows, want 1", got)
	}
	if got := countRows(t, s, "decisions"); got != 4 {
		t.Errorf("decisions: got %d rows, want 4", got)
	}
}

func testDuplicateKeysInBatch(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	MustCommit(t, s,
		suppressed("dup", "disk", "open_id:ou_1", t0),
		record("dup", "disk", gate.OutcomeForward, t0),
		suppressed("dup", "disk", "open_id:ou_2", t0),
		record("other", "disk", gate.OutcomeDrop, t0),
	)
	want := gate.SceneSummary{Scene: "disk", Received: 2, Suppressed: 1, Dropped: 1}
	if got := summaryOf(t, s, "disk"); got != want {
		t.Errorf("summary: got %+v, want %+v (the first record of a key wins)", got, want)
	}
	page, err := s.Suppressions(context.Background(), gate.SuppressionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].Recipient != "open_id:ou_1" {
		t.Errorf("suppressions: got %+v, want one row, for open_id:ou_1", page.Items)
	}
}

func testCountsByOutcome(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	shadow := func(key string, of gate.Action) gate.Record {
		r := record(key, "shadowed", gate.OutcomeForward, t0)
		r.Shadow, r.ShadowOf = true, of
		return r
	}
	unchecked := record("a6", "alpha", gate.OutcomeForward, t0)
	unchecked.Unchecked = true // forwarded while the window store was down
	shadowSup := shadow("s2", gate.ActionSuppress)
	shadowSup.Suppression = suppressed("s2", "shadowed", "open_id:ou_1", t0).Suppression
	shadowSup.Suppression.Shadow = true
	MustCommit(t, s,
		record("a1", "alpha", gate.OutcomeForward, t0),
		record("a2", "alpha", gate.OutcomeForward, t0.Add(time.Hour)), // another hour, same scene
		suppressed("a3", "alpha", "open_id:ou_1", t0),
		record("a4", "alpha", gate.OutcomeDrop, t0),
		record("a5", "alpha", gate.OutcomeInvalid, t0),
		unchecked,
		record("parked:7:a7", "alpha", gate.OutcomeParked, t0), // exhausted its deliveries undecided
		record("seq:9", "", gate.OutcomeInvalid, t0),
		shadow("s1", gate.ActionSuppress),
		shadowSup,
		shadow("s3", gate.ActionDrop),
		shadow("s4", gate.ActionForward), // not a shadow of anything: a plain forward
	)
	got, err := s.Summary(context.Background(), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []gate.SceneSummary{
		{Scene: "", Received: 1, Invalid: 1},
		{Scene: "alpha", Received: 7, Forwarded: 3, Suppressed: 1, Dropped: 1, Invalid: 1, ForwardedUnchecked: 1, Parked: 1},
		{Scene: "shadowed", Received: 4, Forwarded: 4, ShadowSuppressed: 2, ShadowDropped: 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("summary:\ngot  %+v\nwant %+v", got, want)
	}
	page, err := s.Suppressions(context.Background(), gate.SuppressionFilter{Scene: "shadowed"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || !page.Items[0].Shadow {
		t.Errorf("shadow suppression rows: got %+v, want one with Shadow set", page.Items)
	}
}

func testConcurrentOverlappingCommits(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	var batch []gate.Record
	for i, k := range keys("c", 60) {
		batch = append(batch, suppressed(k, fmt.Sprintf("scene%d", i%3), "open_id:ou_1", t0.Add(time.Duration(i)*time.Minute)))
	}
	const workers = 4
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		// Each worker sends the batch in its own order, as retries would.
		b := slices.Clone(batch)
		if w%2 == 1 {
			slices.Reverse(b)
		}
		wg.Go(func() { _, errs[w] = s.Commit(context.Background(), b) })
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Errorf("worker %d: Commit: %v", w, err)
		}
	}
	var total int64
	for i := range 3 {
		total += summaryOf(t, s, fmt.Sprintf("scene%d", i)).Suppressed
	}
	if total != 60 {
		t.Errorf("suppressed counted over all scenes: got %d, want 60", total)
	}
	if got := countRows(t, s, "suppressions"); got != 60 {
		t.Errorf("suppressions: got %d rows, want 60", got)
	}
}

func testBadRecords(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	good := record("ok", "disk", gate.OutcomeForward, t0)
	tests := []struct {
		name string
		bad  gate.Record
	}{
		{"empty key", record("", "disk", gate.OutcomeForward, t0)},
		{"zero time", record("k", "disk", gate.OutcomeForward, time.Time{})},
		{"unknown outcome", record("k", "disk", gate.Outcome("maybe"), t0)},
	}
	for _, tt := range tests {
		_, err := s.Commit(context.Background(), []gate.Record{good, tt.bad})
		if !errors.Is(err, gate.ErrBadRequest) || !errors.Is(err, gate.ErrPermanent) || errors.Is(err, gate.ErrUnavailable) {
			t.Errorf("%s: got %v, want an error wrapping ErrBadRequest and ErrPermanent, not ErrUnavailable", tt.name, err)
		}
	}
	if got := countRows(t, s, "decisions"); got != 0 {
		t.Errorf("decisions after refused batches: got %d rows, want 0", got)
	}
	if known, err := s.Commit(context.Background(), nil); err != nil || known != nil {
		t.Errorf("Commit(nil): got %v, %v; want nil, nil", known, err)
	}
}

func testSuppressionRoundTrip(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	shanghai := time.FixedZone("CST", 8*3600)
	at := time.Date(2024, 5, 1, 18, 30, 5, 123456789, shanghai) // 10:30:05.123456789 UTC
	r := suppressed("rt", "disk", "email:a@example.com", at)
	r.Suppression.Priority = gate.PriorityHigh
	r.Suppression.Scope = gate.ScopeRecipient
	r.Suppression.LimitWindow = gate.Duration(36 * time.Hour)
	r.Suppression.LimitMax = 20
	r.Suppression.CountSeen = 21
	r.Suppression.NextAllowedAt = time.Time{} // unknown: stored as NULL
	bare := record("bare", "disk", gate.OutcomeSuppress, t0)
	bare.Suppression = &gate.Suppression{Recipient: "open_id:ou_2"} // ids, scene and time from the record
	MustCommit(t, s, r, bare)

	page, err := s.Suppressions(context.Background(), gate.SuppressionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 {
		t.Fatalf("got %d rows, want 2", len(page.Items))
	}
	got := page.Items[0]
	want := *r.Suppression
	want.ID = got.ID
	want.DecidedAt = time.Date(2024, 5, 1, 10, 30, 5, 123456000, time.UTC)
	if got != want {
		t.Errorf("round trip:\ngot  %+v\nwant %+v", got, want)
	}
	if got.DecidedAt.Location() != time.UTC {
		t.Errorf("DecidedAt location: got %v, want UTC", got.DecidedAt.Location())
	}
	wantBare := gate.Suppression{ID: page.Items[1].ID, MessageID: "bare", Scene: "disk", Recipient: "open_id:ou_2", DecidedAt: t0}
	if page.Items[1] != wantBare {
		t.Errorf("defaults from the record:\ngot  %+v\nwant %+v", page.Items[1], wantBare)
	}
}

// A message held back by a calendar limit gets a row naming the period
// ("3 per calendar day"), where limit_window alone says 0s; a rolling
// limit's row names none. A rate limit's row names its interval, its
// limit_max the burst.
func testCalendarSuppressionRoundTrip(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	at := time.Date(2024, 5, 1, 10, 30, 0, 0, time.UTC)
	midnight := time.Date(2024, 5, 1, 16, 0, 0, 0, time.UTC) // 00:00 in Asia/Shanghai
	decision := func(o gate.Outcome, l gate.Limit) gate.Decision {
		return gate.Decision{Outcome: o, Reason: "limit", At: at, NextAllowedAt: midnight,
			Exceeded: &gate.Exceeded{Scope: gate.ScopeRecipient, Limit: l, Count: l.Max}}
	}
	msg := func(id string) gate.Message {
		return gate.Message{ID: id, Scene: "digest.daily", ReceiveIDType: "open_id", ReceiveID: "ou", Priority: gate.PriorityNormal,
			Raw: []byte(`{"id":"` + id + `"}`)}
	}
	day := gate.RecordOf("day", msg("day"), decision(gate.OutcomeSuppress, gate.Limit{Calendar: gate.CalendarDay, Max: 3}), 1, "v1")
	rolling := gate.RecordOf("rolling", msg("rolling"), decision(gate.OutcomeSuppress, gate.Limit{Window: time.Hour, Max: 1}), 2, "v1")
	week := gate.RecordOf("week", msg("week"), decision(gate.OutcomeDefer, gate.Limit{Calendar: gate.CalendarWeek, Max: 10}), 3, "v1")
	week.Hold.Queue = gate.Queue{Recipient: "open_id:ou", Name: "digest.daily"}
	week.Hold.DueAt = midnight
	rate := gate.RecordOf("rate", msg("rate"), decision(gate.OutcomeSuppress, gate.Limit{Rate: 10 * time.Minute, Max: 3}), 4, "v1")
	MustCommit(t, s, day, rolling, week, rate)

	page, err := s.Suppressions(context.Background(), gate.SuppressionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]gate.Suppression)
	for _, p := range page.Items {
		got[p.MessageID] = p
	}
	for _, tt := range []struct {
		id       string
		calendar gate.Calendar
		window   gate.Duration
		max      int
		heldAs   gate.HoldKind
		rate     gate.Duration
	}{
		{"day", gate.CalendarDay, 0, 3, "", 0},
		{"rolling", "", gate.Duration(time.Hour), 1, "", 0},
		{"week", gate.CalendarWeek, 0, 10, gate.HoldDefer, 0},
		{"rate", "", 0, 3, "", gate.Duration(10 * time.Minute)},
	} {
		p, ok := got[tt.id]
		if !ok {
			t.Errorf("%s: no row among %v", tt.id, ids(page))
			continue
		}
		if p.LimitCalendar != tt.calendar || p.LimitWindow != tt.window || p.LimitMax != tt.max || p.HeldAs != tt.heldAs ||
			p.LimitRate != tt.rate || p.Scope != gate.ScopeRecipient || !p.NextAllowedAt.Equal(midnight) {
			t.Errorf("%s: got calendar %q window %v max %d held_as %q rate %v scope %q next %v; want %q %v %d %q %v recipient %v",
				tt.id, p.LimitCalendar, p.LimitWindow, p.LimitMax, p.HeldAs, p.LimitRate, p.Scope, p.NextAllowedAt,
				tt.calendar, tt.window, tt.max, tt.heldAs, tt.rate, midnight)
		}
	}
}

func testRedaction(t *testing.T, fresh freshFunc) {
	for _, redact := range []bool{false, true} {
		opts := fresh(t)
		opts.RedactPayload = redact
		s := MustOpen(t, opts)
		r := suppressed("p", "disk", "open_id:ou_1", t0)
		MustCommit(t, s, r)
		page, err := s.Suppressions(context.Background(), gate.SuppressionFilter{})
		if err != nil {
			t.Fatal(err)
		}
		want := r.Suppression.Payload
		if redact {
			want = ""
		}
		if len(page.Items) != 1 || page.Items[0].Payload != want {
			t.Errorf("RedactPayload=%v: got %+v, want one row with payload %q", redact, page.Items, want)
		}
		var stored *string
		if err := s.db.Raw(`SELECT payload FROM suppressions`).Scan(&stored).Error; err != nil {
			t.Fatal(err)
		}
		if redact && stored != nil {
			t.Errorf("RedactPayload=true: stored payload %q, want NULL", *stored)
		}
	}
}

func testDecidedAndLargeBatch(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	all := keys("k", 1300)
	got, err := s.Decided(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("Decided before any commit: got %d keys, want none", len(got))
	}
	// 1,200 records: more than one statement's worth of every table.
	var batch []gate.Record
	for i, k := range all[:1200] {
		batch = append(batch, suppressed(k, fmt.Sprintf("s%04d", i), "open_id:ou_1", t0))
	}
	MustCommit(t, s, batch...)
	got, err = s.Decided(ctx, append(all, all[0], all[1250]))
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range all {
		p, ok := got[k]
		if ok != (i < 1200) {
			t.Fatalf("Decided[%s]: got %v, want %v", k, ok, i < 1200)
		}
		if want := (gate.Prior{Outcome: gate.OutcomeSuppress, At: t0}); ok && !(p.Outcome == want.Outcome && p.At.Equal(want.At)) {
			t.Fatalf("Decided[%s]: got %+v, want %+v", k, p, want)
		}
	}
	if len(got) != 1200 {
		t.Errorf("Decided: got %d keys, want 1200", len(got))
	}
	if n := countRows(t, s, "suppressions"); n != 1200 {
		t.Errorf("suppressions: got %d rows, want 1200", n)
	}
	if n := countRows(t, s, "scene_counters"); n != 1200 {
		t.Errorf("scene_counters: got %d rows, want 1200", n)
	}
	if got, err := s.Decided(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("Decided(nil): got %v, %v; want an empty map", got, err)
	}
}

// ids lists the message ids of a page, in order.
func ids(p gate.SuppressionPage) []string {
	var out []string
	for _, it := range p.Items {
		out = append(out, it.MessageID)
	}
	return out
}

func testSuppressionFilters(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	// e: muted by its recipient's preferences, not a limit.
	muted := suppressed("e", "cpu", "open_id:ou_3", t0.Add(-time.Minute))
	muted.Suppression.Reason, muted.Suppression.Scope = gate.ReasonPreference, gate.ScopePreference
	MustCommit(t, s,
		muted,
		suppressed("a", "disk", "open_id:ou_1", t0),
		suppressed("b", "disk", "open_id:ou_2", t0.Add(time.Minute)),
		suppressed("c", "cpu", "open_id:ou_1", t0.Add(2*time.Minute)),
		suppressed("d", "cpu", "open_id:ou_10", t0.Add(3*time.Minute)),
	)
	tests := []struct {
		name string
		f    gate.SuppressionFilter
		want []string
	}{
		{"all, newest first", gate.SuppressionFilter{}, []string{"d", "c", "b", "a", "e"}},
		{"scene", gate.SuppressionFilter{Scene: "disk"}, []string{"b", "a"}},
		{"recipient is exact", gate.SuppressionFilter{Recipient: "open_id:ou_1"}, []string{"c", "a"}},
		{"scene and recipient", gate.SuppressionFilter{Scene: "cpu", Recipient: "open_id:ou_1"}, []string{"c"}},
		{"since is inclusive", gate.SuppressionFilter{Since: t0.Add(time.Minute)}, []string{"d", "c", "b"}},
		{"until is exclusive", gate.SuppressionFilter{Until: t0.Add(2 * time.Minute)}, []string{"b", "a", "e"}},
		{"since and until", gate.SuppressionFilter{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}, []string{"c", "b"}},
		{"empty range", gate.SuppressionFilter{Since: t0, Until: t0}, nil},
		{"no match", gate.SuppressionFilter{Scene: "nope"}, nil},
		{"reason", gate.SuppressionFilter{Reason: gate.ReasonPreference}, []string{"e"}},
		{"reason and scene", gate.SuppressionFilter{Reason: gate.ReasonLimit, Scene: "cpu"}, []string{"d", "c"}},
		{"reason without rows", gate.SuppressionFilter{Reason: gate.ReasonQueued}, nil},
	}
	for _, tt := range tests {
		page, err := s.Suppressions(context.Background(), tt.f)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got := ids(page); !slices.Equal(got, tt.want) || page.NextCursor != "" || page.Items == nil {
			t.Errorf("%s: got %v (cursor %q, nil items %v), want %v and no cursor", tt.name, got, page.NextCursor, page.Items == nil, tt.want)
		}
	}
}

// testSuppressionTimeOrder checks times that a text comparison of a
// careless format would order wrongly: whole seconds beside fractions,
// other time zones, microsecond neighbours.
func testSuppressionTimeOrder(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	east := time.FixedZone("UTC+9", 9*3600)
	west := time.FixedZone("UTC-5", -5*3600)
	MustCommit(t, s,
		suppressed("whole", "x", "r", t0.Add(5*time.Second)),
		suppressed("half", "x", "r", t0.Add(5*time.Second+500*time.Millisecond)),
		suppressed("micro", "x", "r", t0.Add(5*time.Second+time.Microsecond)),
		suppressed("east", "x", "r", t0.Add(4*time.Second).In(east)), // 19:00:04 local
		suppressed("west", "x", "r", t0.Add(6*time.Second).In(west)), // 05:00:06 local
		suppressed("nano", "x", "r", t0.Add(5*time.Second+999)),      // truncated to "whole"
	)
	page, err := s.Suppressions(context.Background(), gate.SuppressionFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// "nano" truncates to the same microsecond as "whole"; rows are
	// inserted in key order, so it has the smaller id and comes after.
	want := []string{"west", "half", "micro", "whole", "nano", "east"}
	if got := ids(page); !slices.Equal(got, want) {
		t.Errorf("order: got %v, want %v", got, want)
	}
	bounded, err := s.Suppressions(context.Background(), gate.SuppressionFilter{
		Since: t0.Add(5*time.Second + time.Microsecond).In(west),
		Until: t0.Add(5*time.Second + 500*time.Millisecond).In(east),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(bounded); !slices.Equal(got, []string{"micro"}) {
		t.Errorf("[whole+1µs, half): got %v, want [micro]", got)
	}
}

func testSuppressionPages(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	// Seven rows share one time, between two rows at other times: pages
	// must split the tie by id without losing or repeating a row.
	batch := []gate.Record{suppressed("late", "x", "r", t0.Add(time.Second))}
	for _, k := range keys("tie", 7) {
		batch = append(batch, suppressed(k, "x", "r", t0))
	}
	batch = append(batch, suppressed("early", "x", "r", t0.Add(-time.Second)))
	MustCommit(t, s, batch...)

	var seen []string
	var sizes []int
	f := gate.SuppressionFilter{Limit: 3}
	lastID := int64(1 << 62)
	lastAt := t0.Add(time.Hour)
	for range 10 {
		page, err := s.Suppressions(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(page.Items))
		for _, it := range page.Items {
			if it.DecidedAt.After(lastAt) || (it.DecidedAt.Equal(lastAt) && it.ID >= lastID) {
				t.Errorf("row %s (%v, %d) does not follow (%v, %d)", it.MessageID, it.DecidedAt, it.ID, lastAt, lastID)
			}
			lastAt, lastID = it.DecidedAt, it.ID
			seen = append(seen, it.MessageID)
		}
		if page.NextCursor == "" {
			break
		}
		f.Cursor = page.NextCursor
	}
	if !slices.Equal(sizes, []int{3, 3, 3}) {
		t.Errorf("page sizes: got %v, want [3 3 3]", sizes)
	}
	want := append([]string{"late"}, keys("tie", 7)...)
	slices.Reverse(want[1:])
	want = append(want, "early")
	if !slices.Equal(seen, want) {
		t.Errorf("rows over all pages: got %v, want %v", seen, want)
	}

	// The default limit is 100 and a full last page still ends the list.
	var many []gate.Record
	for _, k := range keys("many", 101) {
		many = append(many, suppressed(k, "many", "r", t0))
	}
	MustCommit(t, s, many...)
	page, err := s.Suppressions(context.Background(), gate.SuppressionFilter{Scene: "many"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != DefaultPageLimit || page.NextCursor == "" {
		t.Errorf("default limit: got %d rows, cursor %q; want %d and a cursor", len(page.Items), page.NextCursor, DefaultPageLimit)
	}
	page, err = s.Suppressions(context.Background(), gate.SuppressionFilter{Scene: "many", Limit: 101})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 101 || page.NextCursor != "" {
		t.Errorf("limit 101 of 101 rows: got %d rows, cursor %q; want 101 and no cursor", len(page.Items), page.NextCursor)
	}
}

func testSuppressionBadQueries(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	b64 := base64.RawURLEncoding.EncodeToString
	tests := []struct {
		name string
		f    gate.SuppressionFilter
	}{
		{"negative limit", gate.SuppressionFilter{Limit: -1}},
		{"limit over max", gate.SuppressionFilter{Limit: MaxPageLimit + 1}},
		{"cursor not base64", gate.SuppressionFilter{Cursor: "!!not base64!!"}},
		{"cursor not numbers", gate.SuppressionFilter{Cursor: b64([]byte("abc.def"))}},
		{"cursor without id", gate.SuppressionFilter{Cursor: b64([]byte("1714557600000000000"))}},
		{"cursor with id 0", gate.SuppressionFilter{Cursor: b64([]byte("1714557600000000000.0"))}},
		{"until before since", gate.SuppressionFilter{Since: t0, Until: t0.Add(-time.Nanosecond)}},
	}
	for _, tt := range tests {
		_, err := s.Suppressions(context.Background(), tt.f)
		if !errors.Is(err, gate.ErrBadRequest) {
			t.Errorf("%s: got %v, want an error wrapping ErrBadRequest", tt.name, err)
		}
	}
	if _, err := s.Suppressions(context.Background(), gate.SuppressionFilter{Limit: MaxPageLimit}); err != nil {
		t.Errorf("limit %d: got %v, want nil", MaxPageLimit, err)
	}
	if _, err := s.Summary(context.Background(), t0, t0.Add(-time.Hour)); !errors.Is(err, gate.ErrBadRequest) {
		t.Errorf("Summary(until before since): got %v, want an error wrapping ErrBadRequest", err)
	}
}

func testSummaryRanges(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	µs := time.Microsecond
	MustCommit(t, s,
		record("h09", "a", gate.OutcomeForward, t0.Add(-µs)),            // hour 09
		record("h10a", "a", gate.OutcomeForward, t0),                    // hour 10
		record("h10b", "a", gate.OutcomeDrop, t0.Add(30*time.Minute)),   // hour 10
		record("h10c", "a", gate.OutcomeForward, t0.Add(time.Hour-µs)),  // hour 10
		record("h11", "a", gate.OutcomeForward, t0.Add(time.Hour)),      // hour 11
		record("b10", "b", gate.OutcomeInvalid, t0.Add(10*time.Minute)), // hour 10
	)
	tests := []struct {
		name         string
		since, until time.Time
		want         []gate.SceneSummary
	}{
		{"unbounded", time.Time{}, time.Time{}, []gate.SceneSummary{
			{Scene: "a", Received: 5, Forwarded: 4, Dropped: 1}, {Scene: "b", Received: 1, Invalid: 1}}},
		{"since mid-hour counts the whole hour", t0.Add(15 * time.Minute), time.Time{}, []gate.SceneSummary{
			{Scene: "a", Received: 4, Forwarded: 3, Dropped: 1}, {Scene: "b", Received: 1, Invalid: 1}}},
		{"until on the hour excludes that hour", time.Time{}, t0, []gate.SceneSummary{
			{Scene: "a", Received: 1, Forwarded: 1}}},
		{"until mid-hour includes that hour", time.Time{}, t0.Add(time.Minute), []gate.SceneSummary{
			{Scene: "a", Received: 4, Forwarded: 3, Dropped: 1}, {Scene: "b", Received: 1, Invalid: 1}}},
		{"one hour", t0, t0.Add(time.Hour), []gate.SceneSummary{
			{Scene: "a", Received: 3, Forwarded: 2, Dropped: 1}, {Scene: "b", Received: 1, Invalid: 1}}},
		{"other time zone, same instants", t0.In(time.FixedZone("UTC+8", 8*3600)), t0.Add(time.Hour).In(time.FixedZone("UTC-3", -3*3600)),
			[]gate.SceneSummary{{Scene: "a", Received: 3, Forwarded: 2, Dropped: 1}, {Scene: "b", Received: 1, Invalid: 1}}},
		{"empty", t0.Add(5 * time.Hour), t0.Add(6 * time.Hour), []gate.SceneSummary{}},
	}
	for _, tt := range tests {
		got, err := s.Summary(context.Background(), tt.since, tt.until)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !slices.Equal(got, tt.want) || got == nil {
			t.Errorf("%s:\ngot  %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

func testPrune(t *testing.T, fresh freshFunc) {
	opts := fresh(t)
	opts.LedgerRetention = time.Hour
	s := MustOpen(t, opts)
	ctx := context.Background()
	now := t0.Add(10 * time.Hour)
	// More old keys than one DELETE takes, to exercise the loop.
	var old []gate.Record
	for _, k := range keys("old", pruneBatch+1) {
		old = append(old, record(k, "x", gate.OutcomeDrop, now.Add(-2*time.Hour)))
	}
	MustCommit(t, s, old...)
	MustCommit(t, s,
		record("edge", "x", gate.OutcomeDrop, now.Add(-time.Hour)), // exactly at the cutoff: kept
		record("new", "x", gate.OutcomeDrop, now.Add(-time.Minute)),
	)
	n, err := s.Prune(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if n != pruneBatch+1 {
		t.Errorf("Prune: got %d deleted, want %d", n, pruneBatch+1)
	}
	got, err := s.Decided(ctx, []string{old[0].Key, "edge", "new"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"edge", "new"}; !slices.Equal(slices.Sorted(maps.Keys(got)), want) {
		t.Errorf("Decided after Prune: got %v, want %v", got, want)
	}
	// Pruning keeps the counters: they are figures, not the ledger.
	if c := summaryOf(t, s, "x"); c.Received != pruneBatch+3 {
		t.Errorf("received after Prune: got %d, want %d", c.Received, pruneBatch+3)
	}
	if n, err := s.Prune(ctx, now); err != nil || n != 0 {
		t.Errorf("second Prune: got %d, %v; want 0, nil", n, err)
	}
	if got := countRows(t, s, "decisions"); got != 2 {
		t.Errorf("decisions after a second Prune: got %d rows, want 2", got)
	}
}

func testClosed(t *testing.T, fresh freshFunc) {
	s, err := Open(context.Background(), fresh(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	checks := map[string]error{
		"Ping": s.Ping(ctx),
	}
	_, checks["Commit"] = s.Commit(ctx, []gate.Record{record("k", "x", gate.OutcomeForward, t0)})
	_, checks["Decided"] = s.Decided(ctx, []string{"k"})
	_, checks["Suppressions"] = s.Suppressions(ctx, gate.SuppressionFilter{})
	_, checks["Summary"] = s.Summary(ctx, time.Time{}, time.Time{})
	_, checks["Prune"] = s.Prune(ctx, t0)
	for name, err := range checks {
		if !errors.Is(err, gate.ErrUnavailable) {
			t.Errorf("%s on a closed store: got %v, want an error wrapping ErrUnavailable", name, err)
		}
	}
}
