package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

func TestPushFlags(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		rest   []string
		yes    bool
		server string
	}{
		{nil, nil, false, ""},
		{[]string{"--yes"}, nil, true, ""},
		{[]string{"-yes", "--nacos-addr", "n:8848"}, []string{"--nacos-addr", "n:8848"}, true, ""},
		{[]string{"--yes=false", "--server", "http://g:8080"}, nil, false, "http://g:8080"},
		{[]string{"--server=g:8080", "--yes=true", "--nacos-group=G"}, []string{"--nacos-group=G"}, true, "g:8080"},
		{[]string{"--yes=maybe"}, []string{"--yes=maybe"}, false, ""}, // serve's flag set refuses it
	} {
		rest, o := pushFlags(tc.args)
		if !slices.Equal(rest, tc.rest) || o.yes != tc.yes || o.server != tc.server {
			t.Errorf("pushFlags(%q) = %q, yes %v, server %q; want %q, %v, %q", tc.args, rest, o.yes, o.server, tc.rest, tc.yes, tc.server)
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
