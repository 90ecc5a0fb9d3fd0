package gormstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

const (
	// chunkRows bounds the rows of one multi-row statement, and the keys of
	// one IN list: 500 rows of the widest (suppressions, 16 columns) is 8,000
	// parameters, far from PostgreSQL's 65,535 and SQLite's 32,766.
	chunkRows = 500
	// pruneBatch bounds one DELETE of the ledger, so pruning never holds
	// long locks.
	pruneBatch = 5000
)

// Decided returns, of keys, those committed before, with the outcome and
// time then recorded. Keys are looked up 500 to a statement (all in one on
// PostgreSQL). A key the database refuses (on PostgreSQL, one that is not
// UTF-8 or holds a NUL byte) gives an error wrapping gate.ErrPermanent: it
// can never have been committed. Other errors wrap gate.ErrUnavailable.
func (s *Store) Decided(ctx context.Context, keys []string) (map[string]gate.Prior, error) {
	if len(keys) == 0 {
		return map[string]gate.Prior{}, nil
	}
	return s.dialect.decided(s, ctx, keys)
}

// decidedInChunks is Decided on SQLite: sorted, unique keys, chunkRows to a
// statement.
func (s *Store) decidedInChunks(ctx context.Context, keys []string) (map[string]gate.Prior, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	decided := make(map[string]gate.Prior)
	for chunk := range slices.Chunk(keys, chunkRows) {
		rows, err := s.db.WithContext(ctx).Raw(`SELECT `+priorColumns+` FROM decisions WHERE "key" IN ?`, chunk).Rows()
		if err != nil {
			return nil, classify("decided", err)
		}
		if err := scanPriors(rows, decided); err != nil {
			return nil, classify("decided", err)
		}
	}
	return decided, nil
}

// Commit makes a batch durable in one transaction: it claims each record's
// key in the ledger, and for the records whose key was new it writes their
// suppression rows and adds them to their scenes' hourly counters. Records
// whose key was committed before, or that repeat a key earlier in the batch,
// change nothing.
//
// A record without a Key or a time, or with an unknown Outcome, is a
// programming error: the whole batch is refused with an error wrapping
// gate.ErrBadRequest and gate.ErrPermanent, and nothing is written. So is a
// batch holding a record the database refuses (see refused: text that is
// not UTF-8 or holds a NUL byte on PostgreSQL, a CHECK constraint violated
// on SQLite, a key over the index's size limit), with an error wrapping
// gate.ErrPermanent. Any other error wraps gate.ErrUnavailable, and nothing
// of the batch was written either. SQLite stores any bytes as text, so what
// PostgreSQL refuses for its encoding SQLite keeps as sent.
func (s *Store) Commit(ctx context.Context, recs []gate.Record) (known []string, err error) {
	recs, err = uniqueRecords(recs)
	if err != nil {
		return nil, fmt.Errorf("commit: %w: %w", gate.ErrPermanent, err)
	}
	if len(recs) == 0 {
		return nil, nil
	}
	claimed, err := s.dialect.commit(s, ctx, recs)
	if err != nil {
		if lostSight(err) {
			return nil, fmt.Errorf("%w: %w", gate.ErrOutcomeUnknown, classify("commit", err))
		}
		return nil, classify("commit", err)
	}
	for _, r := range recs {
		if !claimed[r.Key] {
			known = append(known, r.Key)
		}
	}
	return known, nil
}

// commitInTransaction is Commit's transaction on SQLite, statement by
// statement; recs are checked, unique and sorted. It returns the keys it
// claimed.
func (s *Store) commitInTransaction(ctx context.Context, recs []gate.Record) (claimed map[string]bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		fresh, err := s.claim(tx, recs)
		if err != nil {
			return err
		}
		claimed = make(map[string]bool, len(fresh))
		for _, r := range fresh {
			claimed[r.Key] = true
		}
		if err := s.insertSuppressions(tx, fresh); err != nil {
			return err
		}
		// Queue rows before counters: Settle takes them in that order.
		if err := s.insertHeld(tx, fresh); err != nil {
			return err
		}
		var answers answerColumns
		for _, r := range fresh {
			if r.Answer != nil {
				answers.add(r)
			}
		}
		if err := s.insertAnswers(tx, answers); err != nil {
			return err
		}
		return s.addCounts(tx, fresh)
	})
	return claimed, err
}

// uniqueRecords checks recs and keeps the first record of each key, sorted
// by key: concurrent transactions then take the ledger's row locks in one
// order and cannot deadlock on each other.
func uniqueRecords(recs []gate.Record) ([]gate.Record, error) {
	for i, r := range recs {
		switch {
		case r.Key == "":
			return nil, fmt.Errorf("record %d: %w: empty key", i, gate.ErrBadRequest)
		case r.At.IsZero():
			return nil, fmt.Errorf("record %d (%s): %w: zero time", i, r.Key, gate.ErrBadRequest)
		}
		switch r.Outcome {
		case gate.OutcomeForward, gate.OutcomeSuppress, gate.OutcomeDrop, gate.OutcomeInvalid, gate.OutcomeParked,
			gate.OutcomeDefer, gate.OutcomeDigest:
		default:
			return nil, fmt.Errorf("record %d (%s): %w: unknown outcome %q", i, r.Key, gate.ErrBadRequest, r.Outcome)
		}
		if err := checkHold(r); err != nil {
			return nil, fmt.Errorf("record %d (%s): %w: %w", i, r.Key, gate.ErrBadRequest, err)
		}
		if r.Answer != nil {
			if _, _, err := answerRow(*r.Answer); err != nil {
				return nil, fmt.Errorf("record %d (%s): %w: its answer: %w", i, r.Key, gate.ErrBadRequest, err)
			}
		}
	}
	out := slices.Clone(recs)
	slices.SortStableFunc(out, func(a, b gate.Record) int { return strings.Compare(a.Key, b.Key) })
	return slices.CompactFunc(out, func(a, b gate.Record) bool { return a.Key == b.Key }), nil
}

// claim inserts the records' keys into the ledger and returns the records
// whose key was not there before, in order.
func (s *Store) claim(tx *gorm.DB, recs []gate.Record) ([]gate.Record, error) {
	fresh := make(map[string]bool, len(recs))
	for chunk := range slices.Chunk(recs, chunkRows) {
		args := make([]any, 0, 8*len(chunk))
		for _, r := range chunk {
			args = append(args, r.Key, string(r.Outcome), s.dbTime(r.At), r.Scene, r.Recipient, string(r.Priority), r.TZ, r.BodyHash)
		}
		rows, err := tx.Raw(multiRow(`INSERT INTO decisions ("key", outcome, decided_at, scene, recipient, priority, tz, body_hash)`, 8, len(chunk))+
			` ON CONFLICT ("key") DO NOTHING RETURNING "key"`, args...).Rows()
		if err != nil {
			return nil, fmt.Errorf("claim keys: %w", err)
		}
		if err := scanKeys(rows, fresh); err != nil {
			return nil, fmt.Errorf("claim keys: %w", err)
		}
	}
	return slices.DeleteFunc(slices.Clone(recs), func(r gate.Record) bool { return !fresh[r.Key] }), nil
}

// insertSuppressions writes the audit rows of recs. A message id already
// audited (under another key) keeps its first row.
func (s *Store) insertSuppressions(tx *gorm.DB, recs []gate.Record) error {
	var sups []gate.Suppression
	for _, r := range recs {
		if r.Suppression == nil {
			continue
		}
		sup := *r.Suppression
		sup.MessageID = cmp.Or(sup.MessageID, r.Key)
		sup.Scene = cmp.Or(sup.Scene, r.Scene)
		if sup.DecidedAt.IsZero() {
			sup.DecidedAt = r.At
		}
		if s.redact {
			sup.Payload = ""
		}
		if r.Hold != nil {
			sup.HeldAs = cmp.Or(sup.HeldAs, r.Hold.Kind)
		}
		sups = append(sups, sup)
	}
	slices.SortFunc(sups, func(a, b gate.Suppression) int { return strings.Compare(a.MessageID, b.MessageID) })
	for chunk := range slices.Chunk(sups, chunkRows) {
		args := make([]any, 0, 17*len(chunk))
		for _, p := range chunk {
			var payload any
			if p.Payload != "" {
				payload = p.Payload
			}
			args = append(args, p.MessageID, p.Scene, p.Recipient, string(p.Priority), string(p.Scope),
				time.Duration(p.LimitWindow).Milliseconds(), p.LimitMax, string(p.LimitCalendar), time.Duration(p.LimitRate).Milliseconds(), p.CountSeen, p.Shadow,
				p.Reason, p.RulesVersion, s.dbTime(p.DecidedAt), s.dbTimeOrNull(p.NextAllowedAt), payload, string(p.HeldAs))
		}
		err := tx.Exec(multiRow(`INSERT INTO suppressions (message_id, scene, recipient, priority, limit_scope,
	limit_window_ms, limit_max, limit_calendar, limit_rate_ms, count_seen, shadow, reason, rules_version, decided_at, next_allowed_at,
	payload, held_as)`, 17, len(chunk))+
			` ON CONFLICT (message_id) DO NOTHING`, args...).Error
		if err != nil {
			return fmt.Errorf("insert suppressions: %w", err)
		}
	}
	return nil
}

// counterColumns are scene_counters' counter columns, in the order of
// gate.SceneSummary.Counters(): every statement that writes or sums them is
// built from this list, so the order is stated once.
var counterColumns = [gate.NumCounters]string{"received", "forwarded", "suppressed", "dropped", "invalid",
	"shadow_suppressed", "shadow_dropped", "forwarded_unchecked", "parked",
	"deferred", "digested", "released", "fell_back", "refunded", "cancelled"}

// eachCounter joins format, applied to each counter column (as %[1]s), with
// sep.
func eachCounter(format, sep string) string {
	parts := make([]string, len(counterColumns))
	for i, c := range counterColumns {
		parts[i] = fmt.Sprintf(format, c)
	}
	return strings.Join(parts, sep)
}

// addCounts ends an INSERT into scene_counters: a (scene, hour) row that
// exists already gets the new counts added to its own.
var addCounts = " ON CONFLICT (scene, hour) DO UPDATE SET\n\t" +
	eachCounter("%[1]s = scene_counters.%[1]s + excluded.%[1]s", ",\n\t")

// sceneHour is one row of scene_counters.
type sceneHour struct {
	hour time.Time
	gate.SceneSummary
}

// addCounts adds recs to the hourly counters.
func (s *Store) addCounts(tx *gorm.DB, recs []gate.Record) error {
	var sums hourSums
	for _, r := range recs {
		count(sums.at(r.Scene, r.At), r)
	}
	return s.upsertCounters(tx, sums)
}

// hourSums adds counts up per (scene, UTC hour) in Go, so that each
// scene_counters row is written once per transaction.
type hourSums map[sceneHourKey]*sceneHour

type sceneHourKey struct {
	scene string
	hour  int64
}

// at returns the counters of scene in the hour holding t.
func (h *hourSums) at(scene string, t time.Time) *gate.SceneSummary {
	if *h == nil {
		*h = make(hourSums)
	}
	hour := t.UTC().Truncate(time.Hour)
	k := sceneHourKey{scene, hour.Unix()}
	c := (*h)[k]
	if c == nil {
		c = &sceneHour{hour: hour, SceneSummary: gate.SceneSummary{Scene: scene}}
		(*h)[k] = c
	}
	return &c.SceneSummary
}

// upsertCounters adds sums to scene_counters: one upsert per chunk of
// (scene, hour) rows, in that order, so that concurrent transactions (the
// commits of batches, the settling of held messages) lock the rows in one
// order.
func (s *Store) upsertCounters(tx *gorm.DB, sums hourSums) error {
	rows := make([]*sceneHour, 0, len(sums))
	for _, c := range sums {
		rows = append(rows, c)
	}
	slices.SortFunc(rows, func(a, b *sceneHour) int {
		return cmp.Or(strings.Compare(a.Scene, b.Scene), a.hour.Compare(b.hour))
	})
	for chunk := range slices.Chunk(rows, chunkRows) {
		args := make([]any, 0, (2+gate.NumCounters)*len(chunk))
		for _, c := range chunk {
			args = append(args, c.Scene, s.dbTime(c.hour))
			for _, v := range c.Counters() {
				args = append(args, *v)
			}
		}
		err := tx.Exec(multiRow(`INSERT INTO scene_counters (scene, hour, `+eachCounter("%s", ", ")+`)`,
			2+gate.NumCounters, len(chunk))+addCounts, args...).Error
		if err != nil {
			return fmt.Errorf("add counters: %w", err)
		}
	}
	return nil
}

// count adds one record to c. A shadow forward was forwarded, and is also
// counted as what enforcement would have done.
func count(c *gate.SceneSummary, r gate.Record) {
	c.Received++
	switch r.Outcome {
	case gate.OutcomeForward:
		c.Forwarded++
		if r.Unchecked {
			c.ForwardedUnchecked++
		}
		if r.Shadow {
			switch r.ShadowOf {
			case gate.ActionSuppress:
				c.ShadowSuppressed++
			case gate.ActionDrop:
				c.ShadowDropped++
			}
		}
	case gate.OutcomeSuppress:
		c.Suppressed++
	case gate.OutcomeDrop:
		c.Dropped++
	case gate.OutcomeInvalid:
		c.Invalid++
	case gate.OutcomeParked:
		c.Parked++
	case gate.OutcomeDefer:
		c.Deferred++
	case gate.OutcomeDigest:
		c.Digested++
	}
}

// Prune deletes ledger keys decided before now minus the retention, 5,000
// to a statement so it never holds long locks, and returns how many it
// deleted. Run it periodically: a failed run leaves the ledger partly
// pruned, which is fine. On PostgreSQL it drops whole partitions instead
// (see prunePartitions), so a key may outlive the retention by up to a
// partition's span. Errors wrap gate.ErrUnavailable.
func (s *Store) Prune(ctx context.Context, now time.Time) (int64, error) {
	if s.partitioned {
		// The audit rows' partitions are made ahead here too: their own
		// prune does not run when they are kept forever.
		for _, t := range []partTable{suppressionsTable, checkAnswersTable} {
			if err := s.ensureTable(ctx, t, time.Now()); err != nil {
				s.log.WarnContext(ctx, "making partitions ahead failed; rows go to the default partition meanwhile", "table", t.name, "err", err)
			}
		}
		return s.prunePartitions(ctx, decisionsTable, now.Add(-s.retention), pruneBatch, nil)
	}
	return s.deleteInBatches(ctx, "prune", `DELETE FROM decisions WHERE "key" IN
	(SELECT "key" FROM decisions WHERE decided_at < ? LIMIT ?)`,
		pruneBatch, nil, s.dbTime(now.Add(-s.retention)))
}

// multiRow returns "head VALUES (?, …), (?, …)" for rows rows of cols
// placeholders.
func multiRow(head string, cols, rows int) string {
	tuple := "(?" + strings.Repeat(", ?", cols-1) + ")"
	var b strings.Builder
	b.Grow(len(head) + 8 + rows*(len(tuple)+2))
	b.WriteString(head)
	b.WriteString(" VALUES ")
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
	}
	return b.String()
}

// priorColumns are the ledger's columns Decided reads: what a gate.Prior
// holds.
const priorColumns = `"key", outcome, decided_at, scene, recipient, body_hash`

// scanPriors reads rows of priorColumns into m, and closes rows.
func scanPriors(rows rowSource, m map[string]gate.Prior) error {
	defer rows.Close()
	for rows.Next() {
		var (
			k, outcome string
			p          gate.Prior
			at         scanTime
		)
		if err := rows.Scan(&k, &outcome, &at, &p.Scene, &p.Recipient, &p.BodyHash); err != nil {
			return err
		}
		p.Outcome, p.At = gate.Outcome(outcome), at.t
		m[k] = p
	}
	return rows.Err()
}

// scanKeys adds the single text column of rows to set, and closes rows.
func scanKeys(rows *sql.Rows, set map[string]bool) error {
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return err
		}
		set[k] = true
	}
	return rows.Err()
}
