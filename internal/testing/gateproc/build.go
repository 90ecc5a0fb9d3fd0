package gateproc

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// GatePackage is the import path of the gate command.
const GatePackage = "github.com/antifatigue/gate/cmd/gate"

var builds struct {
	mu   sync.Mutex
	dir  string
	done map[string]*built
}

type built struct {
	once sync.Once
	path string
	err  error
}

// Build returns the path of pkg's binary, named name, building it on the
// first call of the run: without the race detector and with cgo off, so
// the processes under test run at production speed while the test process
// keeps -race. RemoveBuilds removes what Build made.
func Build(tb testing.TB, name, pkg string) string {
	tb.Helper()
	builds.mu.Lock()
	if builds.done == nil {
		builds.done = map[string]*built{}
	}
	b, ok := builds.done[name]
	if !ok {
		b = &built{}
		builds.done[name] = b
	}
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "gate-test-bin-")
		if err != nil {
			builds.mu.Unlock()
			tb.Fatal(err)
		}
		builds.dir = dir
	}
	dir := builds.dir
	builds.mu.Unlock()
	b.once.Do(func() {
		b.path = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-trimpath", "-o", b.path, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// Gate is Build of the gate command.
func Gate(tb testing.TB) string {
	tb.Helper()
	return Build(tb, "gate", GatePackage)
}

// RemoveBuilds removes the binaries Build made; a TestMain calls it after
// m.Run.
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
		builds.dir, builds.done = "", nil
	}
}
