package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// MaxPreviewBody bounds the body of POST /v1/rules/preview: a rule
// document, which the rules parser refuses past one MiB anyway.
const MaxPreviewBody = 1 << 20

// defaultPreviewSince is how far back a preview replays when the request
// names no since.
const defaultPreviewSince = 24 * time.Hour

// preview serves POST /v1/rules/preview?since=…[&until=…]: the body is a
// proposed rule document, the answer what it would have decided of the
// period's decisions (gate.RulePreview).
func (s *server) preview(w http.ResponseWriter, r *http.Request, q url.Values) error {
	if r.Method != http.MethodPost {
		notPost(w, r)
		return nil
	}
	if s.o.Preview == nil {
		return fmt.Errorf("rule preview: %w: this gate has no decision ledger to replay", gate.ErrNotFound)
	}
	now := time.Now().UTC()
	since, err := parseSince(q, now)
	if err != nil {
		return err
	}
	until, err := parseTime(q, "until")
	if err != nil {
		return err
	}
	if until.IsZero() {
		until = now
	}
	if !since.Before(until) {
		return badRequest("since (%s) must be before until (%s)", since.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano))
	}
	doc, tooBig, err := readBody(w, r, MaxPreviewBody)
	if tooBig {
		writeError(w, http.StatusRequestEntityTooLarge, "the rule document is over 1 MiB")
		return nil
	}
	if err != nil {
		return err
	}
	res, err := s.o.Preview.Preview(r.Context(), doc, since, until)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// parseSince reads since as a duration back from now (24h, 7d) or an RFC
// 3339 time, as gate report's --since does; absent, it is 24 hours ago.
func parseSince(q url.Values, now time.Time) (time.Time, error) {
	v, ok := q["since"]
	if !ok {
		return now.Add(-defaultPreviewSince), nil
	}
	if d, err := gate.ParseDuration(first(v)); err == nil && d >= 0 {
		t := now.Add(-d)
		if t.Year() < 1 {
			return time.Time{}, badRequest("since must fall in the years 1 to 9999 (UTC), got %q", first(v))
		}
		return t, nil
	}
	t, err := parseTime(q, "since")
	if err != nil {
		return time.Time{}, badRequest("since must be a duration back from now such as 24h or 7d, or an RFC 3339 time such as 2026-11-22T08:00:00Z, got %q", first(v))
	}
	return t, nil
}
