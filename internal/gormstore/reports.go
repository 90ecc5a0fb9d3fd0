package gormstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

// Page sizes of Suppressions.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// Suppressions lists suppression rows matching f, newest first (by decided
// time, then by id), one page at a time. Scene and Recipient match exactly;
// Since is inclusive and Until exclusive. A Limit of 0 means
// DefaultPageLimit; a negative one, one over MaxPageLimit, a malformed
// cursor or Until before Since wraps gate.ErrBadRequest. The cursor of the
// last page is "". Other errors wrap gate.ErrUnavailable.
//
// Paging is by keyset, so rows written while a reader pages are never
// listed twice, and rows older than the cursor are never skipped.
func (s *Store) Suppressions(ctx context.Context, f gate.SuppressionFilter) (gate.SuppressionPage, error) {
	const op = "list suppressions"
	q, err := s.listQuery(op, "decided_at", f)
	if err != nil {
		return gate.SuppressionPage{}, err
	}
	if f.Reason != "" {
		q.add("reason = ?", f.Reason)
	}
	if f.Cursor != "" {
		at, id, err := decodeCursor(f.Cursor)
		if err != nil {
			return gate.SuppressionPage{}, badRequest(op, "%v", err)
		}
		// A row-value comparison: both databases seek the index with it.
		q.add("(decided_at, id) < (?, ?)", s.dbTime(at), id)
	}
	items, next, err := readPage(ctx, s.db, q, `SELECT id, message_id, scene, recipient, priority, limit_scope, limit_window_ms, limit_max,
	limit_calendar, limit_rate_ms, count_seen, shadow, reason, rules_version, decided_at, next_allowed_at, payload,
	held_as, settled, settled_at, fallback, digest_id FROM suppressions`, "decided_at DESC, id DESC",
		scanSuppression, func(last gate.Suppression) string { return encodeCursor(last.DecidedAt, last.ID) })
	if err != nil {
		return gate.SuppressionPage{}, unavailable(op, err)
	}
	return gate.SuppressionPage{Items: items, NextCursor: next}, nil
}

// listQuery is the query of one page of a listing: its conditions, their
// arguments, and the page size.
type listQuery struct {
	where []string
	args  []any
	limit int
}

// readPage reads one page of a listing: q's statement (selectFrom, its
// conditions, order, and one row more than the page, to know whether
// another page follows), each row read by scan. It returns the page and
// the cursor of the next one, cursor of its last row, or "" if none
// follows. Errors are the database's.
func readPage[T any](ctx context.Context, db *gorm.DB, q *listQuery, selectFrom, order string,
	scan func(*sql.Rows) (T, error), cursor func(last T) string) ([]T, string, error) {
	text, args := q.text(selectFrom, order)
	items, err := queryRows(ctx, db, text, args, scan)
	if err != nil || len(items) <= q.limit {
		return items, "", err
	}
	items = items[:q.limit]
	return items, cursor(items[q.limit-1]), nil
}

// listQuery checks f's page size and range and turns its filters into
// conditions: scene and recipient match exactly, Since (inclusive) and
// Until (exclusive) bound timeCol. A Limit of 0 means DefaultPageLimit; a
// negative one, one over MaxPageLimit, or Until before Since wraps
// gate.ErrBadRequest.
func (s *Store) listQuery(op, timeCol string, f gate.SuppressionFilter) (*listQuery, error) {
	q := &listQuery{limit: f.Limit}
	switch {
	case q.limit == 0:
		q.limit = DefaultPageLimit
	case q.limit < 0 || q.limit > MaxPageLimit:
		return nil, badRequest(op, "limit %d is not between 1 and %d", f.Limit, MaxPageLimit)
	}
	if err := checkRange(f.Since, f.Until); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if f.Scene != "" {
		q.add("scene = ?", f.Scene)
	}
	if f.Recipient != "" {
		q.add("recipient = ?", f.Recipient)
	}
	if !f.Since.IsZero() {
		q.add(timeCol+" >= ?", s.dbTime(f.Since))
	}
	if !f.Until.IsZero() {
		q.add(timeCol+" < ?", s.dbTime(f.Until))
	}
	return q, nil
}

func (q *listQuery) add(cond string, vals ...any) {
	q.where = append(q.where, cond)
	q.args = append(q.args, vals...)
}

// text is the statement: selectFrom, the conditions, order, and a limit of
// one row more than the page, which tells whether another page follows.
func (q *listQuery) text(selectFrom, order string) (string, []any) {
	return selectFrom + whereAll(q.where) + " ORDER BY " + order + " LIMIT ?", append(q.args, q.limit+1)
}

// scanSuppression reads one row of Suppressions' query.
func scanSuppression(rows *sql.Rows) (gate.Suppression, error) {
	var (
		p                         gate.Suppression
		windowMS, rateMS          int64
		decided, next, settledAt  scanTime
		payload                   sql.NullString
		priority, scop, calendar  string
		heldAs, settled, fallback string
	)
	if err := rows.Scan(&p.ID, &p.MessageID, &p.Scene, &p.Recipient, &priority, &scop, &windowMS,
		&p.LimitMax, &calendar, &rateMS, &p.CountSeen, &p.Shadow, &p.Reason, &p.RulesVersion, &decided, &next, &payload,
		&heldAs, &settled, &settledAt, &fallback, &p.DigestID); err != nil {
		return p, err
	}
	p.Priority, p.Scope, p.LimitCalendar = gate.Priority(priority), gate.Scope(scop), gate.Calendar(calendar)
	p.HeldAs, p.Settled, p.SettledAt, p.Fallback = gate.HoldKind(heldAs), gate.SettleKind(settled), settledAt.t, gate.Action(fallback)
	p.LimitWindow = gate.Duration(time.Duration(windowMS) * time.Millisecond)
	p.LimitRate = gate.Duration(time.Duration(rateMS) * time.Millisecond)
	p.DecidedAt, p.NextAllowedAt, p.Payload = decided.t, next.t, payload.String
	return p, nil
}

// Summary sums each scene's hourly counters over [since, until), sorted by
// scene. The resolution is one hour: the hour holding since counts whole,
// and so does the hour holding until unless until is on the hour. A zero
// since or until leaves that end open. Until before since wraps
// gate.ErrBadRequest; other errors wrap gate.ErrUnavailable.
func (s *Store) Summary(ctx context.Context, since, until time.Time) ([]gate.SceneSummary, error) {
	const op = "summary"
	if err := checkRange(since, until); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	where, args := s.hourRange(since, until)
	q := `SELECT scene, ` + sumCounters + ` FROM scene_counters` + whereAll(where) + " GROUP BY scene"
	out, err := queryRows(ctx, s.db, q, args, func(rows *sql.Rows) (gate.SceneSummary, error) {
		var c gate.SceneSummary
		err := rows.Scan(append([]any{&c.Scene}, counterDests(&c)...)...)
		return c, err
	})
	if err != nil {
		return nil, unavailable(op, err)
	}
	// Sorted here, byte-wise: the databases' collations disagree.
	slices.SortFunc(out, func(a, b gate.SceneSummary) int { return strings.Compare(a.Scene, b.Scene) })
	return out, nil
}

// checkRange refuses an until before since, both set.
func checkRange(since, until time.Time) error {
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		return fmt.Errorf("%w: until %s is before since %s", gate.ErrBadRequest,
			until.UTC().Format(time.RFC3339Nano), since.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// encodeTextCursor writes the position after the row (at, id): base64url of
// "<unix nanoseconds>.<id>". Opaque to callers; the format may change.
func encodeTextCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d.%s", at.UnixNano(), id))
}

var errMalformedCursor = errors.New("malformed cursor")

// decodeTextCursor reads what encodeTextCursor wrote.
func decodeTextCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return time.Time{}, "", errMalformedCursor
	}
	ns, id, ok := strings.Cut(string(b), ".")
	nanos, err := strconv.ParseInt(ns, 10, 64)
	// An id the database cannot hold (PostgreSQL refuses invalid UTF-8 and
	// NUL) is no id a page ended with.
	if !ok || err != nil || id == "" || !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		return time.Time{}, "", errMalformedCursor
	}
	return time.Unix(0, nanos).UTC(), id, nil
}

// encodeCursor is encodeTextCursor for a row with a numeric id.
func encodeCursor(at time.Time, id int64) string {
	return encodeTextCursor(at, strconv.FormatInt(id, 10))
}

// decodeCursor reads what encodeCursor wrote: a text cursor whose id is a
// positive int64.
func decodeCursor(c string) (time.Time, int64, error) {
	at, idText, err := decodeTextCursor(c)
	if err != nil {
		return time.Time{}, 0, err
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id <= 0 {
		return time.Time{}, 0, errMalformedCursor
	}
	return at, id, nil
}
