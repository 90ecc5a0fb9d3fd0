package faulttest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/testenv"
)

// binDir holds the binaries built for this run; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// binaries builds the gate and a nats-server once per run, without the race
// detector: the processes under test run at production speed while the test
// process itself keeps -race. It returns the folder holding them.
func binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gate-faulttest-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		for name, pkg := range map[string]string{
			"gate":        "github.com/antifatigue/gate/cmd/gate",
			"nats-server": "github.com/nats-io/nats-server/v2",
		} {
			cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, name), pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

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

// proc is a program the test runs as its own OS process, and may kill with
// SIGKILL and start again with the same arguments.
type proc struct {
	t    testing.TB
	name string
	path string
	args []string
	env  []string
	log  string // stdout and stderr of every run, appended

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	runs int
}

func newProc(t testing.TB, name, path string, args, env []string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, path: path, args: args, env: env, log: filepath.Join(t.TempDir(), name+".log")}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s log (last 60 lines of %s):\n%s", name, p.log, tail(p.log, 60))
		}
	})
	return p
}

// start runs the program; it must not be running.
func (p *proc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		p.t.Fatalf("%s: start while running", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	p.runs++
	fmt.Fprintf(f, "---- run %d at %s\n", p.runs, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: a Ctrl-C of the test run does not reach it
	// first, and nothing but this proc's pid is ever signalled.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
}

// kill sends SIGKILL (kill -9) and waits for the process to be gone. It
// does nothing when the process is not running.
func (p *proc) kill() { p.signal(syscall.SIGKILL, 0) }

// stop sends SIGTERM and waits up to wait, then kills.
func (p *proc) stop(wait time.Duration) { p.signal(syscall.SIGTERM, wait) }

func (p *proc) signal(sig syscall.Signal, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(wait):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd, p.done = nil, nil
}

// exited reports whether the process ended on its own.
func (p *proc) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// logContains reports whether any run's output contains s.
func (p *proc) logContains(s string) bool {
	b, _ := os.ReadFile(p.log)
	return bytes.Contains(b, []byte(s))
}

// logLines returns the lines of every run's output that contain s.
func (p *proc) logLines(s string) []string {
	b, _ := os.ReadFile(p.log)
	var out []string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// rssKiB reads the process's resident set now and at its peak, from /proc.
// It fails the test when it cannot: a zero would pass any memory check.
func (p *proc) rssKiB() (now, peak int) {
	p.t.Helper()
	pid := p.pid()
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

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// baseEnv is what every child process gets: nothing of the test's own
// GATE_* environment leaks in.
func baseEnv() []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TZ=UTC"}
	return env
}

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
