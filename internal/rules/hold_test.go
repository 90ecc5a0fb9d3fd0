package rules

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := gate.LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestParseHold(t *testing.T) {
	hour, day := time.Hour, 24*time.Hour
	shanghai, berlin := mustZone(t, "Asia/Shanghai"), mustZone(t, "Europe/Berlin")
	tests := []struct {
		name string
		doc  string
		want gate.SceneRule
	}{{
		name: "defer with its defaults",
		doc:  "limits: [{window: 1h, max: 1}]\n    on_exceed: defer\n",
		want: gate.SceneRule{Limits: []gate.Limit{{Window: hour, Max: 1}}, OnExceed: gate.ActionDefer, OnStoreError: gate.ActionRetry,
			MaxDefer: gate.DefaultMaxDefer, DeferFallback: gate.ActionSuppress},
	}, {
		name: "defer with max_defer and a digest fallback",
		doc:  "limits: [{window: 1h, max: 1}]\n    on_exceed: defer\n    max_defer: 7d\n    defer_fallback: digest\n    digest_group: ops\n",
		want: gate.SceneRule{Limits: []gate.Limit{{Window: hour, Max: 1}}, OnExceed: gate.ActionDefer, OnStoreError: gate.ActionRetry,
			MaxDefer: gate.MaxMaxDefer, DeferFallback: gate.ActionDigest, DigestGroup: "ops"},
	}, {
		name: "digest without a group",
		doc:  "limits: [{window: 30m, max: 1}]\n    on_exceed: digest\n",
		want: gate.SceneRule{Limits: []gate.Limit{{Window: 30 * time.Minute, Max: 1}}, OnExceed: gate.ActionDigest, OnStoreError: gate.ActionRetry},
	}, {
		name: "quiet hours that defer, in a zone",
		doc:  "limits: [{window: 24h, max: 1}]\n    tz: Asia/Shanghai\n    quiet_hours: {from: \"22:00\", to: \"08:00\", action: defer}\n    max_defer: 12h\n",
		want: gate.SceneRule{Limits: []gate.Limit{{Window: day, Max: 1}}, OnExceed: gate.ActionSuppress, OnStoreError: gate.ActionRetry,
			MaxDefer: 12 * hour, DeferFallback: gate.ActionSuppress, TZ: "Asia/Shanghai", Zone: shanghai,
			QuietHours: &gate.QuietHours{From: 22 * hour, To: 8 * hour, Action: gate.ActionDefer}},
	}, {
		name: "quiet hours that drop: no defer keys",
		doc:  "limits: [{window: 24h, max: 1}]\n    quiet_hours: {action: drop, to: \"17:30\", from: \"09:00\"}\n",
		want: gate.SceneRule{Limits: []gate.Limit{{Window: day, Max: 1}}, OnExceed: gate.ActionSuppress, OnStoreError: gate.ActionRetry,
			QuietHours: &gate.QuietHours{From: 9 * hour, To: 17*hour + 30*time.Minute, Action: gate.ActionDrop}},
	}, {
		name: "calendar limits after rolling ones, day before week",
		doc:  "limits: [{calendar: week, max: 10}, {window: 1d, max: 5}, {calendar: day, max: 3}, {window: 1h, max: 1}]\n    tz: Europe/Berlin\n",
		want: gate.SceneRule{Limits: []gate.Limit{{Window: hour, Max: 1}, {Window: day, Max: 5}, {Calendar: gate.CalendarDay, Max: 3}, {Calendar: gate.CalendarWeek, Max: 10}},
			OnExceed: gate.ActionSuppress, OnStoreError: gate.ActionRetry, TZ: "Europe/Berlin", Zone: berlin},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustParse(t, "scenes:\n  a:\n    "+tt.doc)
			if got := rs.Scenes["a"]; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tt.want)
			}
			checkFormatRoundTrip(t, rs)
			checkJSONRoundTrip(t, rs)
		})
	}
}

func TestParseCalendarCaps(t *testing.T) {
	rs := mustParse(t, "recipient_caps: [{calendar: day, max: 20}, {window: 1h, max: 5}]\nscenes: {}\n")
	want := []gate.Limit{{Window: time.Hour, Max: 5}, {Calendar: gate.CalendarDay, Max: 20}}
	if !reflect.DeepEqual(rs.RecipientCaps, want) {
		t.Errorf("recipient_caps = %+v, want %+v", rs.RecipientCaps, want)
	}
}

// TestVersionOfExistingDocuments pins the versions documents had before
// calendar limits, held messages, quiet hours and zones existed: the new
// fields must not change the JSON the version hashes of a document that
// does not use them.
func TestVersionOfExistingDocuments(t *testing.T) {
	for path, want := range map[string]string{
		"testdata/good/full.yaml":    "4bb4e09e617a1392",
		"testdata/good/minimal.yaml": "3d0e46e3a92ce34c",
		"testdata/goodfolders/split": "4bb4e09e617a1392",
	} {
		rs, err := LoadPath(path)
		if err != nil {
			t.Fatalf("LoadPath(%s): %v", path, err)
		}
		if rs.Version != want {
			t.Errorf("version of %s = %s, want %s as before", path, rs.Version, want)
		}
	}
}

// TestVersionHold wants every new key to change the version, and the
// defaults written out to keep it.
func TestVersionHold(t *testing.T) {
	const lim = "scenes:\n  a:\n    limits: [{window: 1h, max: 1}]\n"
	base := mustParse(t, lim+"    on_exceed: defer\n").Version
	same := map[string]string{
		"defaults written out": lim + "    on_exceed: defer\n    max_defer: 24h\n    defer_fallback: suppress\n",
		"max_defer in days":    lim + "    on_exceed: defer\n    max_defer: 1d\n",
	}
	for what, doc := range same {
		if v := mustParse(t, doc).Version; v != base {
			t.Errorf("%s: version %s, want %s", what, v, base)
		}
	}
	changed := map[string]string{
		"max_defer":      lim + "    on_exceed: defer\n    max_defer: 6h\n",
		"defer_fallback": lim + "    on_exceed: defer\n    defer_fallback: drop\n",
		"digest_group":   lim + "    on_exceed: defer\n    defer_fallback: digest\n    digest_group: g\n",
		"on_exceed":      lim + "    on_exceed: digest\n",
		"tz":             lim + "    on_exceed: defer\n    tz: UTC\n",
		"quiet_hours":    lim + "    on_exceed: defer\n    quiet_hours: {from: \"22:00\", to: \"08:00\", action: defer}\n",
		"calendar":       "scenes:\n  a:\n    limits: [{calendar: day, max: 1}]\n    on_exceed: defer\n",
	}
	seen := map[string]string{base: "base"}
	for what, doc := range changed {
		v := mustParse(t, doc).Version
		if other, dup := seen[v]; dup {
			t.Errorf("%s has version %s, as %s", what, v, other)
		}
		seen[v] = what
	}
	// Each field of quiet hours and each calendar period counts.
	quiet := func(from, to, action string) string {
		return mustParse(t, lim+"    quiet_hours: {from: \""+from+"\", to: \""+to+"\", action: "+action+"}\n").Version
	}
	q := quiet("22:00", "08:00", "drop")
	for _, v := range []string{quiet("22:01", "08:00", "drop"), quiet("22:00", "07:59", "drop"), quiet("22:00", "08:00", "suppress")} {
		if v == q {
			t.Errorf("changing quiet hours kept version %s", v)
		}
	}
	day := mustParse(t, "scenes:\n  a:\n    limits: [{calendar: day, max: 1}]\n").Version
	if week := mustParse(t, "scenes:\n  a:\n    limits: [{calendar: week, max: 1}]\n").Version; week == day {
		t.Errorf("a day and a week limit have one version %s", day)
	}
	if v := mustParse(t, "scenes: {a: {limits: [{max: 1, calendar: day}]}}\n").Version; v != day {
		t.Errorf("the same calendar limit written differently has version %s, want %s", v, day)
	}
}

// checkJSONRoundTrip wants the rules' JSON (as /v1/rules serves it) to read
// back to the same rules: the version, which hashes that JSON, and the
// loaded zones.
func checkJSONRoundTrip(t *testing.T, rs *gate.RuleSet) {
	t.Helper()
	b, err := json.Marshal(rs)
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	var back gate.RuleSet
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("json.Unmarshal(%s): %v", b, err)
	}
	if v, err := version(&back); err != nil || v != rs.Version {
		t.Errorf("version after JSON = %s, %v; want %s\n%s", v, err, rs.Version, b)
	}
	if back.Version != rs.Version {
		t.Errorf("JSON carries version %s, want %s", back.Version, rs.Version)
	}
	for name, r := range rs.Scenes {
		if b := back.Scenes[name]; !reflect.DeepEqual(b, r) {
			t.Errorf("scene %s after JSON:\n got %+v\nwant %+v", name, b, r)
		}
	}
}

func TestGoodFixturesJSON(t *testing.T) {
	for _, path := range []string{"testdata/good/hold.yaml", "testdata/good/full.yaml", "../../rules"} {
		rs, err := LoadPath(path)
		if err != nil {
			t.Fatalf("LoadPath(%s): %v", path, err)
		}
		checkJSONRoundTrip(t, rs)
	}
}
