package rules

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
)

// FuzzParse wants Parse never to panic, every failure to be an *Error whose
// problems all name the document, and every success to name only scenes a
// message can carry and to survive Format: the formatted text parses back
// to the same version. Seeds are the good and bad
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
		for name := range rs.Scenes {
			if err := gate.CheckName("scene", name, gate.MaxSceneBytes); err != nil {
				t.Fatalf("a rule names a scene no message can carry: %v", err)
			}
		}
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
