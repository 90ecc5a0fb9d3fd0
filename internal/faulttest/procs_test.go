package faulttest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/gateproc"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	gateproc.RemoveBuilds()
	os.Exit(code)
}

// natsServerPackage is built beside the gate, at the version go.mod names.
const natsServerPackage = "github.com/nats-io/nats-server/v2"

// needBinary returns the path of an installed program, or skips (fails
// under make test) when it is missing.
func needBinary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := fmt.Sprintf("%s is not installed (scripts/services.sh installs it)", name)
	if testenv.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// proc is a program the test runs as its own OS process (a
// gateproc.Proc), with the test, name and log path the helpers here print.
type proc struct {
	*gateproc.Proc
	t    testing.TB
	name string
	log  string
}

func newProc(t testing.TB, name, path string, args, env []string) *proc {
	t.Helper()
	p := gateproc.New(t, name, path, args, env)
	return &proc{Proc: p, t: t, name: name, log: p.LogPath()}
}

// rssKiB reads the process's resident set now and at its peak, from /proc.
// It fails the test when it cannot: a zero would pass any memory check.
func (p *proc) rssKiB() (now, peak int) {
	p.t.Helper()
	pid := p.Pid()
	if pid == 0 {
		p.t.Fatalf("%s: resident set asked of a process not running", p.name)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		p.t.Fatalf("%s: resident set: %v", p.name, err)
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch {
		case k != "VmRSS" && k != "VmHWM":
			continue
		case err != nil || n <= 0:
			p.t.Fatalf("%s: /proc/%d/status has %s %q", p.name, pid, k, strings.TrimSpace(v))
		case k == "VmRSS":
			now = n
		default:
			peak = n
		}
	}
	if now == 0 || peak == 0 {
		p.t.Fatalf("%s: /proc/%d/status has no VmRSS or VmHWM", p.name, pid)
	}
	return now, peak
}

// baseEnv is what every child process gets (gateproc.BaseEnv).
var baseEnv = gateproc.BaseEnv

// waitUntil polls cond every 20ms until it holds or d passes, and reports
// how long it took.
func waitUntil(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// dialable reports whether something accepts connections on addr.
func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// run runs a short command as attr says (nil: as the test) and fails the
// test with its output on error.
func run(t testing.TB, timeout time.Duration, attr *syscall.SysProcAttr, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := execCommand(ctx, attr, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// execCommand prepares a short command with the base environment, run as
// attr says (nil: as the test), in a folder any user may enter.
func execCommand(ctx context.Context, attr *syscall.SysProcAttr, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env, cmd.SysProcAttr, cmd.Dir = baseEnv(), attr, os.TempDir()
	return cmd
}
