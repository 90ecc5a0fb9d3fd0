package gormstore

import (
	"fmt"
	"time"
)

// textTimeLayout is how SQLite stores times: UTC, fixed width, microseconds
// always written, so that comparing the text compares the times. Go's
// default, or RFC 3339 with trimmed fractions, would sort "…05Z" after
// "…05.5Z".
const textTimeLayout = "2006-01-02T15:04:05.000000Z"

// dbTime converts t to the value the dialect stores: UTC, truncated to the
// microsecond that PostgreSQL keeps, so what is read back equals what was
// written on both databases.
func (s *Store) dbTime(t time.Time) any {
	t = t.UTC().Truncate(time.Microsecond)
	if s.dialect.textTimes {
		return t.Format(textTimeLayout)
	}
	return t
}

// dbTimeOrNull is dbTime, with the zero time stored as NULL.
func (s *Store) dbTimeOrNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return s.dbTime(t)
}

// scanTime reads a time column of either dialect, in UTC; NULL reads as the
// zero time.
type scanTime struct{ t time.Time }

// Scan implements sql.Scanner.
func (st *scanTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		st.t = time.Time{}
	case time.Time:
		st.t = v.UTC()
	case string:
		return st.parse(v)
	case []byte:
		return st.parse(string(v))
	default:
		return fmt.Errorf("scan time: unexpected %T", src)
	}
	return nil
}

func (st *scanTime) parse(s string) error {
	t, err := time.Parse(textTimeLayout, s)
	if err != nil {
		return fmt.Errorf("scan time: %w", err)
	}
	st.t = t
	return nil
}
