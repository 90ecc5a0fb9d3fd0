package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the module path; rules below name packages relative to it.
const module = "github.com/antifatigue/gate"

// rule is what one package may import, as its doc.go states it: packages of
// this module (relative paths) and third-party module path prefixes.
// Anything of the standard library is always allowed.
type rule struct {
	internal   []string
	thirdParty []string
}

// rules lists every production package outside cmd/, bench/ and tools/.
// A package not listed gets defaultRule; to give it more, add it here with
// the same words in its doc.go.
var rules = map[string]rule{
	// The domain: the standard library only.
	"internal/gate": {},
	// Shared pieces the adapters build on.
	"internal/metrics": {thirdParty: []string{"github.com/prometheus/client_golang"}},
	"migrations":       {},
	"internal/webui":   {},
	"internal/ratelog": {},
	"internal/redact":  {},
	// Adapters and services: the domain, and what their doc.go names.
	"internal/rules":      {internal: []string{"internal/gate", "internal/metrics"}, thirdParty: []string{"gopkg.in/yaml.v3"}},
	"internal/pipeline":   {internal: []string{"internal/gate", "internal/metrics", "internal/ratelog"}},
	"internal/preview":    {internal: []string{"internal/gate", "internal/inmem", "internal/rules"}},
	"internal/inmem":      {internal: []string{"internal/gate"}},
	"internal/prefcache":  {internal: []string{"internal/gate", "internal/ratelog"}},
	"internal/client":     {internal: []string{"internal/gate", "internal/httpapi"}},
	"internal/redisstore": {internal: []string{"internal/gate"}, thirdParty: []string{"github.com/redis/go-redis/v9"}},
	"internal/nacosrules": {internal: []string{"internal/gate", "internal/rules"}, thirdParty: []string{"github.com/nacos-group/nacos-sdk-go/v2"}},
	"internal/natsbus": {internal: []string{"internal/gate", "internal/metrics", "internal/ratelog"},
		thirdParty: []string{"github.com/nats-io/nats.go", "github.com/nats-io/nats-server/v2"}},
	"internal/httpapi": {internal: []string{"internal/gate", "internal/metrics", "internal/webui"},
		thirdParty: []string{"github.com/prometheus/client_golang"}},
	"internal/gormstore": {internal: []string{"internal/gate", "migrations"},
		thirdParty: []string{"gorm.io/gorm", "gorm.io/driver/postgres", "github.com/glebarez/sqlite", "github.com/jackc/pgx/v5"}},
}

// defaultRule is a new package's: the domain and the metrics, no
// third-party module. A package inside another's folder may also import
// its parent's tree (see sameTree).
var defaultRule = rule{internal: []string{"internal/gate", "internal/metrics"}}

// testSupport are the packages only tests (and measuring tools) may import.
var testSupport = []string{"internal/testing", "internal/testenv", "internal/pgschema", "internal/storetest", "internal/procstat", "internal/faulttest"}

// tools may import any package of the module, test support included: they
// measure the gate rather than run it.
var tools = []string{"bench", "tools", "cmd/gatebench"}

// pkg is the part of `go list -json` the rules read.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// under reports whether rel is one of roots or below one.
func under(rel string, roots ...string) bool {
	return slices.ContainsFunc(roots, func(r string) bool { return rel == r || strings.HasPrefix(rel, r+"/") })
}

// sameTree reports whether a and b share their first two path elements
// (internal/pipeline/x and internal/pipeline): a package's own subpackages
// are its own business.
func sameTree(a, b string) bool {
	top := func(p string) string {
		parts := strings.SplitN(p, "/", 3)
		return strings.Join(parts[:min(2, len(parts))], "/")
	}
	return top(a) == top(b)
}

func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func TestImportRules(t *testing.T) {
	for _, v := range check(t, listPackages(t)) {
		t.Error(v)
	}
}

// check returns one line per forbidden import, naming the rule it breaks.
func check(t *testing.T, pkgs []pkg) []string {
	t.Helper()
	var bad []string
	report := func(from, imp, why string) { bad = append(bad, from+" imports "+imp+": "+why) }
	for _, p := range pkgs {
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue
		}
		// (e) nothing imports a command, not even a test.
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if r, ok := strings.CutPrefix(imp, module+"/"); ok && under(r, "cmd") && !under(rel, r) {
				report(rel, r, "nothing may import a command (cmd/...)")
			}
		}
		switch {
		case under(rel, "cmd"), under(rel, tools...), under(rel, testSupport...):
			continue // commands, tools and test support wire what they need
		}
		rl, listed := rules[rel]
		if !listed {
			rl = defaultRule
		}
		for _, imp := range p.Imports {
			if isStd(imp) {
				continue
			}
			r, local := strings.CutPrefix(imp, module+"/")
			switch {
			case !local && rel == "internal/gate":
				report(rel, imp, "the domain imports only the standard library")
			case !local && !slices.ContainsFunc(rl.thirdParty, func(m string) bool { return under(imp, m) }):
				report(rel, imp, "a third-party module its doc.go does not name (add it to the rules in internal/archtest with the doc.go)")
			case !local:
			case under(r, testSupport...):
				report(rel, r, "a production package never imports test support")
			case rel == "internal/gate":
				report(rel, r, "the domain imports only the standard library")
			case under(r, "cmd"):
				// reported above
			case slices.Contains(rl.internal, r), sameTree(rel, r):
			case !listed:
				report(rel, r, "a new package may import only "+strings.Join(defaultRule.internal, ", ")+
					"; only cmd/... and bench/... wire adapters together (give it a rule in internal/archtest and its doc.go)")
			default:
				report(rel, r, "adapters never import each other; its doc.go allows only "+strings.Join(rl.internal, ", ")+
					" (only cmd/... and bench/... wire adapters together)")
			}
		}
	}
	return bad
}

// listPackages runs `go list -json ./...` at the module root.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command("go", "list", "-e", "-json", "./...")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < len(rules) {
		t.Fatalf("go list found %d packages, fewer than the %d the rules name: run from inside the module", len(pkgs), len(rules))
	}
	return pkgs
}

// TestCheckCatches feeds check made-up packages, one per rule, so a rule
// that stops firing fails here rather than passing in silence.
func TestCheckCatches(t *testing.T) {
	m := func(rel string) string { return module + "/" + rel }
	pkgs := []pkg{
		{ImportPath: m("internal/gate"), Imports: []string{"fmt", "gopkg.in/yaml.v3", m("internal/metrics")}},
		{ImportPath: m("internal/redisstore"), Imports: []string{m("internal/gate"), m("internal/inmem")}},
		{ImportPath: m("internal/pipeline"), Imports: []string{m("internal/testing/fakes"), m("internal/testenv")}},
		{ImportPath: m("internal/newthing"), Imports: []string{m("internal/gate"), m("internal/natsbus")}},
		{ImportPath: m("internal/httpapi"), TestImports: []string{m("cmd/gate")}},
		{ImportPath: m("cmd/gate"), Imports: []string{m("internal/natsbus"), m("internal/gormstore")}},
		{ImportPath: m("bench/gatebench"), Imports: []string{m("internal/testing/procstat")}},
		{ImportPath: m("internal/pipeline/core"), Imports: []string{m("internal/pipeline")}},
	}
	got := check(t, pkgs)
	want := []string{
		"internal/gate imports gopkg.in/yaml.v3: the domain imports only the standard library",
		"internal/gate imports internal/metrics: the domain imports only the standard library",
		"internal/redisstore imports internal/inmem: adapters never import each other",
		"internal/pipeline imports internal/testing/fakes: a production package never imports test support",
		"internal/pipeline imports internal/testenv: a production package never imports test support",
		"internal/newthing imports internal/natsbus: a new package may import only",
		"internal/httpapi imports cmd/gate: nothing may import a command",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("violation %d:\ngot  %s\nwant %s...", i, got[i], want[i])
		}
	}
}
