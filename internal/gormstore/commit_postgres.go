package gormstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/antifatigue/gate/internal/gate"
)

// On PostgreSQL a batch is one statement of constant text, whatever its
// size (commitFresh): the rows travel as arrays and unnest() turns them back
// into rows. The driver prepares the statement once per connection and
// PostgreSQL plans it once, where a multi-row VALUES list of a new length
// had to be parsed and planned anew, with thousands of parameters, every
// time.
//
// The ledger is partitioned by time (partition.go), so no unique index can
// hold a key across partitions. A claim is therefore, in one transaction:
// take a transaction-scoped advisory lock on each key's hash, in hash order
// (so two commits sharing keys never deadlock); read which keys the ledger
// holds; write the rest. Two gates claiming one id wait for each other at
// the lock, and the second reads the first's row, whichever partitions the
// two decision times fall in (TestClaimAcrossPartitionBoundary).

// The lookups by key probe each key's index entry in every partition, one
// key at a time (lateral with LIMIT 1, which PostgreSQL cannot flatten into
// a join). Asked as "key" = ANY($1) for a batch of 256, it planned a seq
// scan of a young partition as soon as the partition held more pages than
// the keys cost in index probes: 6 ms for 256 keys against 50k rows, ANALYZEd
// or not, where the probes take 2 ms; joined to unnest($1) as a plain join,
// it hashed every partition (36b272f).
const decidedPostgres = `SELECT d."key", d.outcome, d.decided_at, d.scene, d.recipient, d.body_hash
	FROM unnest($1::text[]) AS k(k)
	CROSS JOIN LATERAL (SELECT ` + priorColumns + ` FROM decisions WHERE "key" = k.k LIMIT 1) AS d`

// claimLocks takes the claim lock of every key of $1; answerLocks the
// lock of every check id of $1 whose answer is saved. The hash includes the
// schema, so schemas sharing a database (tests, tenants) never wait for
// each other. Each is prepared under its name on the connections that
// pipeline it.
var (
	claimLocks  = locksOf("k")
	answerLocks = locksOf("a")
)

const (
	claimLocksName      = "gate_claim_locks"
	answerLocksName     = "gate_answer_locks"
	decidedPostgresName = "gate_decided"
)

func locksOf(space string) string {
	return `SELECT count(pg_advisory_xact_lock(h)) FROM (
	SELECT DISTINCT hashtextextended(coalesce(current_schema(), '') || ':` + space + `:' || k, 27) AS h
	FROM unnest($1::text[]) AS k ORDER BY h) AS x`
}

// auditedAt is which message ids of $1 have an audit row decided at one of
// the times of $2: bounded by time, it reads the partitions of those times.
const auditedAt = `SELECT message_id FROM suppressions WHERE message_id = ANY($1::text[]) AND decided_at = ANY($2::timestamptz[])`

// claimedKeys is which keys of $1 the ledger holds.
const claimedKeys = `SELECT k.k FROM unnest($1::text[]) AS k(k)
	CROSS JOIN LATERAL (SELECT 1 FROM decisions WHERE "key" = k.k LIMIT 1) AS d`

// The columns that commitFresh writes to the ledger and the audit, and the
// types of their parameters, in the order of commitColumns.
const (
	claimColumns = `"key", outcome, decided_at, scene, recipient, priority, tz, body_hash`
	auditColumns = `message_id, scene, recipient, priority, limit_scope, limit_window_ms, limit_max,
		limit_calendar, limit_rate_ms, count_seen, shadow, reason, rules_version, decided_at, next_allowed_at, payload, held_as`
)

var (
	claimTypes = []string{"text", "text", "timestamptz", "text", "text", "text", "text", "bigint"}
	auditTypes = []string{"text", "text", "text", "text", "text", "bigint", "integer", "text", "bigint", "integer",
		"boolean", "text", "text", "timestamptz", "timestamptz", "text", "text"}
	heldTypes = []string{"text", "text", "text", "text", "text", "text", "text", "bigint",
		"timestamptz", "timestamptz", "timestamptz", "text", "text", "text", "bytea"}
)

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

// decidedOnPostgres is Decided in one statement of constant text, prepared
// once per connection, on its generic plan (queryGeneric): its plan probes
// each key's index whatever the statistics, so a generic plan made while
// the ledger was small serves as well once it is large.
func (s *Store) decidedOnPostgres(ctx context.Context, keys []string) (map[string]gate.Prior, error) {
	decided := make(map[string]gate.Prior)
	err := s.queryGeneric(ctx, decidedPostgresName, decidedPostgres, []any{keys}, func(rows rowSource) error {
		return scanPriors(rows, decided)
	})
	if err != nil {
		return nil, classify("decided", err)
	}
	return decided, nil
}

// commitOnPostgres is Commit's transaction on PostgreSQL; recs are checked,
// unique and sorted by key. It returns the keys it claimed. Most batches
// hold only new keys, and take one round trip (commitAtOnceOnPostgres);
// a batch with a key the ledger holds, or with an audit row that its claim
// does not cover, goes statement by statement (commitByStatement), as does
// every batch while a test's claimHook waits between lookup and insert.
func (s *Store) commitOnPostgres(ctx context.Context, recs []gate.Record) (map[string]bool, error) {
	if s.claimHook == nil && !slices.ContainsFunc(recs, auditedApart) {
		claimed, err := s.commitAtOnceOnPostgres(ctx, recs)
		if err != nil || claimed != nil {
			return claimed, err
		}
	}
	return s.commitByStatement(ctx, recs)
}

// auditedApart reports whether r's audit row has an id its claim does not
// cover (auditedBefore).
func auditedApart(r gate.Record) bool {
	p := r.Suppression
	return p != nil && p.MessageID != "" && p.MessageID != r.Key
}

// commitAtOnceOnPostgres sends claimLocks and commitAtOnce in one pipeline:
// PostgreSQL runs the two as one implicit transaction, and the second takes
// its snapshot only once the first holds every lock, so it sees the rows of
// any commit that held one of them before. It returns nil, and writes
// nothing, when the ledger holds one of the keys.
func (s *Store) commitAtOnceOnPostgres(ctx context.Context, recs []gate.Record) (map[string]bool, error) {
	n := len(recs)
	cols := columnsOf(recs, s.redact)
	var hits, wrote int64
	b := new(pgx.Batch)
	shape := cols.shape()
	b.Queue(claimLocksName, cols.keys)
	b.Queue(commitAtOnceName(shape), cols.freshArgs(shape)...)
	named := map[string]string{claimLocksName: claimLocks, commitAtOnceName(shape): commitAtOnce(shape)}
	err := s.inOnePipeline(ctx, b, named, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return br.QueryRow().Scan(&hits, &wrote)
	})
	if err != nil {
		return nil, fmt.Errorf("lock, claim, audit and count %d records: %w", n, err)
	}
	if hits > 0 {
		return nil, nil
	}
	if wrote != int64(n) {
		return nil, fmt.Errorf("claim %d records: %d ledger rows written", n, wrote)
	}
	claimed := make(map[string]bool, n)
	for _, r := range recs {
		claimed[r.Key] = true
	}
	return claimed, nil
}

// commitByStatement is commitOnPostgres one statement at a time: it locks
// the keys, leaves out those the ledger holds and the audit rows that
// exist, and writes the others with commitFresh.
func (s *Store) commitByStatement(ctx context.Context, recs []gate.Record) (claimed map[string]bool, err error) {
	n := len(recs)
	keys := make([]string, n)
	for i, r := range recs {
		keys[i] = r.Key
	}
	tx, err := s.sqlDB.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			tx.Rollback() //nolint:errcheck // the error that made us roll back matters
		}
	}()
	if _, err := tx.ExecContext(ctx, claimLocks, keys); err != nil {
		return nil, fmt.Errorf("lock %d keys: %w", n, err)
	}
	held := make(map[string]bool)
	rows, err := tx.QueryContext(ctx, claimedKeys, pgx.QueryExecModeCacheStatement, keys)
	if err != nil {
		return nil, fmt.Errorf("read %d keys: %w", n, err)
	}
	if err := scanKeys(rows, held); err != nil {
		return nil, fmt.Errorf("read %d keys: %w", n, err)
	}
	if s.claimHook != nil {
		s.claimHook()
	}
	fresh := recs
	if len(held) > 0 {
		fresh = slices.DeleteFunc(slices.Clone(recs), func(r gate.Record) bool { return held[r.Key] })
	}
	if fresh, err = s.auditedBefore(ctx, tx, fresh); err != nil {
		return nil, err
	}
	claimed = make(map[string]bool, len(fresh))
	if len(fresh) > 0 {
		cols := columnsOf(fresh, s.redact)
		if _, err := tx.ExecContext(ctx, commitFresh(cols.shape()), cols.freshArgs(cols.shape())...); err != nil {
			return nil, fmt.Errorf("claim, audit and count %d records: %w", len(fresh), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	for _, r := range fresh {
		claimed[r.Key] = true
	}
	return claimed, nil
}

// auditedBefore returns recs without the audit rows that exist already: a
// record whose message id differs from its key (so that the claim does not
// cover it) and whose id has an audit row of the same decision time keeps
// that row, and its held message keeps its own bytes. An id decided again at
// another time, after the ledger forgot it, gets an audit row of its own.
func (s *Store) auditedBefore(ctx context.Context, tx *sql.Tx, recs []gate.Record) ([]gate.Record, error) {
	var ids []string
	var ats []time.Time
	for _, r := range recs {
		if p := r.Suppression; auditedApart(r) {
			ids = append(ids, p.MessageID)
			ats = append(ats, cmp.Or(p.DecidedAt, r.At).UTC().Truncate(time.Microsecond))
		}
	}
	if len(ids) == 0 {
		return recs, nil
	}
	rows, err := tx.QueryContext(ctx, auditedAt, ids, ats)
	if err != nil {
		return nil, fmt.Errorf("read audit rows of %d ids: %w", len(ids), err)
	}
	found := make(map[string]bool)
	if err := scanKeys(rows, found); err != nil {
		return nil, fmt.Errorf("read audit rows of %d ids: %w", len(ids), err)
	}
	if len(found) == 0 {
		return recs, nil
	}
	out := slices.Clone(recs)
	for i, r := range out {
		if p := r.Suppression; p != nil && p.MessageID != r.Key && found[p.MessageID] {
			out[i].Suppression = nil
		}
	}
	return out, nil
}

// commitColumns are a batch's records column by column, for unnest().
type commitColumns struct {
	keys, outcomes, scenes, recipients, priorities, zones []string
	ats                                                   []time.Time
	bodyHashes                                            []int64
	sums                                                  hourSums
	sup                                                   suppressionColumns
	held                                                  heldArrays
	answers                                               answerColumns
}

// columnsOf is recs column by column; redact keeps payloads out of the
// audit rows.
func columnsOf(recs []gate.Record, redact bool) *commitColumns {
	n := len(recs)
	c := &commitColumns{
		keys: make([]string, n), outcomes: make([]string, n), scenes: make([]string, n),
		recipients: make([]string, n), priorities: make([]string, n), zones: make([]string, n),
		ats: make([]time.Time, n), bodyHashes: make([]int64, n),
	}
	for i, r := range recs {
		c.keys[i], c.outcomes[i], c.scenes[i], c.bodyHashes[i] = r.Key, string(r.Outcome), r.Scene, r.BodyHash
		c.recipients[i], c.priorities[i], c.zones[i] = r.Recipient, string(r.Priority), r.TZ
		c.ats[i] = r.At.UTC().Truncate(time.Microsecond)
		count(c.sums.at(r.Scene, r.At), r)
		if r.Suppression != nil {
			c.sup.add(r, redact)
		}
		if r.Hold != nil {
			c.held.add(r)
		}
		if r.Answer != nil {
			c.answers.add(r)
		}
	}
	return c
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
	fallback, reason, cancelKey                                 []string
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
	c.cancelKey = append(c.cancelKey, h.CancelKey)
	c.payload = append(c.payload, h.Payload)
}

// args are the columns in the order of the holds CTE's unnest() arrays,
// right after the audit rows' (paramSeq numbers them).
func (c *heldArrays) args() []any {
	return []any{
		nonNil(c.key), nonNil(c.messageID), nonNil(c.kind), nonNil(c.recipient), nonNil(c.queue), nonNil(c.scene),
		nonNil(c.priority), nonNil(c.tz), nonNil(c.seq), nonNil(c.heldAt), nonNil(c.dueAt), nonNil(c.expires),
		nonNil(c.fallback), nonNil(c.reason), nonNil(c.cancelKey), nonNil(c.payload),
	}
}
