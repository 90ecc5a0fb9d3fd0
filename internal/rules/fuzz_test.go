package rules

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// FuzzParse wants Parse never to panic, every failure to be an *Error whose
// problems all name the document, and every success to name only scenes a
// message can carry and to survive Format: the formatted text parses back
// to the same version, and so does its JSON; held-message keys are set
// exactly on the scenes that use them. Seeds are the good and bad
// fixtures plus testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, pattern := range []string{"testdata/good/*.yaml", "testdata/bad/*.yaml", "../../rules/*.yaml"} {
		files, _ := filepath.Glob(pattern)
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Parse("fuzz.yaml", data)
		if err != nil {
			var rerr *Error
			if !errors.As(err, &rerr) || len(rerr.Problems) == 0 {
				t.Fatalf("error is %T %q, want *Error with problems", err, err)
			}
			for _, p := range rerr.Problems {
				if p.File != "fuzz.yaml" || p.Err == nil {
					t.Fatalf("problem %+v does not name the document and a reason", p)
				}
			}
			return
		}
		for name, r := range rs.Scenes {
			if err := gate.CheckName("scene", name, gate.MaxSceneBytes); err != nil {
				t.Fatalf("a rule names a scene no message can carry: %v", err)
			}
			checkHoldRule(t, name, r)
		}
		caps := gate.AdmitRequest{ID: "m", Recipient: "open_id:r", Scene: "s", Caps: rs.RecipientCaps}
		if err := caps.Validate(); err != nil {
			t.Fatalf("recipient_caps %+v: %v", rs.RecipientCaps, err)
		}
		checkJSONRoundTrip(t, rs)
		out := Format(rs)
		again, err := Parse("formatted.yaml", out)
		if err != nil {
			t.Fatalf("Format output does not parse: %v\ninput:\n%s\nformatted:\n%s", err, data, out)
		}
		if again.Version != rs.Version {
			t.Fatalf("version %s after Format, want %s\ninput:\n%s\nformatted:\n%s", again.Version, rs.Version, data, out)
		}
	})
}

// checkHoldRule checks what a parsed scene says about held messages: the
// defer keys set (within bounds) exactly when the scene defers, a zone
// loaded exactly when named, quiet hours a real span.
func checkHoldRule(t *testing.T, name string, r gate.SceneRule) {
	t.Helper()
	defers := r.OnExceed == gate.ActionDefer || (r.QuietHours != nil && r.QuietHours.Action == gate.ActionDefer)
	if defers != (r.MaxDefer > 0 && r.MaxDefer <= gate.MaxMaxDefer && r.DeferFallback != "") || (!defers && (r.MaxDefer != 0 || r.DeferFallback != "")) {
		t.Fatalf("scene %s: defers %v with max_defer %v, defer_fallback %q", name, defers, r.MaxDefer, r.DeferFallback)
	}
	if (r.TZ == "") != (r.Zone == nil) {
		t.Fatalf("scene %s: tz %q, zone %v", name, r.TZ, r.Zone)
	}
	if q := r.QuietHours; q != nil && (q.From == q.To || q.From < 0 || q.To < 0 || q.From >= 24*time.Hour || q.To >= 24*time.Hour) {
		t.Fatalf("scene %s: quiet hours %+v", name, q)
	}
	// Every limit a document can say is one a window store can decide: one
	// of window, calendar and rate, and one rate limit at most.
	q := gate.AdmitRequest{ID: "m", Recipient: "open_id:r", Scene: name, Limits: r.Limits}
	if err := q.Validate(); err != nil {
		t.Fatalf("scene %s: limits %+v: %v", name, r.Limits, err)
	}
}
