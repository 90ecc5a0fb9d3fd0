package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apiclient "github.com/antifatigue/gate/internal/client"
	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
)

// report prints the summary or the suppression rows of a running gate,
// read through its HTTP API, as a table, JSON or CSV.
func report(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	kind := "summary"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		kind, args = args[0], args[1:]
	}
	if kind != "summary" && kind != "suppressions" {
		return &usageError{fmt.Sprintf("unknown report %q (want summary or suppressions)", kind)}
	}
	fs := flag.NewFlagSet("gate report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o struct {
		format, since, until, scene, recipient string
		limit                                  int
		all                                    bool
	}
	fs.StringVar(&o.format, "format", "table", "table, json or csv")
	fs.StringVar(&o.since, "since", "", "start time, RFC 3339, or a duration back from now such as 24h (default 24h for summary)")
	fs.StringVar(&o.until, "until", "", "end time, RFC 3339")
	fs.StringVar(&o.scene, "scene", "", "suppressions: only this scene")
	fs.StringVar(&o.recipient, "recipient", "", "suppressions: only this recipient (receive_id_type:receive_id)")
	fs.IntVar(&o.limit, "limit", 100, "suppressions: rows per page")
	fs.BoolVar(&o.all, "all", false, "suppressions: follow next_cursor through every page")
	var server, token string
	if _, err := parseSettings(fs, clientSettings(&server, &token), args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch o.format {
	case "table", "json", "csv":
	default:
		return &usageError{fmt.Sprintf("--format must be table, json or csv, got %q", o.format)}
	}
	q := url.Values{}
	s := o.since
	if s == "" && kind == "summary" {
		s = "24h"
	}
	if s != "" {
		t, err := parseSince(s, time.Now())
		if err != nil {
			return &usageError{err.Error()}
		}
		q.Set("since", t.Format(time.RFC3339))
	}
	if o.until != "" {
		q.Set("until", o.until)
	}
	c := apiclient.New(server, apiclient.Options{Token: token, Name: "report"})
	if kind == "summary" {
		sum, err := c.Summary(ctx, q)
		if err != nil {
			return err
		}
		return printSummary(stdout, o.format, sum)
	}
	if o.scene != "" {
		q.Set("scene", o.scene)
	}
	if o.recipient != "" {
		q.Set("recipient", o.recipient)
	}
	q.Set("limit", strconv.Itoa(o.limit))
	var rows []gate.Suppression
	for {
		page, err := c.Suppressions(ctx, q)
		if err != nil {
			return err
		}
		rows = append(rows, page.Items...)
		if !o.all || page.NextCursor == "" {
			break
		}
		q.Set("cursor", page.NextCursor)
	}
	return printSuppressions(stdout, o.format, rows)
}

func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := gate.ParseDuration(s); err == nil {
		return now.Add(-d).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since wants an RFC 3339 time or a duration such as 24h or 7d, got %q", s)
	}
	return t, nil
}

// clientSettings are the settings of the commands that ask a running gate
// over HTTP, which only read: --server, by default the address
// GATE_HTTP_ADDR has gate serve listen on, and the API token, from the
// environment only (a token on the command line is visible to every user
// of the host): GATE_API_TOKEN, else GATE_API_READ_TOKEN, which is enough
// for what they ask.
func clientSettings(server, token *string) []setting {
	return []setting{
		{"server", "GATE_HTTP_ADDR", httpapi.DefaultAddr, "base URL of a running gate, or its host:port", false, str(server)},
		{"", "GATE_API_TOKEN", "", "bearer token of the gate's API", true, str(token)},
		{"", "GATE_API_READ_TOKEN", "", "the reading token of the gate's API, used when GATE_API_TOKEN is unset", true, func(v string) error {
			if *token == "" {
				*token = v
			}
			return nil
		}},
	}
}

// summaryHeader names the columns of the summary, in the order of
// gate.SceneSummary.Counters after the scene.
var summaryHeader = []string{"scene", "received", "forwarded", "suppressed", "dropped", "invalid", "shadow_suppressed",
	"shadow_dropped", "forwarded_unchecked", "parked", "deferred", "digested", "released", "fell_back", "refunded", "cancelled"}

// heldColumns is how many columns before refunded (the last but one of
// summaryHeader) count held messages: a table leaves them out while every
// one of them is zero, and refunded and cancelled (the last) each while it
// is, so that a gate with no defer or digest scene, no refunds and no
// cancels prints what it always did.
const heldColumns = 4

func summaryRow(s gate.SceneSummary) []string {
	row := []string{s.Scene}
	for _, v := range s.Counters() {
		row = append(row, strconv.FormatInt(*v, 10))
	}
	return row
}

func printSummary(w io.Writer, format string, sum httpapi.Summary) error {
	switch format {
	case "json":
		return writeIndented(w, sum)
	case "csv":
		rows := [][]string{summaryHeader}
		for _, s := range sum.Scenes {
			rows = append(rows, summaryRow(s))
		}
		return writeCSV(w, rows)
	}
	t := sum.Total
	refunded, cancelled := len(summaryHeader)-2, len(summaryHeader)-1
	held := t.Deferred != 0 || t.Digested != 0 || t.Released != 0 || t.FellBack != 0
	hide := func(i int) bool {
		return (!held && i >= refunded-heldColumns && i < refunded) || (t.Refunded == 0 && i == refunded) ||
			(t.Cancelled == 0 && i == cancelled)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	line := func(cells []string) {
		shown := make([]string, 0, len(cells))
		for i, c := range cells {
			if !hide(i) {
				shown = append(shown, c)
			}
		}
		fmt.Fprintln(tw, strings.Join(shown, "\t")+"\t")
	}
	line(summaryHeader)
	for _, s := range sum.Scenes {
		line(summaryRow(s))
	}
	line(summaryRow(t))
	return tw.Flush()
}

var suppressionHeader = []string{"decided_at", "scene", "recipient", "message_id", "limit", "count_seen", "next_allowed_at",
	"shadow", "rules_version", "outcome"}

func suppressionRow(s gate.Suppression) []string {
	lim := s.Reason
	switch {
	case s.LimitMax > 0 && s.LimitRate > 0: // a rate limit: its max is a burst, its window 0
		lim = fmt.Sprintf("%s %d burst, %s", s.Scope, s.LimitMax, gate.FormatRate(time.Duration(s.LimitRate)))
	case s.LimitMax > 0 && s.LimitWindow > 0:
		lim = fmt.Sprintf("%s %d/%s", s.Scope, s.LimitMax, gate.FormatDuration(time.Duration(s.LimitWindow)))
	case s.LimitMax > 0 && s.LimitCalendar != "": // a calendar limit has no window
		lim = fmt.Sprintf("%s %d/calendar %s", s.Scope, s.LimitMax, s.LimitCalendar)
	case s.LimitMax > 0: // a row written before rows named the calendar period
		lim = fmt.Sprintf("%s %d/calendar period", s.Scope, s.LimitMax)
	}
	return []string{s.DecidedAt.UTC().Format(time.RFC3339), s.Scene, s.Recipient, s.MessageID, lim,
		strconv.Itoa(s.CountSeen), rfc3339(s.NextAllowedAt), strconv.FormatBool(s.Shadow), s.RulesVersion, outcome(s)}
}

// outcome says what became of the message of an audit row, which answers
// "why didn't I get it?" for a held one: still held, released later, given
// its fallback, or carried by a digest.
func outcome(s gate.Suppression) string {
	at := rfc3339(s.SettledAt)
	switch {
	case s.HeldAs == "" && s.Shadow:
		return "forwarded (shadow)"
	case s.HeldAs == "":
		return "suppressed"
	case s.Settled == gate.SettleReleased:
		return "deferred → released at " + at
	case s.Settled == gate.SettleFellBack:
		return fmt.Sprintf("deferred → fell back to %s at %s", s.Fallback, at)
	case s.Settled == gate.SettleDigested:
		return fmt.Sprintf("in digest %s sent at %s", s.DigestID, at)
	case s.Settled != "":
		return fmt.Sprintf("%s → %s at %s", heldText(s.HeldAs), s.Settled, at)
	case s.Fallback == gate.ActionDigest:
		// Past max_defer with defer_fallback digest: it waits in its
		// scene's digest now.
		return "deferred → moved to a digest, still held"
	}
	return heldText(s.HeldAs) + ", still held"
}

func heldText(k gate.HoldKind) string {
	if k == gate.HoldDigest {
		return "held for a digest"
	}
	return "deferred"
}

// rfc3339 is t in RFC 3339 UTC, or empty for the zero time.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func printSuppressions(w io.Writer, format string, rows []gate.Suppression) error {
	switch format {
	case "json":
		if rows == nil {
			rows = []gate.Suppression{}
		}
		return writeIndented(w, rows)
	case "csv":
		out := [][]string{suppressionHeader}
		for _, s := range rows {
			out = append(out, suppressionRow(s))
		}
		return writeCSV(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(suppressionHeader, "\t"))
	for _, s := range rows {
		fmt.Fprintln(tw, strings.Join(suppressionRow(s), "\t"))
	}
	return tw.Flush()
}

func writeIndented(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeCSV writes rows as CSV, every cell through httpapi.CSVCell, as the
// API's export does: a recipient, scene or id a producer chose must not
// become a formula in the spreadsheet the report is opened in.
func writeCSV(w io.Writer, rows [][]string) error {
	cw := csv.NewWriter(w)
	for _, row := range rows {
		for i, v := range row {
			row[i] = httpapi.CSVCell(v)
		}
	}
	if err := cw.WriteAll(rows); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}
