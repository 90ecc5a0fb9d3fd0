package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	apiclient "github.com/antifatigue/gate/internal/client"
	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/rules"
)

const previewUsage = "usage: gate rules preview FILE|DIR [--since 7d] [--server URL] [--format table|json]"

// pushPreviewSince is the period gate rules push previews before it
// publishes.
const pushPreviewSince = "24h"

// rulesPreview prints what a rule document would have decided of the
// decisions a running gate recorded (POST /v1/rules/preview).
func rulesPreview(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	// FILE may come before the flags (gate rules preview FILE --since 7d),
	// which the flag package would stop at.
	var path string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		path, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("gate rules preview", flag.ContinueOnError)
	fs.SetOutput(stderr)
	since := fs.String("since", "7d", "start: a duration back from now such as 24h or 7d, or an RFC 3339 time")
	format := fs.String("format", "table", "table or json")
	var server, token string
	if _, err := parseSettings(fs, clientSettings(&server, &token), args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if path == "" && fs.NArg() == 1 {
		path = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return &usageError{previewUsage}
	}
	if path == "" {
		return &usageError{previewUsage}
	}
	if *format != "table" && *format != "json" {
		return &usageError{fmt.Sprintf("--format must be table or json, got %q", *format)}
	}
	if _, err := parseSince(*since, time.Now()); err != nil {
		return &usageError{err.Error()}
	}
	doc, _, err := loadDocument(path)
	if err != nil {
		return err
	}
	p, err := previewClient(server, token).Preview(ctx, doc, *since)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeIndented(stdout, p)
	}
	return printPreview(stdout, p)
}

// loadDocument validates the document at path as the gate will read it and
// returns what goes over the wire: a single file as written, a folder as
// one merged canonical document.
func loadDocument(path string) ([]byte, *gate.RuleSet, error) {
	set, err := rules.LoadPath(path)
	if err != nil {
		return nil, nil, err
	}
	doc, err := pushDocument(path, set)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return doc, set, nil
}

// previewClient asks the gate at server for previews, which replay up to
// GATE_PREVIEW_MAX_DECISIONS rows: it waits longer than a report.
func previewClient(server, token string) *apiclient.Client {
	return apiclient.New(server, apiclient.Options{Token: token, Timeout: apiclient.PreviewTimeout, Name: "preview"})
}

// previewColumns are the outcomes a preview table shows, then and now.
var previewColumns = []struct {
	head  string
	count func(gate.PreviewCounts) int64
}{
	{"fwd", func(c gate.PreviewCounts) int64 { return c.Forwarded }},
	{"sup", func(c gate.PreviewCounts) int64 { return c.Suppressed }},
	{"drop", func(c gate.PreviewCounts) int64 { return c.Dropped }},
	{"defer", func(c gate.PreviewCounts) int64 { return c.Deferred }},
	{"digest", func(c gate.PreviewCounts) int64 { return c.Digested }},
}

// printPreview writes a preview as a table: per scene what was decided
// then, what would be now, and the change.
func printPreview(w io.Writer, p *gate.RulePreview) error {
	fmt.Fprintf(w, "rules %s against the decisions of %s to %s: %d read, %d replayed",
		p.Version, rfc3339(p.Since), rfc3339(p.Until), p.Decisions, p.Replayed)
	if p.NotReplayable > 0 {
		fmt.Fprintf(w, ", %d not replayable (recorded before the ledger kept scene and recipient)", p.NotReplayable)
	}
	fmt.Fprintln(w)
	if p.Truncated {
		fmt.Fprintf(w, "TRUNCATED: stopped at %d decisions (GATE_PREVIEW_MAX_DECISIONS), at %s; later ones are not counted\n",
			p.Limit, rfc3339(p.ReachedAt))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := []string{"scene"}
	for _, side := range []string{"then", "now"} {
		for _, c := range previewColumns {
			head = append(head, side+" "+c.head)
		}
	}
	fmt.Fprintln(tw, strings.Join(append(head, "change"), "\t"))
	row := func(s gate.ScenePreview, name string) {
		cells := []string{name}
		for _, side := range []gate.PreviewCounts{s.Then, s.Now} {
			for _, c := range previewColumns {
				cells = append(cells, fmt.Sprint(c.count(side)))
			}
		}
		fmt.Fprintln(tw, strings.Join(append(cells, changeText(s)), "\t"))
	}
	for _, s := range p.Scenes {
		name := s.Scene
		if name == "" {
			name = "(no scene)"
		}
		row(s, name)
	}
	row(p.Total, "total")
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write preview: %w", err)
	}
	for _, n := range p.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

// changeText says how a scene's outcomes move: "fwd -3 sup +3", with the
// forwards a shadow scene would hold back, or "no change".
func changeText(s gate.ScenePreview) string {
	var parts []string
	for _, c := range previewColumns {
		if d := c.count(s.Now) - c.count(s.Then); d != 0 {
			parts = append(parts, fmt.Sprintf("%s %+d", c.head, d))
		}
	}
	if s.Now.Shadow > 0 {
		parts = append(parts, fmt.Sprintf("(%d shadow)", s.Now.Shadow))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, " ")
}

// confirmPush prints the preview of the last 24 hours of the gate at
// server for doc, then asks on the terminal whether to publish. yes skips
// the question; without it, stdin must be a terminal. A gate that does not
// answer is said, and then only yes publishes.
func confirmPush(ctx context.Context, server, token string, doc []byte, yes bool, stdin io.Reader, stdout io.Writer) error {
	c := previewClient(server, token)
	p, err := c.Preview(ctx, doc, pushPreviewSince)
	switch {
	case err != nil && yes:
		fmt.Fprintf(stdout, "no preview: %v\n", err)
		return nil
	case err != nil:
		return fmt.Errorf("no preview of the last %s from the gate at %s: %w; pass --yes to push without it", pushPreviewSince, c.Base(), err)
	}
	fmt.Fprintf(stdout, "preview of the last %s on the gate at %s:\n", pushPreviewSince, c.Base())
	if err := printPreview(stdout, p); err != nil {
		return err
	}
	if yes {
		return nil
	}
	if !isTerminal(stdin) {
		return &usageError{"stdin is not a terminal, so push cannot ask for confirmation: pass --yes to publish without asking"}
	}
	fmt.Fprint(stdout, "publish these rules? [y/N] ")
	answer, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read the answer: %w", err)
	}
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errNotConfirmed
	}
	return nil
}

// errNotConfirmed is a push the operator declined: nothing was published.
var errNotConfirmed = errors.New("not published: not confirmed")

// isTerminal reports whether r is a character device, such as a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
