package gate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseDuration parses a Go duration ("500ms", "1h30m") or a whole number of
// days ("7d"), as rule documents write windows.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, ok := strings.CutSuffix(s, "d"); ok && d != "" && !strings.ContainsAny(d, "hmsuµn") {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n < 0 || n > 106751 {
			return 0, fmt.Errorf("invalid duration %q: days must be a whole number", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a Go duration such as 90s, 1h or 24h, or days such as 7d", s)
	}
	return d, nil
}

// FormatDuration writes d the way rule documents do: whole days as "7d",
// anything else as a Go duration.
func FormatDuration(d time.Duration) string {
	day := 24 * time.Hour
	if d > 0 && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String() // "1h0m0s", "1m30s", "500ms"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Duration is a time.Duration that reads and writes as rule-document text.
type Duration time.Duration

// MarshalJSON writes the duration as text, e.g. "1h" or "7d".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(FormatDuration(time.Duration(d)))
}

// UnmarshalJSON reads text such as "1h" or "7d".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseDuration(s)
	*d = Duration(v)
	return err
}
