package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// TestPushFlags: gate rules push takes --yes and --server URL (also -yes,
// --yes=true, --server=URL) and, of serve's settings, only those it needs
// (where the Nacos document is, the gate's address and token), each as
// serve reads it.
func TestPushFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		yes     bool
		server  string
		nacos   string // --nacos-addr
		group   string // --nacos-group
		wantErr string // a part of the error; empty: none
	}{
		{args: nil, group: "GATE"},
		{args: []string{"--yes"}, yes: true, group: "GATE"},
		{args: []string{"-yes", "--nacos-addr", "n:8848"}, yes: true, nacos: "n:8848", group: "GATE"},
		{args: []string{"--yes=false", "--server", "http://g:8080"}, server: "http://g:8080", group: "GATE"},
		{args: []string{"--server=g:8080", "--yes=true", "--nacos-group=G"}, yes: true, server: "g:8080", group: "G"},
		{args: []string{"--yes=maybe"}, wantErr: "invalid boolean value"},
		{args: []string{"--batch", "5"}, wantErr: "flag provided but not defined: -batch"}, // serve's, not push's
		{args: []string{"--yes", "extra"}, wantErr: `unexpected argument "extra"`},
	} {
		c, o, err := parsePush("push", tc.args, func(string) string { return "" }, io.Discard)
		if tc.wantErr != "" {
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parsePush(%q): %v, want a usage error containing %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("parsePush(%q): %v", tc.args, err)
			continue
		}
		if o.yes != tc.yes || o.server != tc.server || c.NacosAddr != tc.nacos || c.NacosGroup != tc.group {
			t.Errorf("parsePush(%q) = yes %v, server %q, nacos %q, group %q; want %v, %q, %q, %q",
				tc.args, o.yes, o.server, c.NacosAddr, c.NacosGroup, tc.yes, tc.server, tc.nacos, tc.group)
		}
	}
}

func TestPrintPreviewTruncatedAndUnreplayable(t *testing.T) {
	at := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	p := &gate.RulePreview{Version: "v9", Since: at.Add(-time.Hour), Until: at, Decisions: 7, Replayed: 5, NotReplayable: 2,
		Truncated: true, Limit: 7, ReachedAt: at.Add(-time.Minute),
		Scenes: []gate.ScenePreview{
			{Scene: "", Then: gate.PreviewCounts{Invalid: 1}, Now: gate.PreviewCounts{Invalid: 1}},
			{Scene: "s", Then: gate.PreviewCounts{Forwarded: 5}, Now: gate.PreviewCounts{Forwarded: 5, Shadow: 2}},
		},
		Notes: []string{"a note"}}
	var b strings.Builder
	if err := printPreview(&b, p); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"2 not replayable",
		"TRUNCATED: stopped at 7 decisions (GATE_PREVIEW_MAX_DECISIONS), at 2026-11-24T08:59:00Z",
		"(no scene)",
		"no change",
		"(2 shadow)",
		"note: a note",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
