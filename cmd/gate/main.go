// Command gate is the notification anti-fatigue gate: it reads Feishu-style
// messages from NATS JetStream, applies per-recipient, per-scene sliding
// window limits, and forwards, suppresses (with an audit row) or drops each
// one. It is the only package that reads the environment and names the
// adapters.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	// Rule documents and messages name IANA time zones; embedding the zone
	// database (about 450 KB) lets a gate on a host or image without
	// /usr/share/zoneinfo load them. A host's own database is used first.
	_ "time/tzdata"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "gate:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "gate:", err)
		os.Exit(1)
	}
}

const usage = `gate: the notification anti-fatigue gate

Usage:
  gate serve [flags]            run the gate (flags or GATE_* variables; see gate serve -h)
  gate rules check|push|diff|preview FILE|DIR
                                validate a rule document; push it to Nacos, or diff against Nacos;
                                preview what it would have decided of a running gate's decisions
  gate report [summary|suppressions] [flags]
                                print reports from a running gate (table, json or csv)
  gate explain --to TYPE:ID --scene SCENE [flags]
                                why a message would be held back now, and when the next one would go out
  gate publish [flags]          publish a test message to gate.in
  gate version                  print the version
`

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// run is the whole program, with its environment passed in so tests can
// call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &usageError{"no command given"}
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], getenv, stdout, stderr)
	case "rules":
		return rulesCmd(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "report":
		return report(ctx, args[1:], getenv, stdout, stderr)
	case "publish":
		return publish(ctx, args[1:], getenv, stdin, stdout, stderr)
	case "explain":
		return explain(ctx, args[1:], getenv, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, version())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return &usageError{fmt.Sprintf("unknown command %q", args[0])}
}
