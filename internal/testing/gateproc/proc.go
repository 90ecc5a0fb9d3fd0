package gateproc

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a program the test runs as its own OS process, and may stop,
// kill and start again with the same arguments and environment.
type Proc struct {
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
	last *os.ProcessState // how the last run that Stop or Kill ended exited
}

// New prepares the program at path, named name in logs and failures, to
// run with args and exactly the environment env (BaseEnv and Env build
// one). It does not start it. When the test ends the process is killed,
// and if the test failed the tail of its log is printed.
func New(t testing.TB, name, path string, args, env []string) *Proc {
	t.Helper()
	p := &Proc{t: t, name: name, path: path, args: args, env: env, log: filepath.Join(t.TempDir(), name+".log")}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s log (last 60 lines of %s):\n%s", name, p.log, p.Tail(60))
		}
	})
	return p
}

// Name is the name New was given.
func (p *Proc) Name() string { return p.name }

// Runs is how many times the program was started.
func (p *Proc) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

// LogPath is the file every run's output is appended to.
func (p *Proc) LogPath() string { return p.log }

// Start runs the program; it must not be running.
func (p *Proc) Start() {
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
	// first, and nothing but this process's pid is ever signalled.
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

// Kill sends SIGKILL (kill -9) and waits for the process to be gone. It
// does nothing when the process is not running.
func (p *Proc) Kill() { p.signal(syscall.SIGKILL, 0) }

// Stop sends SIGTERM and waits up to wait, then kills.
func (p *Proc) Stop(wait time.Duration) { p.signal(syscall.SIGTERM, wait) }

func (p *Proc) signal(sig syscall.Signal, wait time.Duration) {
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
	p.last = p.cmd.ProcessState
	p.cmd, p.done = nil, nil
}

// ExitCode is the exit code of the last run that Stop or Kill ended: -1
// when a signal ended it (Stop's wait ran out, or Kill) or before any.
func (p *Proc) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		return -1
	}
	return p.last.ExitCode()
}

// Exited reports whether the process ended on its own.
func (p *Proc) Exited() bool {
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

// Pid is the running process's id, 0 when it is not running.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// LogContains reports whether any run's output contains s.
func (p *Proc) LogContains(s string) bool {
	b, _ := os.ReadFile(p.log)
	return bytes.Contains(b, []byte(s))
}

// LogLines returns the lines of every run's output that contain s.
func (p *Proc) LogLines(s string) []string {
	b, _ := os.ReadFile(p.log)
	var out []string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, s) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// Tail is the last n lines of every run's output.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// BaseEnv is what every child process gets: nothing of the test's own
// GATE_* environment leaks in.
func BaseEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TZ=UTC"}
}

// Env is BaseEnv with vars added, in a stable order.
func Env(vars map[string]string) []string {
	env := BaseEnv()
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+vars[k])
	}
	return env
}

var probeClient = &http.Client{Timeout: 5 * time.Second}

// WaitReady waits until base+"/readyz" answers 200, for at most d, and
// returns how long that took. It fails the test, with the log's tail, when
// the process exits first or d passes.
func WaitReady(t testing.TB, p *Proc, base string, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if p.Exited() {
			t.Fatalf("%s exited before ready:\n%s", p.name, p.Tail(40))
		}
		resp, err := probeClient.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start)
			}
		}
		if time.Since(start) > d {
			t.Fatalf("%s ready: not within %s\n%s", p.name, d, p.Tail(40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
