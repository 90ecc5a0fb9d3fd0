package rules

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/antifatigue/gate/internal/gate"
)

// TestBadFixtures loads each testdata/bad/*.yaml and wants exactly the
// message in the sibling .err file: the message is the product here, so it
// is pinned whole, file, line, column, path and reason.
func TestBadFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			checkRejected(t, file, strings.TrimSuffix(file, ".yaml")+".err")
		})
	}
}

// TestBadFolders loads each testdata/badfolders/* folder and wants the
// message in its want.err (which LoadPath skips: it is not YAML).
func TestBadFolders(t *testing.T) {
	dirs, err := filepath.Glob("testdata/badfolders/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			checkRejected(t, dir, filepath.Join(dir, "want.err"))
		})
	}
}

func checkRejected(t *testing.T, path, errFile string) {
	t.Helper()
	want, err := os.ReadFile(errFile)
	if err != nil {
		t.Fatalf("every bad fixture needs its expected message: %v", err)
	}
	rs, err := LoadPath(path)
	if err == nil {
		t.Fatalf("LoadPath(%s) = version %s, want an error", path, rs.Version)
	}
	if got := err.Error(); got != strings.TrimSpace(string(want)) {
		t.Errorf("LoadPath(%s) error:\n got: %s\nwant: %s", path, got, want)
	}
	var rerr *Error
	if !errors.As(err, &rerr) || len(rerr.Problems) == 0 {
		t.Errorf("error is %T, want *Error with problems", err)
	}
}

func TestGoodFixtures(t *testing.T) {
	paths, _ := filepath.Glob("testdata/good/*.yaml")
	dirs, _ := filepath.Glob("testdata/goodfolders/*")
	for _, path := range append(paths, dirs...) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			rs, err := LoadPath(path)
			if err != nil {
				t.Fatalf("LoadPath: %v", err)
			}
			if len(rs.Version) != 16 {
				t.Errorf("version %q, want 16 hex digits", rs.Version)
			}
			checkFormatRoundTrip(t, rs)
		})
	}
}

// checkFormatRoundTrip wants Format's output to parse back to the same
// version, and formatting that again to give the same text.
func checkFormatRoundTrip(t *testing.T, rs *gate.RuleSet) {
	t.Helper()
	out := Format(rs)
	again, err := Parse("formatted.yaml", out)
	if err != nil {
		t.Fatalf("Format output does not parse: %v\n%s", err, out)
	}
	if again.Version != rs.Version {
		t.Errorf("version after Format and Parse = %s, want %s\n%s", again.Version, rs.Version, out)
	}
	if out2 := Format(again); string(out2) != string(out) {
		t.Errorf("Format is not stable:\n%s\n---\n%s", out, out2)
	}
}

func TestParseValues(t *testing.T) {
	hour, day := time.Hour, 24*time.Hour
	// defaults is one scene with one limit and nothing else said.
	defaults := gate.RuleSet{
		UnknownScene: gate.ActionForward,
		Scenes: map[string]gate.SceneRule{
			"a": {Limits: []gate.Limit{{Window: hour, Max: 1}}, OnExceed: gate.ActionSuppress, OnStoreError: gate.ActionRetry},
		},
	}
	tests := []struct {
		name string
		doc  string
		want gate.RuleSet // Version is not compared
	}{{
		name: "defaults filled in",
		doc:  "scenes:\n  a:\n    limits: [{window: 1h, max: 1}]\n",
		want: defaults,
	}, {
		name: "limits sorted by window, priorities by rank",
		doc: "scenes:\n  a:\n    limits: [{window: 7d, max: 5}, {window: 1h, max: 1}, {window: 1d, max: 3}]\n" +
			"    bypass_priorities: [urgent, low, high]\n    on_exceed: drop\n    shadow: true\n",
		want: gate.RuleSet{
			UnknownScene: gate.ActionForward,
			Scenes: map[string]gate.SceneRule{"a": {
				Limits:           []gate.Limit{{Window: hour, Max: 1}, {Window: day, Max: 3}, {Window: 7 * day, Max: 5}},
				OnExceed:         gate.ActionDrop,
				OnStoreError:     gate.ActionRetry,
				BypassPriorities: []gate.Priority{gate.PriorityLow, gate.PriorityHigh, gate.PriorityUrgent},
				Shadow:           true,
			}},
		},
	}, {
		name: "a scene that fails open when the window store is down",
		doc:  "scenes:\n  a:\n    limits: [{window: 1h, max: 1}]\n    on_store_error: forward\n",
		want: gate.RuleSet{
			UnknownScene: gate.ActionForward,
			Scenes: map[string]gate.SceneRule{
				"a": {Limits: []gate.Limit{{Window: hour, Max: 1}}, OnExceed: gate.ActionSuppress, OnStoreError: gate.ActionForward},
			},
		},
	}, {
		name: "recipient caps and unknown scene",
		doc:  "unknown_scene: drop\nrecipient_caps: [{window: 24h, max: 20}, {window: 90s, max: 2}]\nscenes: {}\n",
		want: gate.RuleSet{
			UnknownScene:  gate.ActionDrop,
			RecipientCaps: []gate.Limit{{Window: 90 * time.Second, Max: 2}, {Window: day, Max: 20}},
			Scenes:        map[string]gate.SceneRule{},
		},
	}, {
		name: "empty lists mean the defaults",
		doc:  "recipient_caps: []\nscenes:\n  a:\n    limits: [{window: 1h, max: 1}]\n    bypass_priorities: []\n",
		want: defaults,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse("test.yaml", []byte(tt.doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got.Version = ""
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}

// TestVersion wants the version to follow the rules and nothing else: not
// the layout, the spelling of a window, the order of keys, or how the rules
// are split into files.
func TestVersion(t *testing.T) {
	load := func(path string) string {
		t.Helper()
		rs, err := LoadPath(path)
		if err != nil {
			t.Fatalf("LoadPath(%s): %v", path, err)
		}
		return rs.Version
	}
	want := load("testdata/good/full.yaml")
	for _, path := range []string{"testdata/good/full_reformatted.yaml", "testdata/goodfolders/split"} {
		if got := load(path); got != want {
			t.Errorf("version of %s = %s, want %s as full.yaml", path, got, want)
		}
	}

	base := "scenes:\n  a:\n    limits: [{window: 1h, max: 1}]\n"
	changed := map[string]string{
		"max":         "scenes:\n  a:\n    limits: [{window: 1h, max: 2}]\n",
		"window":      "scenes:\n  a:\n    limits: [{window: 2h, max: 1}]\n",
		"scene name":  "scenes:\n  b:\n    limits: [{window: 1h, max: 1}]\n",
		"on_exceed":   "scenes:\n  a:\n    limits: [{window: 1h, max: 1}]\n    on_exceed: drop\n",
		"shadow":      "scenes:\n  a:\n    limits: [{window: 1h, max: 1}]\n    shadow: true\n",
		"bypass":      "scenes:\n  a:\n    limits: [{window: 1h, max: 1}]\n    bypass_priorities: [urgent]\n",
		"unknown":     "unknown_scene: drop\n" + base,
		"caps":        "recipient_caps: [{window: 1h, max: 9}]\n" + base,
		"extra limit": "scenes:\n  a:\n    limits: [{window: 1h, max: 1}, {window: 1d, max: 3}]\n",
	}
	baseRS := mustParse(t, base)
	for what, doc := range changed {
		if v := mustParse(t, doc).Version; v == baseRS.Version {
			t.Errorf("changing the %s kept version %s", what, v)
		}
	}
	if v := mustParse(t, "# a comment\nscenes: {a: {limits: [{max: 1, window: 60m}], on_exceed: suppress}}\n").Version; v != baseRS.Version {
		t.Errorf("the same rules written differently have version %s, want %s", v, baseRS.Version)
	}
}

// TestSceneNamesAsMessagesCarryThem holds the rules to the messages' check
// of a scene: a scene a rule can name is one a message can carry, and a
// scene a message can carry can be named by a rule unless it holds
// whitespace, which the rules refuse on top.
func TestSceneNamesAsMessagesCarryThem(t *testing.T) {
	for _, name := range []string{
		"alert.disk_full", "告警.磁盘", "👩\u200d💻", "a\u200bb", strings.Repeat("x", gate.MaxSceneBytes),
		strings.Repeat("x", gate.MaxSceneBytes+1), "", " ", "a b", "a\tb", "a\u00a0b", "a\u2007b",
		"a\x00b", "a\x1bb", "a\x7fb", "a\u0085b", "a\u009fb", "user\u202egnp.exe", "x\u200f", "\u2066x", "x\u061c",
	} {
		// Go's escapes in ASCII are YAML's too (\t, \xXX below 0x80,
		// \uXXXX, \UXXXXXXXX), so the document carries the name exactly.
		doc := "scenes:\n  " + strconv.QuoteToASCII(name) + ":\n    limits: [{window: 1h, max: 1}]\n"
		rs, ruleErr := Parse("test.yaml", []byte(doc))
		if ruleErr == nil {
			if _, ok := rs.Scenes[name]; !ok {
				t.Fatalf("%q: parsed scenes %v, want the name as written", name, slices.Collect(maps.Keys(rs.Scenes)))
			}
		}
		d := gate.Delivery{Data: []byte("{}"), HeaderID: "m", HeaderScene: name, HeaderRecipient: "open_id:ou_1"}
		_, msgErr := gate.ParseDelivery(d, 0)
		if name == "" {
			msgErr = gate.CheckName("scene", name, gate.MaxSceneBytes) // an empty header means no header
		}
		spaced := strings.IndexFunc(name, unicode.IsSpace) >= 0
		if (ruleErr == nil) != (msgErr == nil && !spaced) {
			t.Errorf("scene %q: a rule gives %v, a message %v", name, ruleErr, msgErr)
		}
	}
}

func mustParse(t *testing.T, doc string) *gate.RuleSet {
	t.Helper()
	rs, err := Parse("test.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("Parse(%q): %v", doc, err)
	}
	return rs
}

func TestNoRules(t *testing.T) {
	for _, doc := range []string{"", " \n\t\n", "# nothing\n", "---\n", "~\n", "null\n", "--- \n---\n", "unknown_scene: drop\n"} {
		_, err := Parse("rules.yaml", []byte(doc))
		if !errors.Is(err, ErrNoRules) {
			t.Errorf("Parse(%q) = %v, want ErrNoRules", doc, err)
		}
	}
	if _, err := Merge(); !errors.Is(err, ErrNoRules) {
		t.Errorf("Merge() = %v, want ErrNoRules", err)
	}
}

func TestTooManyProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("scenes:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "  s%d:\n    limits: [{window: 0s, max: 1}]\n", i)
	}
	_, err := Parse("big.yaml", []byte(b.String()))
	var rerr *Error
	if !errors.As(err, &rerr) {
		t.Fatalf("Parse = %v, want *Error", err)
	}
	if len(rerr.Problems) != maxProblems || rerr.Omitted != 30-maxProblems {
		t.Errorf("got %d problems and %d omitted, want %d and %d", len(rerr.Problems), rerr.Omitted, maxProblems, 30-maxProblems)
	}
	if !strings.HasSuffix(err.Error(), "too many problems: 10 more not shown; fix these and check again") {
		t.Errorf("message does not say problems were left out:\n%s", err)
	}
}

func TestDocumentTooLarge(t *testing.T) {
	doc := "scenes: {}\n# " + strings.Repeat("x", MaxDocumentBytes) + "\n"
	_, err := Parse("huge.yaml", []byte(doc))
	want := "huge.yaml: document is over the limit of 1048576 bytes"
	if err == nil || err.Error() != want {
		t.Errorf("Parse = %v, want %s", err, want)
	}
}

// TestDefaultRules checks the document shipped in rules/: it must parse and
// say what its comments say. The scenes that were there before held
// messages, quiet hours and calendar limits behave as they did.
func TestDefaultRules(t *testing.T) {
	rs, err := LoadPath("../../rules")
	if err != nil {
		t.Fatalf("the shipped rules do not load: %v", err)
	}
	if rs.UnknownScene != gate.ActionForward {
		t.Errorf("unknown_scene = %s, want forward", rs.UnknownScene)
	}
	if want := []gate.Limit{{Window: 24 * time.Hour, Max: 20}}; !reflect.DeepEqual(rs.RecipientCaps, want) {
		t.Errorf("recipient_caps = %v, want %v", rs.RecipientCaps, want)
	}
	want := map[string]gate.SceneRule{
		"alert.disk_full": {
			Limits:           []gate.Limit{{Window: time.Hour, Max: 1}, {Window: 24 * time.Hour, Max: 3}},
			OnExceed:         gate.ActionSuppress,
			OnStoreError:     gate.ActionRetry,
			BypassPriorities: []gate.Priority{gate.PriorityUrgent},
		},
		"job.retry_notice": {
			Limits:       []gate.Limit{{Window: 24 * time.Hour, Max: 3}},
			OnExceed:     gate.ActionDrop,
			OnStoreError: gate.ActionRetry,
		},
		"digest.weekly_report": {
			Limits:       []gate.Limit{{Window: 7 * 24 * time.Hour, Max: 1}},
			OnExceed:     gate.ActionSuppress,
			OnStoreError: gate.ActionRetry,
			Shadow:       true,
		},
		"alert.backup_failed": {
			Limits:        []gate.Limit{{Window: time.Hour, Max: 1}},
			OnExceed:      gate.ActionDefer,
			OnStoreError:  gate.ActionRetry,
			MaxDefer:      6 * time.Hour,
			DeferFallback: gate.ActionSuppress,
		},
		"ci.build_failed": {
			Limits:       []gate.Limit{{Window: 30 * time.Minute, Max: 1}},
			OnExceed:     gate.ActionDigest,
			OnStoreError: gate.ActionRetry,
			DigestGroup:  "ci",
		},
		"ci.deploy_failed": {
			Limits:       []gate.Limit{{Window: 30 * time.Minute, Max: 1}},
			OnExceed:     gate.ActionDigest,
			OnStoreError: gate.ActionRetry,
			DigestGroup:  "ci",
		},
		"marketing.weekly": {
			Limits:        []gate.Limit{{Window: 24 * time.Hour, Max: 1}},
			OnExceed:      gate.ActionSuppress,
			OnStoreError:  gate.ActionRetry,
			MaxDefer:      gate.DefaultMaxDefer,
			DeferFallback: gate.ActionSuppress,
			TZ:            "Asia/Shanghai",
			Zone:          mustZone(t, "Asia/Shanghai"),
			QuietHours:    &gate.QuietHours{From: 22 * time.Hour, To: 8 * time.Hour, Action: gate.ActionDefer},
		},
		"reminder.approval_pending": {
			Limits:       []gate.Limit{{Window: time.Hour, Max: 1}, {Calendar: gate.CalendarDay, Max: 3}, {Calendar: gate.CalendarWeek, Max: 10}},
			OnExceed:     gate.ActionSuppress,
			OnStoreError: gate.ActionRetry,
			TZ:           "Europe/Berlin",
			Zone:         mustZone(t, "Europe/Berlin"),
		},
	}
	if !reflect.DeepEqual(rs.Scenes, want) {
		t.Errorf("scenes:\n got %+v\nwant %+v", rs.Scenes, want)
	}
}

// TestLoadPathSkips wants only visible *.yaml and *.yml regular files, found
// through links as in a Kubernetes ConfigMap mount, to be read.
func TestLoadPathSkips(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2024_01_01")
	writeFile(t, data, "alerts.yaml", "scenes:\n  a:\n    limits: [{window: 1h, max: 1}]\n")
	if err := os.Symlink(filepath.Join(data, "alerts.yaml"), filepath.Join(dir, "alerts.yaml")); err != nil {
		t.Fatal(err)
	}
	broken := "scenes: [\n"
	for _, name := range []string{".hidden.yaml", "alerts.yaml~", "#alerts.yaml#", "alerts.yaml.swp", "notes.txt", "sub/nested.yaml"} {
		writeFile(t, dir, name, broken)
	}
	if err := os.Mkdir(filepath.Join(dir, "folder.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "jobs.YML", "scenes:\n  b:\n    limits: [{window: 1h, max: 1}]\n")
	rs, err := LoadPath(dir)
	if err != nil {
		t.Fatalf("LoadPath: %v", err)
	}
	if len(rs.Scenes) != 2 {
		t.Errorf("scenes = %v, want a and b", rs.Scenes)
	}
	if _, err := LoadPath(filepath.Join(dir, "missing")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadPath(missing) = %v, want a not-exist error", err)
	}
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFormatQuotesNames(t *testing.T) {
	rs := mustParse(t, "scenes:\n  \"null\":\n    limits: [{window: 1h, max: 1}]\n  'a:b#c':\n    limits: [{window: 1h, max: 1}]\n")
	out := string(Format(rs))
	for _, want := range []string{"  \"null\":\n", "  \"a:b#c\":\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("Format output lacks %q:\n%s", want, out)
		}
	}
	checkFormatRoundTrip(t, rs)
}
