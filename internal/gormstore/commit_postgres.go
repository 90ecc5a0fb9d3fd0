package gormstore

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/antifatigue/gate/internal/gate"
)

// On PostgreSQL a batch is one statement of constant text, whatever its
// size: the rows travel as arrays and unnest() turns them back into rows.
// The driver prepares the statement once per connection and PostgreSQL
// plans it once, where a multi-row VALUES list of a new length (most batches
// hold a new number of suppressions) had to be parsed and planned anew, with
// thousands of parameters, every time. The claim, the audit rows and the
// counters are data-modifying CTEs of that one statement: one round trip, in
// one implicit transaction, and the audit rows and counts join the keys the
// claim returned, so only records new to the ledger are written.

const decidedPostgres = `SELECT "key", outcome, decided_at FROM decisions WHERE "key" = ANY($1::text[])`

const commitPostgres = `WITH claimed AS (
	INSERT INTO decisions ("key", outcome, decided_at)
	SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[])
	ON CONFLICT ("key") DO NOTHING
	RETURNING "key"
), audited AS (
	INSERT INTO suppressions (message_id, scene, recipient, priority, limit_scope, limit_window_ms, limit_max,
		count_seen, shadow, reason, rules_version, decided_at, next_allowed_at, payload)
	SELECT message_id, scene, recipient, priority, limit_scope, limit_window_ms, limit_max,
		count_seen, shadow, reason, rules_version, decided_at, next_allowed_at, payload
	FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[],
		$11::integer[], $12::integer[], $13::boolean[], $14::text[], $15::text[], $16::timestamptz[],
		$17::timestamptz[], $18::text[])
		AS s("key", message_id, scene, recipient, priority, limit_scope, limit_window_ms, limit_max,
		count_seen, shadow, reason, rules_version, decided_at, next_allowed_at, payload)
	WHERE "key" IN (SELECT "key" FROM claimed)
	ORDER BY message_id
	ON CONFLICT (message_id) DO NOTHING
), counted AS (
	INSERT INTO scene_counters (scene, hour, received, forwarded, suppressed, dropped, invalid,
		shadow_suppressed, shadow_dropped, forwarded_unchecked, parked)
	SELECT scene, hour, sum(received), sum(forwarded), sum(suppressed), sum(dropped), sum(invalid),
		sum(shadow_suppressed), sum(shadow_dropped), sum(forwarded_unchecked), sum(parked)
	FROM unnest($19::text[], $20::text[], $21::timestamptz[], $22::integer[], $23::integer[], $24::integer[],
		$25::integer[], $26::integer[], $27::integer[], $28::integer[], $29::integer[], $30::integer[])
		AS c("key", scene, hour, received, forwarded, suppressed, dropped, invalid,
		shadow_suppressed, shadow_dropped, forwarded_unchecked, parked)
	WHERE "key" IN (SELECT "key" FROM claimed)
	GROUP BY scene, hour
	ORDER BY scene, hour` + addCounts + `
)
SELECT "key" FROM claimed`

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

// commitOnPostgres is Commit's transaction as the one statement above; recs
// are checked, unique and sorted by key. It returns the keys it claimed.
func (s *Store) commitOnPostgres(ctx context.Context, recs []gate.Record) (map[string]bool, error) {
	n := len(recs)
	var (
		keys, outcomes = make([]string, n), make([]string, n)
		ats, hours     = make([]time.Time, n), make([]time.Time, n)
		scenes         = make([]string, n)
		counts         [gate.NumCounters][]int32
		sup            suppressionColumns
	)
	for i := range counts {
		counts[i] = make([]int32, n)
	}
	for i, r := range recs {
		keys[i], outcomes[i], scenes[i] = r.Key, string(r.Outcome), r.Scene
		ats[i] = r.At.UTC().Truncate(time.Microsecond)
		hours[i] = r.At.UTC().Truncate(time.Hour)
		var c gate.SceneSummary
		count(&c, r)
		for j, v := range c.Counters() {
			counts[j][i] = int32(*v)
		}
		if r.Suppression != nil {
			sup.add(r, s.redact)
		}
	}
	args := []any{keys, outcomes, ats}
	args = append(args, sup.args()...)
	args = append(args, keys, scenes, hours)
	for _, c := range counts {
		args = append(args, c)
	}
	rows, err := s.sqlDB.QueryContext(ctx, commitPostgres, args...)
	if err != nil {
		return nil, fmt.Errorf("claim, audit and count %d records: %w", n, err)
	}
	claimed := make(map[string]bool, n)
	if err := scanKeys(rows, claimed); err != nil {
		return nil, fmt.Errorf("claim, audit and count %d records: %w", n, err)
	}
	return claimed, nil
}

// suppressionColumns holds audit rows column by column, for unnest().
type suppressionColumns struct {
	key, messageID, scene, recipient, priority, scope []string
	window                                            []int64
	max, seen                                         []int32
	shadow                                            []bool
	reason, version                                   []string
	decidedAt                                         []time.Time
	nextAllowedAt                                     []*time.Time
	payload                                           []*string
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
	c.key = append(c.key, r.Key)
	c.messageID = append(c.messageID, cmp.Or(p.MessageID, r.Key))
	c.scene = append(c.scene, cmp.Or(p.Scene, r.Scene))
	c.recipient = append(c.recipient, p.Recipient)
	c.priority = append(c.priority, string(p.Priority))
	c.scope = append(c.scope, string(p.Scope))
	c.window = append(c.window, time.Duration(p.LimitWindow).Milliseconds())
	c.max = append(c.max, int32(p.LimitMax))
	c.seen = append(c.seen, int32(p.CountSeen))
	c.shadow = append(c.shadow, p.Shadow)
	c.reason = append(c.reason, p.Reason)
	c.version = append(c.version, p.RulesVersion)
	c.decidedAt = append(c.decidedAt, decided.UTC().Truncate(time.Microsecond))
	c.nextAllowedAt = append(c.nextAllowedAt, next)
	c.payload = append(c.payload, payload)
}

// args are the columns in the order of the statement's parameters $4-$18.
// Empty columns are non-nil, so that they bind as empty arrays, not NULL.
func (c *suppressionColumns) args() []any {
	return []any{
		nonNil(c.key), nonNil(c.messageID), nonNil(c.scene), nonNil(c.recipient), nonNil(c.priority), nonNil(c.scope),
		nonNil(c.window), nonNil(c.max), nonNil(c.seen), nonNil(c.shadow), nonNil(c.reason), nonNil(c.version),
		nonNil(c.decidedAt), nonNil(c.nextAllowedAt), nonNil(c.payload),
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
