package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/rules"
)

// rulesCmd validates rule documents: gate rules check FILE|DIR.
func rulesCmd(_ context.Context, args []string, _ func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 1 {
		return &usageError{"usage: gate rules check FILE|DIR"}
	}
	switch args[0] {
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
	return &usageError{fmt.Sprintf("unknown rules command %q (want check)", args[0])}
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
		fmt.Fprintf(w, "  scene %s: %s, on_exceed %s%s\n", n, limitsText(r.Limits), r.OnExceed, extra)
	}
}

func limitsText(ls []gate.Limit) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = fmt.Sprintf("%d/%s", l.Max, gate.FormatDuration(l.Window))
	}
	return strings.Join(parts, " and ")
}
