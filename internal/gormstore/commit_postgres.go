package gormstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/antifatigue/gate/internal/gate"
)

// On PostgreSQL a batch is one statement of constant text, whatever its
// size: the rows travel as arrays and unnest() turns them back into rows.
// The driver prepares the statement once per connection and PostgreSQL
// plans it once, where a multi-row VALUES list of a new length (most batches
// hold a new number of suppressions) had to be parsed and planned anew, with
// thousands of parameters, every time. The claim, the audit rows, the held
// messages and the counters are data-modifying CTEs of that one statement:
// one round trip, in one implicit transaction, and what is written joins
// the keys the claim returned, so only records new to the ledger are
// written.
//
// PostgreSQL runs the CTEs in an order of its own, so the statement states
// the one that matters: the held_queues rows (which Settle locks first) are
// upserted before any counter row and any held row, because both of those
// read queues_locked, a count of every queue row upserted. Counter and
// queue rows are taken in byte order (COLLATE "C"), as Settle takes them,
// whatever the database's collation.

const decidedPostgres = `SELECT ` + priorColumns + ` FROM decisions WHERE "key" = ANY($1::text[])`

var commitPostgres = commitStatement(new(paramSeq))

// The columns that commitPostgres and commitFresh write to the ledger and
// the audit, and the types of their parameters (the audit's and the held
// messages' without the key commitPostgres joins on), in the order of
// commitColumns.
const (
	claimColumns = `"key", outcome, decided_at, scene, recipient, priority, tz`
	auditColumns = `message_id, scene, recipient, priority, limit_scope, limit_window_ms, limit_max,
		limit_calendar, limit_rate_ms, count_seen, shadow, reason, rules_version, decided_at, next_allowed_at, payload, held_as`
)

var (
	claimTypes = []string{"text", "text", "timestamptz", "text", "text", "text", "text"}
	auditTypes = []string{"text", "text", "text", "text", "text", "bigint", "integer", "text", "bigint", "integer",
		"boolean", "text", "text", "timestamptz", "timestamptz", "text", "text"}
	heldTypes = []string{"text", "text", "text", "text", "text", "text", "text", "bigint",
		"timestamptz", "timestamptz", "timestamptz", "text", "text", "bytea"}
)

// commitStatement is the text of the statement above, its parameters
// numbered in the order commitOnPostgres passes them.
func commitStatement(p *paramSeq) string {
	return `WITH claimed AS (
	INSERT INTO decisions (` + claimColumns + `)
	SELECT * FROM unnest(` + p.arrays(claimTypes...) + `)
	ON CONFLICT ("key") DO NOTHING
	RETURNING "key"
), audited AS (
	INSERT INTO suppressions (` + auditColumns + `)
	SELECT ` + auditColumns + `
	FROM unnest(` + p.arrays(append([]string{"text"}, auditTypes...)...) + `)
		AS s("key", ` + auditColumns + `)
	WHERE "key" IN (SELECT "key" FROM claimed)
	ORDER BY message_id
	ON CONFLICT (message_id) DO NOTHING
	RETURNING message_id, payload
), holds AS (
	SELECT ` + heldColumns + `
	FROM unnest(` + p.arrays(append([]string{"text"}, heldTypes...)...) + `)
		AS h("key", ` + heldColumns + `)
	WHERE "key" IN (SELECT "key" FROM claimed)
), ` + queueRows("") + `, kept AS (
	INSERT INTO held (` + heldColumns + `)
	SELECT ` + heldNoPayload + `, CASE WHEN EXISTS (SELECT 1 FROM audited a
		WHERE a.message_id = holds.message_id AND convert_to(a.payload, 'UTF8') = holds.payload)
		THEN ''::bytea ELSE holds.payload END
	FROM holds, queues_locked
	ORDER BY recipient COLLATE "C", queue COLLATE "C", seq, message_id COLLATE "C"
	ON CONFLICT ` + heldKeyColumns + ` DO NOTHING
), counted AS (
	INSERT INTO scene_counters (scene, hour, ` + eachCounter("%s", ", ") + `)
	SELECT scene, hour, ` + eachCounter("sum(%s)", ", ") + `
	FROM unnest(` + p.arrays(append([]string{"text", "text", "timestamptz"}, slices.Repeat([]string{"integer"}, gate.NumCounters)...)...) + `)
		AS c("key", scene, hour, ` + eachCounter("%s", ", ") + `), queues_locked
	WHERE "key" IN (SELECT "key" FROM claimed)
	GROUP BY scene, hour
	ORDER BY scene COLLATE "C", hour` + addCounts + `
)
SELECT "key" FROM claimed`
}

// queueRows are the CTEs that upsert the rows of the queues in holds (a
// CTE of held messages) in byte order, where (when not empty, a WHERE
// clause) lets them, and count them: the CTEs that write held or counter
// rows read queues_locked, so that they come after.
func queueRows(where string) string {
	return `queued AS (
	INSERT INTO held_queues (recipient, queue, due_at, head_seq)
	SELECT DISTINCT ON (recipient COLLATE "C", queue COLLATE "C") recipient, queue, due_at, seq FROM holds` + where + `
	ORDER BY recipient COLLATE "C", queue COLLATE "C", seq` + upsertHead + `
	RETURNING 1
), queues_locked AS (
	SELECT count(*) FROM queued
)`
}

// paramSeq numbers a statement's parameters in order, so that a column
// added to one CTE renumbers those after it.
type paramSeq struct{ n int }

// arrays is "$n::t1[], $n+1::t2[], …", one parameter per type.
func (p *paramSeq) arrays(types ...string) string {
	parts := make([]string, len(types))
	for i, t := range types {
		p.n++
		parts[i] = fmt.Sprintf("$%d::%s[]", p.n, t)
	}
	return strings.Join(parts, ", ")
}

// decidedOnPostgres is Decided in one statement of constant text. It is
// planned anew each time (pgx's exec mode), never from a cached generic plan:
// one made while the ledger was still small scans the whole table, and the
// ledger grows by every message.
func (s *Store) decidedOnPostgres(ctx context.Context, keys []string) (map[string]gate.Prior, error) {
	rows, err := s.sqlDB.QueryContext(ctx, decidedPostgres, pgx.QueryExecModeExec, keys)
	if err != nil {
		return nil, classify("decided", err)
	}
	decided := make(map[string]gate.Prior)
	if err := scanPriors(rows, decided); err != nil {
		return nil, classify("decided", err)
	}
	return decided, nil
}

// commitOnPostgres is Commit's transaction on PostgreSQL; recs are checked,
// unique and sorted by key. It returns the keys it claimed. It first runs
// commitFresh, which takes every key to be new to the ledger, and only when
// that statement finds one that is not (a unique violation, which rolls it
// back whole) runs commitPostgres, which claims what it can.
func (s *Store) commitOnPostgres(ctx context.Context, recs []gate.Record) (map[string]bool, error) {
	n := len(recs)
	cols := columnsOf(recs, s.redact)
	_, err := s.sqlDB.ExecContext(ctx, commitFresh, cols.freshArgs()...)
	if err == nil {
		claimed := make(map[string]bool, n)
		for _, r := range recs {
			claimed[r.Key] = true
		}
		return claimed, nil
	}
	if !uniqueViolation(err) {
		return nil, fmt.Errorf("claim, audit and count %d new records: %w", n, err)
	}
	rows, err := s.sqlDB.QueryContext(ctx, commitPostgres, cols.args(recs)...)
	if err != nil {
		return nil, fmt.Errorf("claim, audit and count %d records: %w", n, err)
	}
	claimed := make(map[string]bool, n)
	if err := scanKeys(rows, claimed); err != nil {
		return nil, fmt.Errorf("claim, audit and count %d records: %w", n, err)
	}
	return claimed, nil
}

// commitColumns are a batch's records column by column, for unnest().
type commitColumns struct {
	keys, outcomes, scenes, recipients, priorities, zones []string
	ats                                                   []time.Time
	sums                                                  hourSums
	sup                                                   suppressionColumns
	held                                                  heldArrays
}

// columnsOf is recs column by column; redact keeps payloads out of the
// audit rows.
func columnsOf(recs []gate.Record, redact bool) *commitColumns {
	n := len(recs)
	c := &commitColumns{
		keys: make([]string, n), outcomes: make([]string, n), scenes: make([]string, n),
		recipients: make([]string, n), priorities: make([]string, n), zones: make([]string, n),
		ats: make([]time.Time, n),
	}
	for i, r := range recs {
		c.keys[i], c.outcomes[i], c.scenes[i] = r.Key, string(r.Outcome), r.Scene
		c.recipients[i], c.priorities[i], c.zones[i] = r.Recipient, string(r.Priority), r.TZ
		c.ats[i] = r.At.UTC().Truncate(time.Microsecond)
		count(c.sums.at(r.Scene, r.At), r)
		if r.Suppression != nil {
			c.sup.add(r, redact)
		}
		if r.Hold != nil {
			c.held.add(r)
		}
	}
	return c
}

// args are the parameters of commitPostgres, whose counters come per
// record of recs (the records c holds) with its hour, to be joined on the
// keys claimed. Only the fallback from commitFresh needs them, so they are
// built here rather than for every batch.
func (c *commitColumns) args(recs []gate.Record) []any {
	n := len(recs)
	hours := make([]time.Time, n)
	var counts [gate.NumCounters][]int32
	for j := range counts {
		counts[j] = make([]int32, n)
	}
	for i, r := range recs {
		hours[i] = r.At.UTC().Truncate(time.Hour)
		var one gate.SceneSummary
		count(&one, r)
		for j, v := range one.Counters() {
			counts[j][i] = int32(*v)
		}
	}
	args := []any{c.keys, c.outcomes, c.ats, c.scenes, c.recipients, c.priorities, c.zones}
	args = append(args, c.sup.args()...)
	args = append(args, c.held.args()...)
	args = append(args, c.keys, c.scenes, hours)
	for _, v := range counts {
		args = append(args, v)
	}
	return args
}

// suppressionColumns holds audit rows column by column, for unnest().
type suppressionColumns struct {
	key, messageID, scene, recipient, priority, scope []string
	window, rate                                      []int64
	max, seen                                         []int32
	shadow                                            []bool
	calendar, reason, version                         []string
	decidedAt                                         []time.Time
	nextAllowedAt                                     []*time.Time
	payload                                           []*string
	heldAs                                            []string
}

// add appends the audit row of r, with the defaults insertSuppressions
// applies.
func (c *suppressionColumns) add(r gate.Record, redact bool) {
	p := *r.Suppression
	decided := p.DecidedAt
	if decided.IsZero() {
		decided = r.At
	}
	var next *time.Time
	if !p.NextAllowedAt.IsZero() {
		t := p.NextAllowedAt.UTC().Truncate(time.Microsecond)
		next = &t
	}
	var payload *string
	if p.Payload != "" && !redact {
		payload = &p.Payload
	}
	if r.Hold != nil {
		p.HeldAs = cmp.Or(p.HeldAs, r.Hold.Kind)
	}
	c.key = append(c.key, r.Key)
	c.messageID = append(c.messageID, cmp.Or(p.MessageID, r.Key))
	c.scene = append(c.scene, cmp.Or(p.Scene, r.Scene))
	c.recipient = append(c.recipient, p.Recipient)
	c.priority = append(c.priority, string(p.Priority))
	c.scope = append(c.scope, string(p.Scope))
	c.window = append(c.window, time.Duration(p.LimitWindow).Milliseconds())
	c.max = append(c.max, int32(p.LimitMax))
	c.calendar = append(c.calendar, string(p.LimitCalendar))
	c.rate = append(c.rate, time.Duration(p.LimitRate).Milliseconds())
	c.seen = append(c.seen, int32(p.CountSeen))
	c.shadow = append(c.shadow, p.Shadow)
	c.reason = append(c.reason, p.Reason)
	c.version = append(c.version, p.RulesVersion)
	c.decidedAt = append(c.decidedAt, decided.UTC().Truncate(time.Microsecond))
	c.nextAllowedAt = append(c.nextAllowedAt, next)
	c.payload = append(c.payload, payload)
	c.heldAs = append(c.heldAs, string(p.HeldAs))
}

// args are the columns in the order of the audited CTE's unnest() arrays,
// which commitOnPostgres passes right after the claim's; paramSeq numbers
// them, so no comment has to. Empty columns are non-nil, so that they bind
// as empty arrays, not NULL.
func (c *suppressionColumns) args() []any {
	return []any{
		nonNil(c.key), nonNil(c.messageID), nonNil(c.scene), nonNil(c.recipient), nonNil(c.priority), nonNil(c.scope),
		nonNil(c.window), nonNil(c.max), nonNil(c.calendar), nonNil(c.rate), nonNil(c.seen), nonNil(c.shadow), nonNil(c.reason), nonNil(c.version),
		nonNil(c.decidedAt), nonNil(c.nextAllowedAt), nonNil(c.payload), nonNil(c.heldAs),
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// heldArrays holds held messages column by column, for unnest().
type heldArrays struct {
	key, messageID, kind, recipient, queue, scene, priority, tz []string
	seq                                                         []int64
	heldAt, dueAt                                               []time.Time
	expires                                                     []*time.Time
	fallback, reason                                            []string
	payload                                                     [][]byte
}

// add appends the message r holds, with heldOf's defaults.
func (c *heldArrays) add(r gate.Record) {
	h := heldOf(r)
	var expires *time.Time
	if !h.Expires.IsZero() {
		t := h.Expires.UTC().Truncate(time.Microsecond)
		expires = &t
	}
	c.key = append(c.key, r.Key)
	c.messageID = append(c.messageID, h.MessageID)
	c.kind = append(c.kind, string(h.Kind))
	c.recipient = append(c.recipient, h.Queue.Recipient)
	c.queue = append(c.queue, h.Queue.Name)
	c.scene = append(c.scene, h.Scene)
	c.priority = append(c.priority, string(h.Priority))
	c.tz = append(c.tz, h.TZ)
	c.seq = append(c.seq, int64(h.Seq))
	c.heldAt = append(c.heldAt, h.HeldAt.UTC().Truncate(time.Microsecond))
	c.dueAt = append(c.dueAt, h.DueAt.UTC().Truncate(time.Microsecond))
	c.expires = append(c.expires, expires)
	c.fallback = append(c.fallback, string(h.Fallback))
	c.reason = append(c.reason, h.Reason)
	c.payload = append(c.payload, h.Payload)
}

// args are the columns in the order of the holds CTE's unnest() arrays,
// right after the audit rows' (paramSeq numbers them).
func (c *heldArrays) args() []any {
	return []any{
		nonNil(c.key), nonNil(c.messageID), nonNil(c.kind), nonNil(c.recipient), nonNil(c.queue), nonNil(c.scene),
		nonNil(c.priority), nonNil(c.tz), nonNil(c.seq), nonNil(c.heldAt), nonNil(c.dueAt), nonNil(c.expires),
		nonNil(c.fallback), nonNil(c.reason), nonNil(c.payload),
	}
}
