package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/rules"
)

const rulesUsage = `usage:
  gate rules check FILE|DIR          validate a rule document (or a folder of them)
  gate rules push [flags] FILE|DIR   validate, print what it would have decided of the last 24 h on the
                                     gate at --server (GATE_HTTP_ADDR), ask, then publish to Nacos
                                     (GATE_NACOS_* or flags as for serve); --yes publishes without asking
  gate rules diff [flags] FILE|DIR   show what pushing would change against the rules in Nacos
  gate rules preview FILE|DIR [--since 7d] [--server URL] [--format table|json]
                                     what the document would have decided of a running gate's decisions`

// rulesCmd validates rule documents and moves them to and from Nacos.
func rulesCmd(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) < 1 {
		return &usageError{rulesUsage}
	}
	switch args[0] {
	case "push", "diff":
		if len(args) < 2 {
			return &usageError{rulesUsage}
		}
		path := args[len(args)-1]
		c, push, err := parsePush(args[0], args[1:len(args)-1], getenv, stderr)
		if err != nil {
			return err
		}
		push.stdin = stdin
		return nacosRules(ctx, args[0], c, path, push, stdout, stderr)
	case "preview":
		return rulesPreview(ctx, args[1:], getenv, stdout, stderr)
	case "check":
		if len(args) != 2 {
			return &usageError{"usage: gate rules check FILE|DIR"}
		}
		set, err := rules.LoadPath(args[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ok: %s is valid (version %s)\n", args[1], set.Version)
		describeRules(stdout, set)
		return nil
	}
	return &usageError{fmt.Sprintf("unknown rules command %q\n%s", args[0], rulesUsage)}
}

func describeRules(w io.Writer, set *gate.RuleSet) {
	fmt.Fprintf(w, "  unknown_scene: %s\n", set.UnknownScene)
	if len(set.RecipientCaps) > 0 {
		fmt.Fprintf(w, "  recipient_caps: %s\n", limitsText(set.RecipientCaps))
	}
	names := make([]string, 0, len(set.Scenes))
	for n := range set.Scenes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := set.Scenes[n]
		extra := ""
		if len(r.BypassPriorities) > 0 {
			ps := make([]string, len(r.BypassPriorities))
			for i, p := range r.BypassPriorities {
				ps[i] = string(p)
			}
			extra += ", bypass " + strings.Join(ps, "|")
		}
		if r.Shadow {
			extra += ", shadow"
		}
		extra += holdText(r)
		fmt.Fprintf(w, "  scene %s: %s, on_exceed %s%s\n", n, limitsText(r.Limits), r.OnExceed, extra)
	}
}

func limitsText(ls []gate.Limit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%d/%s", l.Max, gate.FormatDuration(l.Window))
		if l.Calendar != "" {
			parts[i] = fmt.Sprintf("%d/calendar %s", l.Max, l.Calendar)
		}
		if l.Rate != 0 {
			parts[i] = fmt.Sprintf("rate %s burst %d", gate.FormatRate(l.Rate), l.Max)
		}
	}
	return strings.Join(parts, " and ")
}

// holdText says what a scene does with held messages, quiet hours and its
// zone, when it says anything.
func holdText(r gate.SceneRule) string {
	var b strings.Builder
	if r.MaxDefer != 0 {
		fmt.Fprintf(&b, ", max_defer %s then %s", gate.FormatDuration(r.MaxDefer), r.DeferFallback)
	}
	if r.DigestGroup != "" {
		fmt.Fprintf(&b, ", digest_group %s", r.DigestGroup)
	}
	if q := r.QuietHours; q != nil {
		fmt.Fprintf(&b, ", quiet %s-%s %s", gate.FormatClock(q.From), gate.FormatClock(q.To), q.Action)
	}
	if r.TZ != "" {
		fmt.Fprintf(&b, ", tz %s", r.TZ)
	}
	return b.String()
}

// pushOptions are the flags of gate rules push besides the settings it
// shares with serve.
type pushOptions struct {
	yes    bool   // publish without asking
	server string // the gate to preview on; empty: GATE_HTTP_ADDR (--http-addr)
	stdin  io.Reader
}

// pushSettings are the flags of serve's that gate rules push and diff
// read, under the same variables and defaults: where the Nacos document
// is, and for push's preview the gate's address and API token.
var pushSettings = []string{"nacos-addr", "nacos-data-id", "nacos-group", "nacos-namespace", "nacos-username", "nacos-password",
	"data-dir", "http-addr", "api-token"}

// parsePush reads the flags of gate rules push or diff (args without the
// FILE|DIR that ends them): --yes, --server URL and pushSettings.
func parsePush(verb string, args []string, getenv func(string) string, stderr io.Writer) (*config, pushOptions, error) {
	var o pushOptions
	fs := flag.NewFlagSet("gate rules "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.yes, "yes", false, "push: publish after the preview without asking")
	fs.StringVar(&o.server, "server", "", "push: base URL of the gate to preview on (default: the gate at --http-addr)")
	c := &config{}
	if _, err := parseSettings(fs, only(settings(c), pushSettings...), args, getenv); err != nil {
		return nil, o, err
	}
	if fs.NArg() > 0 {
		return nil, o, &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return c, o, nil
}

// nacosRules pushes a validated document to Nacos, or diffs it against the
// document there. A push prints the document's preview on the gate first
// and asks, unless push.yes.
func nacosRules(ctx context.Context, verb string, c *config, path string, push pushOptions, stdout, stderr io.Writer) error {
	if c.NacosAddr == "" {
		return &usageError{"GATE_NACOS_ADDR (or --nacos-addr) is required to " + verb + " rules"}
	}
	set, err := rules.LoadPath(path)
	if err != nil {
		return err
	}
	src, err := newNacosSource(c, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return err
	}
	defer src.Close()
	current, err := src.Get()
	if err != nil {
		return err
	}
	var old *gate.RuleSet
	if strings.TrimSpace(current) != "" {
		// A broken document in Nacos is still worth diffing against: show
		// that it is broken, and everything as added.
		if old, err = rules.Parse(src.Name(), []byte(current)); err != nil {
			fmt.Fprintf(stdout, "# the document in %s is invalid: %v\n", src.Name(), err)
		}
	}
	if old != nil && old.Version == set.Version {
		fmt.Fprintf(stdout, "no change: %s already holds these rules (version %s)\n", src.Name(), set.Version)
		return nil
	}
	if verb == "diff" {
		fmt.Fprintf(stdout, "--- %s (version %s)\n+++ %s (version %s)\n", src.Name(), versionOf(old), path, set.Version)
		for _, l := range lineDiff(rules.Format(old), rules.Format(set)) {
			fmt.Fprintln(stdout, l)
		}
		return nil
	}
	doc, err := pushDocument(path, set)
	if err != nil {
		return err
	}
	server := push.server
	if server == "" {
		server = c.HTTPAddr
	}
	if err := confirmPush(ctx, server, c.APIToken, doc, push.yes, push.stdin, stdout); err != nil {
		return err
	}
	if err := src.Publish(doc); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "pushed %s to %s (version %s, was %s)\n", path, src.Name(), set.Version, versionOf(old))
	return nil
}

// pushDocument is what goes to Nacos: a single file as written (comments
// and all), a folder as one merged canonical document.
func pushDocument(path string, set *gate.RuleSet) ([]byte, error) {
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		return os.ReadFile(path)
	}
	return rules.Format(set), nil
}

func versionOf(rs *gate.RuleSet) string {
	if rs == nil {
		return "none"
	}
	return rs.Version
}

// lineDiff is a minimal line diff (longest common subsequence); rule
// documents are small.
func lineDiff(a, b []byte) []string {
	x := splitLines(a)
	y := splitLines(b)
	n, m := len(x), len(y)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			out = append(out, "  "+x[i])
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			out = append(out, "+ "+y[j])
			j++
		default:
			out = append(out, "- "+x[i])
			i++
		}
	}
	return out
}

func splitLines(b []byte) []string {
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
