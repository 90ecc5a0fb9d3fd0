package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

var _ gate.RefundLog = (*Store)(nil)

// Refunded returns the refund row of id, if there is one. Errors wrap
// gate.ErrUnavailable.
func (s *Store) Refunded(ctx context.Context, id string) (gate.Refund, bool, error) {
	items, err := queryRows(ctx, s.db, `SELECT `+refundColumns+` FROM refunds WHERE message_id = ?`, []any{id}, scanRefund)
	if err != nil {
		return gate.Refund{}, false, unavailable("read refund", err)
	}
	if len(items) == 0 {
		return gate.Refund{}, false, nil
	}
	return items[0], true, nil
}

// ReleasedAt returns when the held message id was released (forwarded
// late by the releaser), from its audit row. Errors wrap
// gate.ErrUnavailable.
func (s *Store) ReleasedAt(ctx context.Context, id string) (time.Time, bool, error) {
	var at scanTime
	q := `SELECT settled_at FROM suppressions WHERE message_id = ? AND settled = ?`
	if s.partitioned {
		// By id and decision time, which the ledger keeps: the time picks
		// the audit row's one partition.
		q = `SELECT s.settled_at FROM decisions d JOIN suppressions s ON s.message_id = d."key" AND s.decided_at = d.decided_at
	WHERE d."key" = ? AND s.settled = ?`
	}
	err := s.db.WithContext(ctx).Raw(q, id, string(gate.SettleReleased)).Row().Scan(&at)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, unavailable("read release", err)
	}
	return at.t, !at.t.IsZero(), nil
}

// RecordRefund writes r's row and adds one to its scene's refunded counter
// in the hour of r.RefundedAt, in one transaction; when the id has a row
// already it writes nothing and returns that row. See gate.RefundLog. A
// refund with no id, scene, recipient or times, or an unknown source, wraps
// gate.ErrBadRequest.
func (s *Store) RecordRefund(ctx context.Context, r gate.Refund) (gate.Refund, bool, error) {
	const op = "record refund"
	switch {
	case r.MessageID == "" || r.Scene == "" || r.Recipient == "":
		return gate.Refund{}, false, badRequest(op, "refund %q: empty id, scene or recipient", r.MessageID)
	case r.ForwardedAt.IsZero() || r.RefundedAt.IsZero():
		return gate.Refund{}, false, badRequest(op, "refund %q: zero time", r.MessageID)
	case r.Source != gate.RefundSourceAPI && r.Source != gate.RefundSourceNATS:
		return gate.Refund{}, false, badRequest(op, "refund %q: unknown source %q", r.MessageID, r.Source)
	}
	r.ForwardedAt = r.ForwardedAt.UTC().Truncate(time.Microsecond)
	r.RefundedAt = r.RefundedAt.UTC().Truncate(time.Microsecond)
	var recorded bool
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`INSERT INTO refunds (message_id, scene, recipient, forwarded_at, refunded_at, source)
	VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING`,
			r.MessageID, r.Scene, r.Recipient, s.dbTime(r.ForwardedAt), s.dbTime(r.RefundedAt), string(r.Source))
		if res.Error != nil {
			return fmt.Errorf("insert refund: %w", res.Error)
		}
		if res.RowsAffected == 0 {
			return nil // refunded before: its counter was added then
		}
		recorded = true
		var sums hourSums
		sums.at(r.Scene, r.RefundedAt).Refunded++
		return s.upsertCounters(tx, sums)
	})
	if err != nil {
		return gate.Refund{}, false, unavailable(op, err)
	}
	if recorded {
		return r, true, nil
	}
	first, ok, err := s.Refunded(ctx, r.MessageID)
	if err != nil {
		return gate.Refund{}, false, err
	}
	if !ok { // pruned between the two statements: nothing to say but this one
		return r, false, nil
	}
	return first, false, nil
}

// refundColumns are the columns scanRefund reads, in order.
const refundColumns = `message_id, scene, recipient, forwarded_at, refunded_at, source`

// Refunds lists refund rows matching f, newest first (by refunded_at, then
// by message id), one page at a time, with the paging and errors of
// Suppressions.
func (s *Store) Refunds(ctx context.Context, f gate.RefundFilter) (gate.RefundPage, error) {
	const op = "list refunds"
	q, err := s.listQuery(op, "refunded_at", gate.SuppressionFilter(f))
	if err != nil {
		return gate.RefundPage{}, err
	}
	if f.Cursor != "" {
		at, id, err := decodeTextCursor(f.Cursor)
		if err != nil {
			return gate.RefundPage{}, badRequest(op, "%v", err)
		}
		q.add("(refunded_at, message_id) < (?, ?)", s.dbTime(at), id)
	}
	items, next, err := readPage(ctx, s.db, q, `SELECT `+refundColumns+` FROM refunds`, "refunded_at DESC, message_id DESC",
		scanRefund, func(last gate.Refund) string { return encodeTextCursor(last.RefundedAt, last.MessageID) })
	if err != nil {
		return gate.RefundPage{}, unavailable(op, err)
	}
	return gate.RefundPage{Items: items, NextCursor: next}, nil
}

// scanRefund reads one row of refundColumns.
func scanRefund(rows *sql.Rows) (gate.Refund, error) {
	var (
		r                   gate.Refund
		forwarded, refunded scanTime
		source              string
	)
	if err := rows.Scan(&r.MessageID, &r.Scene, &r.Recipient, &forwarded, &refunded, &source); err != nil {
		return r, err
	}
	r.ForwardedAt, r.RefundedAt, r.Source = forwarded.t, refunded.t, gate.RefundSource(source)
	return r, nil
}
