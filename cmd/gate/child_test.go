package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// childEnv, set in a child's environment, makes the test binary run
// `gate serve` instead of the tests: a gate the test can kill with SIGKILL,
// which a gate running inside the test process cannot be.
const childEnv = "GATE_E2E_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "serve" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := run(ctx, []string{"serve"}, os.Getenv, nil, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "gate:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childGate is `gate serve` in a process of its own (the test binary run
// again), on e's environment; kill ends it with SIGKILL, start runs it
// again with the same settings. Its gateProc answers the API helpers.
type childGate struct {
	*gateProc
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	runs int
}

// startChild runs a gate process with e's environment plus extra and waits
// until /readyz answers 200.
func (e *env) startChild(extra map[string]string) *childGate {
	t := e.t
	t.Helper()
	vars := e.settings(extra)
	c := &childGate{
		gateProc: &gateProc{t: t, base: "http://" + vars["GATE_HTTP_ADDR"], log: &lockedBuffer{}, env: e, vars: vars},
		logPath:  filepath.Join(t.TempDir(), "gate.log"),
	}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			b, _ := os.ReadFile(c.logPath)
			t.Logf("child gate log:\n%s", b)
		}
	})
	c.start()
	return c
}

// start runs the process (it must not be running) and waits until it is
// ready.
func (c *childGate) start() {
	t := c.t
	t.Helper()
	c.mu.Lock()
	if c.cmd != nil {
		c.mu.Unlock()
		t.Fatal("child gate started twice")
	}
	f, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.mu.Unlock()
		t.Fatal(err)
	}
	c.runs++
	fmt.Fprintf(f, "---- run %d at %s\n", c.runs, time.Now().Format(time.RFC3339Nano))
	// Only what the gate needs: nothing of the test's own GATE_* settings.
	env := []string{childEnv + "=serve", "PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TZ=UTC"}
	for k, v := range c.vars {
		env = append(env, k+"="+v)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env, cmd.Stdout, cmd.Stderr = env, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		c.mu.Unlock()
		t.Fatalf("start child gate: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	c.cmd, c.done = cmd, done
	c.mu.Unlock()

	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(c.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-done:
			b, _ := os.ReadFile(c.logPath)
			t.Fatalf("child gate exited before ready:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("child gate not ready after 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone; it does nothing
// when the process is not running.
func (c *childGate) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Kill()
	<-c.done
	c.cmd, c.done = nil, nil
}
