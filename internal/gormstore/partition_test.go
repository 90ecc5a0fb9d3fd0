package gormstore

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

func TestCheckPartitionWidth(t *testing.T) {
	for _, w := range []time.Duration{10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour} {
		if err := CheckPartitionWidth(w); err != nil {
			t.Errorf("CheckPartitionWidth(%s) = %v, want nil", w, err)
		}
	}
	for _, w := range []time.Duration{-time.Hour, 0, time.Minute, 5 * time.Minute, 7 * time.Minute, 11 * time.Minute,
		10*time.Minute + time.Second, 25 * time.Hour, 48 * time.Hour} {
		if err := CheckPartitionWidth(w); err == nil {
			t.Errorf("CheckPartitionWidth(%s) = nil, want an error", w)
		}
	}
	if _, err := Open(context.Background(), Options{SQLitePath: t.TempDir() + "/gate.db", PartitionWidth: 7 * time.Minute}); err == nil {
		t.Error("Open with a 7m partition width: no error")
	}
}

// partitionOf is the partition table holds the row of key in (column col).
func partitionOf(t *testing.T, s *Store, table, col, key string) []string {
	t.Helper()
	rows, err := s.sqlDB.QueryContext(context.Background(),
		fmt.Sprintf(`SELECT tableoid::regclass::text FROM %s WHERE %s = $1 ORDER BY 1`, table, col), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// TestClaimAcrossPartitionBoundary makes two gates claim one id, one just
// before a partition boundary and one just after, so that their ledger rows
// would fall in two partitions and no index could see both. The first claim
// stops between its lookup and its insert until the second has had time to
// make its own lookup: without the claim lock both would find nothing and
// both claim.
func TestClaimAcrossPartitionBoundary(t *testing.T) {
	url := testenv.PostgresSchemaURL(t)
	opts := Options{DatabaseURL: url, PartitionWidth: MinPartitionWidth, LedgerRetention: MinPartitionWidth}
	a, b := MustOpen(t, opts), MustOpen(t, opts)
	if got := a.span(decisionsTable); got != MinPartitionWidth {
		t.Fatalf("ledger span %s, want %s", got, MinPartitionWidth)
	}
	boundary := floorTo(time.Now(), MinPartitionWidth).Add(MinPartitionWidth)
	for round := range 5 {
		key := fmt.Sprintf("straddle-%d", round)
		first := record(key, "disk", gate.OutcomeForward, boundary.Add(-time.Microsecond))
		second := record(key, "disk", gate.OutcomeForward, boundary.Add(time.Microsecond))

		aLooked, bLooked := make(chan struct{}), make(chan struct{}, 1)
		a.claimHook = func() {
			close(aLooked)
			select { // give b the time to look the id up too
			case <-bLooked:
			case <-time.After(300 * time.Millisecond):
			}
		}
		b.claimHook = func() { bLooked <- struct{}{} }
		var wg sync.WaitGroup
		var knownA, knownB []string
		var errA, errB error
		wg.Go(func() { knownA, errA = a.Commit(context.Background(), []gate.Record{first}) })
		<-aLooked
		wg.Go(func() { knownB, errB = b.Commit(context.Background(), []gate.Record{second}) })
		wg.Wait()
		a.claimHook, b.claimHook = nil, nil
		oneClaim(t, a, round, key, [2][]string{knownA, knownB}, [2]error{errA, errB})
	}
	// Without the race the two times do land in two partitions.
	x := record("apart-1", "disk", gate.OutcomeForward, boundary.Add(-time.Microsecond))
	y := record("apart-2", "disk", gate.OutcomeForward, boundary.Add(time.Microsecond))
	MustCommit(t, a, x, y)
	if p, q := partitionOf(t, a, "decisions", `"key"`, "apart-1"), partitionOf(t, a, "decisions", `"key"`, "apart-2"); slices.Equal(p, q) {
		t.Fatalf("rows either side of %s share partition %v", boundary, p)
	}
}

// oneClaim fails unless both commits of key succeeded, exactly one of them
// claimed it (known lists it for the other), and the ledger holds it once.
func oneClaim(t *testing.T, s *Store, round int, key string, known [2][]string, errs [2]error) {
	t.Helper()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("round %d: commits: %v, %v", round, errs[0], errs[1])
	}
	won := 0
	for _, k := range known {
		if !slices.Contains(k, key) {
			won++
		}
	}
	if parts := partitionOf(t, s, "decisions", `"key"`, key); won != 1 || len(parts) != 1 {
		t.Fatalf("round %d: %d gates claimed %s, ledger rows in %v; want exactly one", round, won, key, parts)
	}
}

// TestClaimAtOnceWaitsForTheLock makes two gates claim one id across a
// partition boundary in one round trip each (commitAtOnceOnPostgres) while
// a third session holds the id's claim lock: both wait, and once the lock
// goes, the second must see the first's row. A claim whose lookup took its
// snapshot before it waited (the lock and the lookup in one statement)
// would miss that row, and both would claim.
func TestClaimAtOnceWaitsForTheLock(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresSchemaURL(t)
	opts := func(app string) Options {
		return Options{DatabaseURL: withApplicationName(t, url, app), PartitionWidth: MinPartitionWidth, LedgerRetention: MinPartitionWidth}
	}
	a, b := MustOpen(t, opts("claim-a")), MustOpen(t, opts("claim-b"))
	holder, err := a.sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	boundary := floorTo(time.Now(), MinPartitionWidth).Add(MinPartitionWidth)
	const lockOf = `hashtextextended(coalesce(current_schema(), '') || ':k:' || $1, 27)`
	for round := range 3 {
		key := fmt.Sprintf("waits-%d", round)
		if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock(`+lockOf+`)`, key); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var knownA, knownB []string
		var errA, errB error
		wg.Go(func() {
			knownA, errA = a.Commit(ctx, []gate.Record{record(key, "disk", gate.OutcomeForward, boundary.Add(-time.Microsecond))})
		})
		wg.Go(func() {
			knownB, errB = b.Commit(ctx, []gate.Record{record(key, "disk", gate.OutcomeForward, boundary.Add(time.Microsecond))})
		})
		for _, app := range []string{"claim-a", "claim-b"} {
			if err := waitForLockWait(ctx, a, app); err != nil {
				t.Fatalf("round %d: %s: %v", round, app, err)
			}
		}
		if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_unlock(`+lockOf+`)`, key); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		oneClaim(t, a, round, key, [2][]string{knownA, knownB}, [2]error{errA, errB})
	}
}

// TestPrunePartitionsPostgres prunes, at a time ahead, partitions the gate
// made ahead: every partition wholly past retention is dropped, not deleted
// from, and partitions are made ahead again.
func TestPrunePartitionsPostgres(t *testing.T) {
	opts := Options{DatabaseURL: testenv.PostgresSchemaURL(t), PartitionWidth: MinPartitionWidth, LedgerRetention: MinPartitionWidth}
	s := MustOpen(t, opts)
	ctx := context.Background()
	start := floorTo(time.Now(), MinPartitionWidth)
	var recs []gate.Record
	for i := range 3 {
		r := suppressed(fmt.Sprintf("m%d", i), "disk", ou1, start.Add(time.Duration(i)*MinPartitionWidth+time.Minute))
		recs = append(recs, r)
	}
	MustCommit(t, s, recs...)
	if err := s.SaveAll(ctx, map[string]gate.CheckAnswer{"m0": {Decision: gate.OutcomeForward, DecidedAt: start.Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		want := partName(suppressionsTable, start.Add(time.Duration(i)*MinPartitionWidth))
		if got := partitionOf(t, s, "suppressions", "message_id", fmt.Sprintf("m%d", i)); !slices.Equal(got, []string{want}) {
			t.Fatalf("m%d is in %v, want %s", i, got, want)
		}
	}
	// At start+21m with 10m retention: [start, start+10m) and the legacy
	// partition are wholly past it, the one of m1 is not.
	now := start.Add(2*MinPartitionWidth + time.Minute)
	if _, err := s.Prune(ctx, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneCheckAnswers(ctx, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PruneSuppressions(ctx, now.Add(-MinPartitionWidth)); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"decisions", "suppressions"} {
		var names []string
		parts, err := s.partitions(ctx, partTable{name: table})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range parts {
			names = append(names, p.name)
		}
		for _, gone := range []string{table + "_legacy", partName(partTable{name: table}, start)} {
			if slices.Contains(names, gone) {
				t.Errorf("%s: partition %s still there after prune: %v", table, gone, names)
			}
		}
		if !slices.Contains(names, partName(partTable{name: table}, start.Add(MinPartitionWidth))) {
			t.Errorf("%s: the partition of m1 went too: %v", table, names)
		}
		if !slices.Contains(names, table+"_default") {
			t.Errorf("%s: no default partition: %v", table, names)
		}
	}
	if n := countRows(t, s, "decisions"); n != 2 {
		t.Errorf("%d ledger rows after prune, want 2 (m1, m2)", n)
	}
	if n := countRows(t, s, "check_answers"); n != 0 {
		t.Errorf("%d check answers after prune, want 0", n)
	}
	var left int
	if err := s.sqlDB.QueryRowContext(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace
	AND relname LIKE '%\_p2%' AND relkind = 'r' AND NOT relispartition`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d detached partitions left undropped", left)
	}
}

// TestPartitionSwitchPostgres switches a ledger and audit table that hold
// rows (smallTable lowered, so that the switch takes the path of a large
// table: indexes built concurrently, CHECK validated, then the short
// transaction) while a gate of the old layout inserts every 2 ms; no row is
// lost, and the new store reads old and new rows alike.
//
// GATE_TEST_SWITCH_ROWS sets the ledger rows (20,000 by default) for a
// one-off measurement of a large switch.
func TestPartitionSwitchPostgres(t *testing.T) {
	rows := 20000
	if v := os.Getenv("GATE_TEST_SWITCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			t.Fatalf("GATE_TEST_SWITCH_ROWS=%q: want a whole number from 1000", v)
		}
		rows = n
	}
	url := testenv.PostgresSchemaURL(t)
	old := MustOpen(t, Options{DatabaseURL: url, unpartitioned: true})
	ctx := context.Background()
	now := time.Now().UTC()
	for _, q := range []string{
		`INSERT INTO decisions ("key", outcome, decided_at) SELECT 'old-' || i, 'forward', $1::timestamptz - i * interval '1 second' FROM generate_series(1, $2::int) i`,
		`INSERT INTO suppressions (message_id, scene, recipient, decided_at) SELECT 'old-' || i, 'disk', 'ou_1', $1::timestamptz - i * interval '1 second' FROM generate_series(1, $2::int / 4) i`,
		`INSERT INTO check_answers (id, answer, decided_at) SELECT 'old-' || i, '{}', $1::timestamptz - i * interval '1 second' FROM generate_series(1, $2::int / 10) i`,
	} {
		if _, err := old.sqlDB.ExecContext(ctx, q, now, rows); err != nil {
			t.Fatal(err)
		}
	}
	// The older gate: its commits are plain INSERTs into the ledger and the
	// audit, as commitFresh's were.
	stop := make(chan struct{})
	var written atomic.Int64
	var longest atomic.Int64
	var wg sync.WaitGroup
	var writeErr error
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			key := fmt.Sprintf("during-%d", i)
			began := time.Now()
			_, err := old.sqlDB.ExecContext(ctx, `WITH d AS (INSERT INTO decisions ("key", outcome, decided_at) VALUES ($1, 'suppress', clock_timestamp()))
	INSERT INTO suppressions (message_id, scene, recipient, decided_at) VALUES ($1, 'disk', 'ou_1', clock_timestamp())`, key)
			if err != nil {
				writeErr = fmt.Errorf("older gate's insert %d: %w", i, err)
				return
			}
			if d := time.Since(began); d > time.Duration(longest.Load()) {
				longest.Store(int64(d))
			}
			written.Add(1)
		}
	})
	time.Sleep(50 * time.Millisecond)
	defer func(n int) { smallTable = n }(smallTable)
	smallTable = 1000
	began := time.Now()
	s := MustOpen(t, Options{DatabaseURL: url})
	took := time.Since(began)
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	t.Logf("switched %d ledger, %d audit and %d answer rows in %s while an older gate wrote %d rows (longest insert %s)",
		rows, rows/4, rows/10, took.Round(time.Millisecond), written.Load(), time.Duration(longest.Load()).Round(time.Millisecond))
	for _, tb := range partTables {
		done, err := s.isPartitioned(ctx, s.sqlDB, tb)
		if err != nil || !done {
			t.Fatalf("%s partitioned: %v, %v", tb.name, done, err)
		}
		parts, err := s.partitions(ctx, tb)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(parts, func(p partition) bool { return p.name == tb.name+"_legacy" && !p.hasLow && p.hasHigh }) {
			t.Fatalf("%s: no legacy partition from MINVALUE: %+v", tb.name, parts)
		}
	}
	w := written.Load()
	if n := countRows(t, s, "decisions"); n != int64(rows)+w {
		t.Fatalf("%d ledger rows after the switch, want %d + %d written during it", n, rows, w)
	}
	if n := countRows(t, s, "suppressions"); n != int64(rows/4)+w {
		t.Fatalf("%d audit rows after the switch, want %d + %d", n, rows/4, w)
	}
	if n := countRows(t, s, "check_answers"); n != int64(rows/10) {
		t.Fatalf("%d check answers after the switch, want %d", n, rows/10)
	}
	// Old rows are found by key; a new commit of an old key is a duplicate.
	got, err := s.Decided(ctx, []string{"old-1", fmt.Sprintf("during-%d", w-1)})
	if err != nil || len(got) != 2 {
		t.Fatalf("Decided after the switch: %v, %v", got, err)
	}
	if known := MustCommit(t, s, record("old-7", "disk", gate.OutcomeForward, now), record("new-1", "disk", gate.OutcomeForward, now)); !slices.Equal(known, []string{"old-7"}) {
		t.Fatalf("Commit after the switch: known %v, want [old-7]", known)
	}
	// The sequence of audit row ids belongs to the new table.
	var owner string
	if err := s.sqlDB.QueryRowContext(ctx, `SELECT d.refobjid::regclass::text FROM pg_depend d
	WHERE d.objid = 'suppressions_id_seq'::regclass AND d.deptype = 'a'`).Scan(&owner); err != nil || owner != "suppressions" {
		t.Fatalf("suppressions_id_seq owned by %q (%v), want suppressions", owner, err)
	}
	// A second gate opening finds the switch done.
	MustOpen(t, Options{DatabaseURL: url})
}
