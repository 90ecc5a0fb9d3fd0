package gormstore

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"gorm.io/gorm"
)

// queryRows runs q and reads every row with scan, closing the rows: the
// one loop of the report and listing reads. The slice is never nil, so an
// empty answer encodes as []. Errors are the database's, unwrapped: the
// caller names its operation.
func queryRows[T any](ctx context.Context, db *gorm.DB, q string, args []any, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := db.WithContext(ctx).Raw(q, args...).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// timeRange selects the rows whose column falls in [since, until); a zero
// time leaves that end open.
func (s *Store) timeRange(column string, since, until time.Time) (where []string, args []any) {
	if !since.IsZero() {
		where = append(where, column+" >= ?")
		args = append(args, s.dbTime(since))
	}
	if !until.IsZero() {
		where = append(where, column+" < ?")
		args = append(args, s.dbTime(until))
	}
	return where, args
}

// whereAll is " WHERE " and the conditions joined by AND, or "" for none.
func whereAll(where []string) string {
	if len(where) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(where, " AND ")
}
