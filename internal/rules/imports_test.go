package rules

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// TestImports keeps the package an adapter of the domain: the standard
// library, yaml.v3, the domain and the metrics, nothing else (doc.go).
func TestImports(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{
		"gopkg.in/yaml.v3",
		"github.com/antifatigue/gate/internal/gate",
		"github.com/antifatigue/gate/internal/metrics",
	}
	for _, imp := range pkg.Imports {
		first, _, _ := strings.Cut(imp, "/")
		if !strings.Contains(first, ".") || slices.Contains(allowed, imp) {
			continue // standard library, or allowed
		}
		t.Errorf("internal/rules imports %s; doc.go allows only the standard library and %v", imp, allowed)
	}
}
