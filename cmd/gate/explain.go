package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	apiclient "github.com/antifatigue/gate/internal/client"
	"github.com/antifatigue/gate/internal/gate"
)

// explain prints why a message of a scene to a recipient would be held
// back now, and when the next one would go out, read from a running gate
// (GET /v1/explain), as text or JSON. It records nothing.
func explain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gate explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: gate explain --to receive_id_type:receive_id --scene SCENE [--priority p] [--tz zone] [--format text|json]\n\n"+
			"Why a message of SCENE to the recipient would be held back now, and when the next one would go out.\n"+
			"Asks a running gate (GET /v1/explain); records nothing.\n\n")
		fs.PrintDefaults()
	}
	var to, scene, priority, tz, format string
	fs.StringVar(&to, "to", "", "the recipient, receive_id_type:receive_id (required)")
	fs.StringVar(&scene, "scene", "", "the scene (required)")
	fs.StringVar(&priority, "priority", "", "the message's priority: low, normal, high or urgent (default normal)")
	fs.StringVar(&tz, "tz", "", "the message's own IANA time zone (default the scene's)")
	fs.StringVar(&format, "format", "text", "text or json")
	var server, token string
	if _, err := parseSettings(fs, clientSettings(&server, &token), args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	switch {
	case fs.NArg() > 0:
		return &usageError{fmt.Sprintf("gate explain takes no arguments, got %q", fs.Arg(0))}
	case to == "" || scene == "":
		return &usageError{"gate explain needs --to receive_id_type:receive_id and --scene"}
	case format != "text" && format != "json":
		return &usageError{fmt.Sprintf("--format must be text or json, got %q", format)}
	}
	q := url.Values{"recipient": {to}, "scene": {scene}}
	if priority != "" {
		q.Set("priority", priority)
	}
	if tz != "" {
		q.Set("tz", tz)
	}
	e, err := apiclient.New(server, apiclient.Options{Token: token, Name: "explain"}).Explain(ctx, q)
	if err != nil {
		return err
	}
	if format == "json" {
		return writeIndented(stdout, e)
	}
	return printExplanation(stdout, e)
}

// printExplanation writes e as text: the sentence, the decision, then the
// limits and held queues as tables.
func printExplanation(w io.Writer, e gate.Explanation) error {
	fmt.Fprintln(w, e.Why)
	fmt.Fprintf(w, "\ndecision:  %s", e.Decision.Outcome)
	if e.Decision.Reason != "" {
		fmt.Fprintf(w, " (%s)", e.Decision.Reason)
	}
	fmt.Fprintf(w, "\nnext at:   %s\n", stampOr(e.NextAt, "none, unless something changes"))
	if e.Preferences.Muted {
		fmt.Fprintf(w, "muted:     until %s\n", stampOr(e.Preferences.MutedUntil, "changed"))
	}
	if e.Preferences.DigestOnly {
		fmt.Fprintln(w, "digest only: yes")
	}
	if e.QuietHours.InForce {
		fmt.Fprintf(w, "quiet hours: until %s (%s)\n", stampOr(e.QuietHours.Until, "?"), e.QuietHours.Action)
	}
	fmt.Fprintf(w, "rules:     %s\n", e.RulesVersion)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(e.Limits) > 0 {
		fmt.Fprintln(tw, "\nSCOPE\tLIMIT\tCOUNT\tLEFT\tFREE AT")
		for _, l := range e.Limits {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", l.Scope, limitText(l.CheckLimit), l.Count, l.Left, l.FreeAt.UTC().Format(time.RFC3339))
		}
	}
	switch {
	case !e.HeldQueuesKnown:
		fmt.Fprintln(tw, "\nheld queues: unknown")
	case len(e.HeldQueues) > 0:
		fmt.Fprintln(tw, "\nQUEUE\tKIND\tHELD\tOLDEST\tNEXT DUE")
		for _, q := range e.HeldQueues {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", q.Queue, q.Kind, q.Count, stampZero(q.OldestHeldAt), stampZero(q.NextDueAt))
		}
	}
	return tw.Flush()
}

// limitText is a limit as a rule document writes it: "3/1h", "4/day",
// "rate 1/10m burst 2".
func limitText(l gate.CheckLimit) string {
	switch {
	case l.Window != nil:
		return fmt.Sprintf("%d/%s", l.Max, gate.FormatDuration(time.Duration(*l.Window)))
	case l.Calendar != "":
		return fmt.Sprintf("%d/%s", l.Max, l.Calendar)
	case l.Rate != nil:
		return fmt.Sprintf("rate %s burst %d", gate.FormatRate(time.Duration(*l.Rate)), l.Max)
	}
	return strings.TrimSpace(string(l.Scope))
}

func stampOr(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return t.UTC().Format(time.RFC3339)
}

func stampZero(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
