package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// proc is a child process: the nats-server or the gate.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan error
	log  string // where its output goes
	url  string // the gate's HTTP base URL
}

func start(name, logPath string, env []string, bin string, args ...string) (*proc, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan error, 1), log: logPath}
	go func() { p.done <- cmd.Wait(); out.Close() }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits; after 15 s it kills.
func (p *proc) stop() error {
	if p == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("%s exited with %v (log: %s)", p.name, exit, p.log)
		}
		return nil
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 15s; killed (log: %s)", p.name, p.log)
	}
}

// exited reports an early exit, with the end of the process's log.
func (p *proc) exited() error {
	select {
	case err := <-p.done:
		p.done <- err
		tail, _ := os.ReadFile(p.log)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("%s exited: %v\n%s", p.name, err, tail)
	default:
		return nil
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startNATS runs nats-server with JetStream as a process of its own, so its
// CPU time is its own and the gate's runtime does not share it.
func startNATS(ctx context.Context, bin, dir string) (*proc, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	p, err := start("nats-server", filepath.Join(dir, "nats-server.log"), os.Environ(), bin,
		"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "jetstream"))
	if err != nil {
		return nil, "", err
	}
	u := fmt.Sprintf("nats://127.0.0.1:%d", port)
	for deadline := time.Now().Add(15 * time.Second); ; {
		nc, err := nats.Connect(u)
		if err == nil {
			nc.Close()
			return p, u, nil
		}
		if e := p.exited(); e != nil {
			return nil, "", e
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = p.stop()
			return nil, "", fmt.Errorf("nats-server on %s not ready: %w", u, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gateEnv is the environment of the gate under test.
type gateEnv struct {
	natsURL, redisURL, databaseURL, rulesPath, dataDir string
	extra                                              []string // more KEY=VALUE settings
}

// startGate runs `gate serve` and waits until /readyz answers 200.
func startGate(ctx context.Context, bin, dir string, e gateEnv) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	env := append(os.Environ(),
		"GATE_NATS_URL="+e.natsURL, "GATE_REDIS_URL="+e.redisURL, "GATE_DATABASE_URL="+e.databaseURL,
		"GATE_RULES="+e.rulesPath, "GATE_DATA_DIR="+e.dataDir, "GATE_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"GATE_LOG_LEVEL=warn")
	env = append(env, e.extra...)
	p, err := start("gate", filepath.Join(dir, "gate.log"), env, bin, "serve")
	if err != nil {
		return nil, err
	}
	ready := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.url = fmt.Sprintf("http://127.0.0.1:%d", port)
				return p, nil
			}
		}
		if e := p.exited(); e != nil {
			return nil, e
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = p.stop()
			return nil, fmt.Errorf("gate not ready within 30s (log: %s)", p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newRedis returns a client of the shared Redis, with context deadlines on
// (the window store requires it).
func newRedis(rawURL string) (*redis.Client, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	o.ContextTimeoutEnabled = true
	return redis.NewClient(o), nil
}

// deleteKeys unlinks every key matching pattern, and only those: the Redis
// is shared, so nothing is ever flushed.
func deleteKeys(ctx context.Context, c *redis.Client, pattern string) (int, error) {
	n := 0
	iter := c.Scan(ctx, 0, pattern, 5000).Iterator()
	batch := make([]string, 0, 1000)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := c.Unlink(ctx, batch...).Err(); err != nil {
			return fmt.Errorf("unlink: %w", err)
		}
		n += len(batch)
		batch = batch[:0]
		return nil
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return n, fmt.Errorf("scan %s: %w", pattern, err)
	}
	return n, flush()
}

// redisInfo returns one field of INFO section.
func redisInfo(ctx context.Context, c *redis.Client, section, field string) (string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", fmt.Errorf("redis info %s: %w", section, err)
	}
	for line := range strings.SplitSeq(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("redis info %s: no field %s", section, field)
}

func redisInt(ctx context.Context, c *redis.Client, section, field string) (int64, error) {
	v, err := redisInfo(ctx, c, section, field)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("redis info %s: %w", field, err)
	}
	return n, nil
}
