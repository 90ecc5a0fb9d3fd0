package gormstore

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// ledgerPage is how many ledger rows LedgerRange reads per query: large
// enough that a week of decisions takes few round trips, small enough that
// a page is a few MB at most.
const ledgerPage = 5000

const ledgerColumns = `"key", scene, recipient, priority, tz, outcome, decided_at`

// LedgerEntries returns, of keys, those in the ledger with all it keeps of
// them. Errors wrap gate.ErrUnavailable, or gate.ErrPermanent for a key the
// database could never have stored (see Decided).
func (s *Store) LedgerEntries(ctx context.Context, keys []string) (map[string]gate.LedgerEntry, error) {
	out := make(map[string]gate.LedgerEntry, len(keys))
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	for chunk := range slices.Chunk(keys, chunkRows) {
		rows, err := s.db.WithContext(ctx).Raw(`SELECT `+ledgerColumns+` FROM decisions WHERE "key" IN ?`, chunk).Rows()
		if err != nil {
			return nil, classify("ledger entries", err)
		}
		err = scanLedger(rows, func(e gate.LedgerEntry) { out[e.Key] = e })
		if err != nil {
			return nil, classify("ledger entries", err)
		}
	}
	return out, nil
}

// LedgerRange calls fn with the ledger's entries decided in [since, until),
// oldest first (ties in key order), a page at a time, until the range is
// read or fn returns an error, which LedgerRange returns. Each page is its
// own query, keyed on the last entry of the one before, so a long range
// holds no transaction open and sees rows committed meanwhile only past
// where it stands. Store errors wrap gate.ErrUnavailable.
func (s *Store) LedgerRange(ctx context.Context, since, until time.Time, fn func([]gate.LedgerEntry) error) error {
	var last *gate.LedgerEntry
	for {
		q := s.db.WithContext(ctx).Table("decisions").Select(ledgerColumns).
			Where("decided_at >= ? AND decided_at < ?", s.dbTime(since), s.dbTime(until))
		if last != nil {
			at := s.dbTime(last.At)
			q = q.Where(`(decided_at > ? OR (decided_at = ? AND "key" > ?))`, at, at, last.Key)
		}
		rows, err := q.Order(`decided_at, "key"`).Limit(ledgerPage).Rows()
		if err != nil {
			return classify("ledger range", err)
		}
		page := make([]gate.LedgerEntry, 0, ledgerPage)
		if err := scanLedger(rows, func(e gate.LedgerEntry) { page = append(page, e) }); err != nil {
			return classify("ledger range", err)
		}
		if len(page) == 0 {
			return nil
		}
		if err := fn(page); err != nil {
			return err
		}
		if len(page) < ledgerPage {
			return nil
		}
		last = &page[len(page)-1]
	}
}

// scanLedger reads rows of ledgerColumns into add, and closes rows.
func scanLedger(rows *sql.Rows, add func(gate.LedgerEntry)) error {
	defer rows.Close()
	for rows.Next() {
		var (
			e                gate.LedgerEntry
			priority, output string
			at               scanTime
		)
		if err := rows.Scan(&e.Key, &e.Scene, &e.Recipient, &priority, &e.TZ, &output, &at); err != nil {
			return err
		}
		e.Priority, e.Outcome, e.At = gate.Priority(priority), gate.Outcome(output), at.t
		add(e)
	}
	return rows.Err()
}
