package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/gateproc"
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
// again, through gateproc), on e's environment; kill ends it with SIGKILL,
// start runs it again with the same settings. Its gateProc answers the API
// helpers.
type childGate struct {
	*gateProc
	proc *gateproc.Proc
}

// startChild runs a gate process with e's environment plus extra and waits
// until /readyz answers 200.
func (e *env) startChild(extra map[string]string) *childGate {
	t := e.t
	t.Helper()
	vars := e.settings(extra)
	c := &childGate{
		gateProc: &gateProc{t: t, base: "http://" + vars["GATE_HTTP_ADDR"], log: &lockedBuffer{}, env: e, vars: vars},
		// Only what the gate needs: nothing of the test's own GATE_* settings.
		proc: gateproc.New(t, "child gate", os.Args[0], nil, append(gateproc.Env(vars), childEnv+"=serve")),
	}
	c.start()
	return c
}

// start runs the process (it must not be running) and waits until it is
// ready.
func (c *childGate) start() {
	c.t.Helper()
	c.proc.Start()
	gateproc.WaitReady(c.t, c.proc, c.base, 60*time.Second)
}

// kill sends SIGKILL and waits for the process to be gone; it does nothing
// when the process is not running.
func (c *childGate) kill() { c.proc.Kill() }
