package httpapi

import (
	"cmp"
	"encoding/csv"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// Bounds of the limit parameters.
const (
	maxPage       = 1000    // rows of one /v1/suppressions page
	maxTop        = 1000    // recipients of /v1/reports/top-recipients
	defaultTop    = 10      // recipients when limit is absent
	maxCSVRows    = 100_000 // rows of one /v1/suppressions.csv export
	csvPageRows   = 1000    // rows read from the store at a time by the export
	truncatedHead = "Gate-Truncated"

	// maxRecipientBytes bounds the recipient filter: the longest
	// receive_id_type (union_id), the colon, and the longest receive_id.
	maxRecipientBytes = len("union_id:") + gate.MaxReceiveIDBytes
)

// Timeseries is the body of GET /v1/reports/timeseries.
type Timeseries struct {
	Since *time.Time `json:"since"`
	Until *time.Time `json:"until"`
	// Scene is the scene asked for, or "*" for every scene added up.
	Scene string             `json:"scene"`
	Hours []gate.HourSummary `json:"hours"`
}

func (s *server) timeseries(w http.ResponseWriter, r *http.Request, q url.Values) error {
	since, until, err := timeRange(q)
	if err != nil {
		return err
	}
	scene, err := nameParam(q, "scene", gate.MaxSceneBytes)
	if err != nil {
		return err
	}
	hours, err := s.o.Trends.Timeseries(r.Context(), since, until, scene)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, Timeseries{Since: orNull(since), Until: orNull(until), Scene: cmp.Or(scene, "*"), Hours: nonNil(hours)})
	return nil
}

// TopRecipients is the body of GET /v1/reports/top-recipients.
type TopRecipients struct {
	Since      *time.Time            `json:"since"`
	Until      *time.Time            `json:"until"`
	Recipients []gate.RecipientCount `json:"recipients"`
}

func (s *server) topRecipients(w http.ResponseWriter, r *http.Request, q url.Values) error {
	since, until, err := timeRange(q)
	if err != nil {
		return err
	}
	limit, err := parseLimit(q, maxTop, defaultTop)
	if err != nil {
		return err
	}
	top, err := s.o.Trends.TopRecipients(r.Context(), since, until, limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, TopRecipients{Since: orNull(since), Until: orNull(until), Recipients: nonNil(top)})
	return nil
}

// csvHeader names the columns of the CSV export.
var csvHeader = []string{"id", "message_id", "decided_at", "scene", "recipient", "priority", "limit_scope",
	"limit_window", "limit_max", "count_seen", "shadow", "reason", "rules_version", "next_allowed_at", "payload",
	// Added with held messages; after payload so that readers of the
	// columns by position keep working.
	"held_as", "settled", "settled_at", "fallback", "digest_id",
	// Added with calendar limits, last for the same reason: "day" or "week"
	// where limit_window says 0s.
	"limit_calendar",
	// Added with rate limits, last again: the emission interval ("10m") of a
	// rate limit, whose burst is limit_max; empty for other rows, as
	// limit_calendar is, since the JSON rows omit both there.
	"limit_rate"}

// suppressionsCSV streams every suppression row that matches the filters,
// newest first, up to limit rows (100,000 at most). The first page is read
// before anything is written, so a bad filter or an unavailable store still
// gets its status code. When rows beyond the limit exist, the trailer
// Gate-Truncated says "true".
//
// The export is exempt from the server's WriteTimeout, which would cut a
// long one: each page gets its own write deadline instead, ExportPageTimeout
// from when it is read.
func (s *server) suppressionsCSV(w http.ResponseWriter, r *http.Request, q url.Values) error {
	f, err := suppressionFilter(q)
	if err != nil {
		return err
	}
	capRows, err := parseLimit(q, maxCSVRows, maxCSVRows)
	if err != nil {
		return err
	}
	f.Limit = min(csvPageRows, capRows)
	page, err := s.o.Reports.Suppressions(r.Context(), f)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", `attachment; filename="suppressions.csv"`)
	h.Set("Cache-Control", "no-store")
	h.Set("Trailer", truncatedHead)
	rc := http.NewResponseController(w)
	// Only the write deadline: a read deadline set here would also reach
	// the server's background read of the connection and cancel the
	// request's context when it passes (golang/go#70834).
	extend := func() { _ = rc.SetWriteDeadline(time.Now().Add(s.o.ExportPageTimeout)) }
	extend()
	w.WriteHeader(http.StatusOK)
	cw := csv.NewWriter(w)
	_ = cw.Write(csvHeader) // write errors mean the client went away: Flush reports them below
	written := 0
	for {
		for _, p := range page.Items {
			_ = cw.Write(csvRecord(p))
		}
		written += len(page.Items)
		cw.Flush()
		if cw.Error() != nil {
			return nil // the client went away; nothing to tell it
		}
		if page.NextCursor == "" || written >= capRows {
			break
		}
		f.Cursor, f.Limit = page.NextCursor, min(csvPageRows, capRows-written)
		page, err = s.o.Reports.Suppressions(r.Context(), f)
		extend()
		if err != nil {
			// The status line is gone: cut the response short, so the
			// client sees a failed transfer rather than a complete-looking
			// file. http.ErrAbortHandler is net/http's way to do that.
			s.o.Log.Warn("csv export failed midway", "rows", written, "err", err)
			panic(http.ErrAbortHandler)
		}
	}
	h.Set(truncatedHead, strconv.FormatBool(page.NextCursor != ""))
	return nil
}

// csvRecord writes one row of the export. Text cells that a spreadsheet
// would run as a formula (=, +, -, @ first, or a tab, carriage return or
// line feed before one, which some strip) get a leading apostrophe:
// recipients, scenes and payloads come from producers.
func csvRecord(p gate.Suppression) []string {
	return []string{
		strconv.FormatInt(p.ID, 10), CSVCell(p.MessageID), p.DecidedAt.UTC().Format(time.RFC3339Nano), CSVCell(p.Scene),
		CSVCell(p.Recipient), CSVCell(string(p.Priority)), string(p.Scope), gate.FormatDuration(time.Duration(p.LimitWindow)),
		strconv.Itoa(p.LimitMax), strconv.Itoa(p.CountSeen), strconv.FormatBool(p.Shadow), CSVCell(p.Reason),
		CSVCell(p.RulesVersion), csvTime(p.NextAllowedAt), CSVCell(p.Payload),
		string(p.HeldAs), string(p.Settled), csvTime(p.SettledAt), string(p.Fallback), CSVCell(p.DigestID),
		string(p.LimitCalendar), csvDuration(p.LimitRate),
	}
}

// csvDuration is d as rule documents write it (as limit_window is), or
// empty for none.
func csvDuration(d gate.Duration) string {
	if d == 0 {
		return ""
	}
	return gate.FormatDuration(time.Duration(d))
}

// csvTime is t in RFC 3339 UTC, or empty for the zero time.
func csvTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// CSVCell is v as a CSV cell a spreadsheet will not run: a cell that
// starts with =, +, -, @, a tab, a carriage return or a line feed would be
// taken for a formula (a recipient "=HYPERLINK(…)" in an export), so it
// gets a leading '. Every CSV the gate writes, here and in gate report,
// passes its text through it.
func CSVCell(v string) string {
	if v != "" && strings.ContainsRune("=+-@\t\r\n", rune(v[0])) {
		return "'" + v
	}
	return v
}

// suppressionFilter reads the filters shared by the list and the export.
func suppressionFilter(q url.Values) (gate.SuppressionFilter, error) {
	since, until, err := timeRange(q)
	if err != nil {
		return gate.SuppressionFilter{}, err
	}
	scene, err := nameParam(q, "scene", gate.MaxSceneBytes)
	if err != nil {
		return gate.SuppressionFilter{}, err
	}
	recipient, err := nameParam(q, "recipient", maxRecipientBytes)
	if err != nil {
		return gate.SuppressionFilter{}, err
	}
	reason := q.Get("reason")
	if reason != "" && !slices.Contains(suppressionReasons, reason) {
		return gate.SuppressionFilter{}, badRequest("reason must be one of %s, got %q", strings.Join(suppressionReasons, ", "), reason)
	}
	return gate.SuppressionFilter{Scene: scene, Recipient: recipient, Reason: reason, Since: since, Until: until}, nil
}

// suppressionReasons are the values of a suppression row's reason, which
// the reason filter takes (the enum of Suppression.reason in openapi.json).
var suppressionReasons = []string{gate.ReasonLimit, "unknown_scene", gate.ReasonQuietHours, gate.ReasonQueued, gate.ReasonPreference, gate.ReasonReusedID}

// nameParam reads a scene or recipient filter; absent or empty means
// every one. A value must pass the check every message's scene and
// recipient pass (gate.CheckName): no stored row can hold one that fails,
// and PostgreSQL refuses invalid UTF-8 and NUL bytes in a query.
func nameParam(q url.Values, name string, max int) (string, error) {
	v := q.Get(name)
	if v == "" {
		return "", nil
	}
	if err := gate.CheckName(name, v, max); err != nil {
		return "", badRequest("%s", gate.InvalidReason(err))
	}
	return v, nil
}

// timeRange reads since and until; until before since is a bad request.
func timeRange(q url.Values) (since, until time.Time, err error) {
	if since, err = parseTime(q, "since"); err != nil {
		return since, until, err
	}
	if until, err = parseTime(q, "until"); err != nil {
		return since, until, err
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		return since, until, badRequest("until must not be before since")
	}
	return since, until, nil
}

// parseLimit reads limit, from 1 to most; absent when it is not given.
// Present but empty is a bad request, like any other value that is not a
// number.
func parseLimit(q url.Values, most, absent int) (int, error) {
	vs, ok := q["limit"]
	if !ok {
		return absent, nil
	}
	v := vs[0]
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, badRequest("limit must be a whole number from 1 to %d, got %q", most, v)
	}
	return n, nil
}

// orNull is nil for the zero time: an open end of a range.
func orNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// nonNil makes a nil slice empty, so that it encodes as [] and not null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
