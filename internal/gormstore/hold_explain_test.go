package gormstore

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

// heldExplainRows is how many held messages TestPostgresExplainHold loads:
// the 100,000 deferred messages.
const heldExplainRows = 100_000

// TestPostgresExplainHold holds 100,000 messages in 40,000 queues (with
// their audit rows), then explains the statement of Waiting (a batch of 500
// queues) and every one that one Settle round (100 due queues, 10 messages each)
// send, and checks with EXPLAIN that each reads its rows through an index:
// none scans held, held_queues or suppressions whole, and the three reads
// use the index meant for them. The plans are logged.
func TestPostgresExplainHold(t *testing.T) {
	s := MustOpen(t, postgresOptions(t))
	ctx := context.Background()
	start := time.Now()
	loadHeld(t, s)
	t.Logf("loaded %d held messages in %s", heldExplainRows, time.Since(start).Round(time.Millisecond))

	record := recordStatements(t, s)
	var queues []gate.Queue
	for i := range 500 {
		// Half of them hold messages, half never did.
		queues = append(queues, gate.Queue{Recipient: fmt.Sprintf("open_id:ou_%d", i*37), Name: fmt.Sprintf("scene%d", i%4)})
	}
	// Waiting sends one statement of constant text, outside gorm: it is
	// explained with the same arrays.
	w, err := s.Waiting(ctx, queues)
	if err != nil {
		t.Fatalf("Waiting: %v", err)
	}
	if len(w) != 250 {
		t.Errorf("Waiting: %d of 500 queues waiting, want 250", len(w))
	}
	recipients, names := make([]string, len(queues)), make([]string, len(queues))
	for i, q := range queues {
		recipients[i], names[i] = q.Recipient, q.Name
	}
	// So does the read of the due queues' messages in Settle.
	waitStmts := []statement{
		{sql: waitingPostgres, vars: []any{recipients, names}},
		{sql: heldPostgres, vars: []any{recipients[:100], names[:100], 10}},
	}
	now := heldExplainStart.Add(time.Hour)
	settleStmts := record(func() {
		n, err := s.Settle(ctx, now, 100, 10, func(_ context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
			var out []gate.Settlement
			for _, q := range due {
				out = append(out, gate.Settlement{MessageID: q[0].MessageID, Kind: gate.SettleReleased, At: now, Out: &gate.Forward{MessageID: q[0].MessageID}})
				for _, h := range q[1:] {
					out = append(out, gate.Settlement{MessageID: h.MessageID, Kind: gate.SettleReschedule, At: now, DueAt: now.Add(time.Hour)})
				}
			}
			return out, nil
		})
		if err != nil || n != 100 {
			t.Fatalf("Settle: %d, %v; want 100 released", n, err)
		}
	})

	scanRE := regexp.MustCompile(`(Index Scan|Index Only Scan|Bitmap Index Scan)( Backward)?( using| on) (\w+)`)
	want := map[string]string{ // the first words of a statement -> the index it must use
		"SELECT q.recipient, q.queue FROM unnest(":                 "held_queues_pkey",
		"SELECT recipient, queue FROM held_queues WHERE due_at <=": "held_queues_due_idx",
		"SELECT h.* FROM unnest(":                                  "held_pkey", // (recipient, queue, seq, message_id)
	}
	seen := map[string]bool{}
	for _, st := range append(waitStmts, settleStmts...) {
		plan := queryPlan(t, s, "EXPLAIN "+st.sql, st.vars)
		var used []string
		for _, m := range scanRE.FindAllStringSubmatch(plan, -1) {
			used = append(used, m[4])
		}
		t.Logf("indexes %v\n%s\n%s", slices.Compact(slices.Sorted(slices.Values(used))), clip(st.sql), clipPlan(plan))
		for prefix, index := range want {
			if strings.HasPrefix(st.sql, prefix) {
				seen[prefix] = true
				if !slices.Contains(used, index) {
					t.Errorf("%s: plan scans %v, want %s:\n%s", clip(st.sql), used, index, clipPlan(plan))
				}
			}
		}
		for _, table := range []string{"held", "held_queues", "suppressions", "scene_counters"} {
			if regexp.MustCompile(`Seq Scan on ` + table + `\b`).MatchString(plan) {
				t.Errorf("%s: plan reads all of %s (Seq Scan):\n%s", clip(st.sql), table, clipPlan(plan))
			}
		}
	}
	for prefix := range want {
		if !seen[prefix] {
			t.Errorf("no statement starting %q was sent", prefix)
		}
	}
}

// heldExplainStart is when the loaded messages were held.
var heldExplainStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// loadHeld holds heldExplainRows messages of 20,000 recipients in two
// scenes each, due over a day in Seq order, with their audit rows and
// queue rows, and gives the planner its statistics.
func loadHeld(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, q := range []string{
			`INSERT INTO held (message_id, kind, recipient, queue, scene, seq, held_at, due_at, expires_at, fallback, reason, payload)
SELECT 'm' || i, 'defer', 'open_id:ou_' || (i % 20000), 'scene' || (i / 20000 % 2 * 2), 'scene' || (i / 20000 % 2 * 2), i,
	$1::timestamptz, $1::timestamptz + i * interval '24 hours' / $2::int, $1::timestamptz + interval '7 days',
	'suppress', 'limit', convert_to('{"text":"held ' || i || '"}', 'UTF8')
FROM generate_series(1, $2::int) AS i`,
			`INSERT INTO held_queues (recipient, queue, due_at, head_seq)
SELECT DISTINCT ON (recipient, queue) recipient, queue, due_at, seq FROM held ORDER BY recipient, queue, seq`,
			`INSERT INTO suppressions (message_id, scene, recipient, reason, decided_at, held_as)
SELECT message_id, scene, recipient, 'limit', held_at, 'defer' FROM held`,
		} {
			var args []any
			if strings.Contains(q, "$1") {
				args = []any{heldExplainStart, heldExplainRows}
			}
			if _, err := tx.Statement.ConnPool.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if _, err := s.sqlDB.ExecContext(ctx, `VACUUM ANALYZE held, held_queues, suppressions`); err != nil {
		t.Fatalf("vacuum analyze: %v", err)
	}
}

// recordStatements makes the store record every statement a function
// sends through gorm, which still runs them.
func recordStatements(t *testing.T, s *Store) func(f func()) []statement {
	t.Helper()
	var got []statement
	keep := func(db *gorm.DB) {
		got = append(got, statement{sql: db.Statement.SQL.String(), vars: append([]any(nil), db.Statement.Vars...)})
	}
	if err := s.db.Callback().Row().Before("gorm:row").Register("test:record_row", keep); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Callback().Raw().Before("gorm:raw").Register("test:record_raw", keep); err != nil {
		t.Fatal(err)
	}
	return func(f func()) []statement {
		got = nil
		f()
		return got
	}
}

// clipPlan keeps the first lines of a plan, each clipped: a plan of a
// long IN list repeats one index scan per item.
func clipPlan(plan string) string {
	lines := strings.Split(strings.TrimSpace(plan), "\n")
	if len(lines) > 12 {
		lines = append(lines[:12], fmt.Sprintf("… %d more lines", len(lines)-12))
	}
	for i, l := range lines {
		if len(l) > 160 {
			lines[i] = l[:160] + "…"
		}
	}
	return strings.Join(lines, "\n")
}

// clip shortens a statement for a message.
func clip(sql string) string {
	sql = strings.Join(strings.Fields(sql), " ")
	if len(sql) > 120 {
		return sql[:120] + "…"
	}
	return sql
}
