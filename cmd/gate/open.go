package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/inmem"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/redact"
	"github.com/antifatigue/gate/internal/redisstore"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// The opening of gate serve's dependencies: the window store, the audit
// store and NATS, each waited for while it is not up yet, and closed in
// reverse order at shutdown.

func openWindowStore(c *config, now func() time.Time, closers *closeStack) (gate.WindowStore, string, error) {
	if c.RedisURL == "" {
		return inmem.New(inmem.Options{Now: now}), "in-process (GATE_REDIS_URL unset)", nil
	}
	var client redis.UniversalClient
	if c.RedisCluster {
		o, err := redis.ParseClusterURL(c.RedisURL)
		if err != nil {
			return nil, "", fmt.Errorf("GATE_REDIS_URL: %w", err)
		}
		o.ContextTimeoutEnabled = true // GATE_STORE_TIMEOUT bounds every call
		// A master lost without a failover fails dials, not MOVED, and go-redis
		// reloads its slot map on MOVED or every ClusterStateReloadInterval
		// (60s by default): until then it dials the dead node although its
		// replica serves the slots. A reload is one CLUSTER SLOTS; each second
		// is cheap and keeps the stall to the promotion itself.
		o.ClusterStateReloadInterval = time.Second
		client = redis.NewClusterClient(o)
	} else {
		o, err := redis.ParseURL(c.RedisURL)
		if err != nil {
			return nil, "", fmt.Errorf("GATE_REDIS_URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		client = redis.NewClient(o)
	}
	closers.push("redis", client.Close)
	s, err := redisstore.New(client, redisstore.Options{Timeout: c.StoreTimeout, Now: now, LegacyKeys: c.RedisLegacyKeys})
	if err != nil {
		return nil, "", err
	}
	kind := "redis"
	if c.RedisCluster {
		kind = "redis cluster"
	}
	return s, kind + " " + redact.URL(c.RedisURL), nil
}

func openAudit(ctx context.Context, c *config, log *slog.Logger, closers *closeStack) (*gormstore.Store, string, error) {
	opts := gormstore.Options{
		DatabaseURL: c.DatabaseURL, SQLitePath: filepath.Join(c.DataDir, "gate.db"),
		RedactPayload: c.RedactPayload, Logger: log, LedgerRetention: c.LedgerRetention,
		PartitionWidth: c.PartitionWidth, PruneInterval: c.PruneInterval,
	}
	name := "sqlite " + opts.SQLitePath + " (GATE_DATABASE_URL unset)"
	if c.DatabaseURL != "" {
		name = "postgres " + redact.URL(c.DatabaseURL)
	}
	var st *gormstore.Store
	err := retryStart(ctx, log, "audit store", func() error {
		var err error
		st, err = gormstore.Open(ctx, opts)
		return err
	}, func(err error) bool { return errors.Is(err, gate.ErrUnavailable) })
	if err != nil {
		return nil, "", err
	}
	closers.push("audit store", st.Close)
	return st, name, nil
}

func openNATS(ctx context.Context, c *config, log *slog.Logger, closers *closeStack) (*nats.Conn, string, error) {
	url, name := c.NATSURL, "nats "+redact.URL(c.NATSURL)
	var auth []nats.Option
	if url == "" {
		gate, sender := c.embeddedUsers()
		password, err := gate.password(c.DataDir, log)
		if err != nil {
			return nil, "", err
		}
		senderPassword, err := sender.password(c.DataDir, log)
		if err != nil {
			return nil, "", err
		}
		ns, err := natsbus.StartEmbedded(natsbus.EmbeddedOptions{
			Addr: c.EmbeddedNATSAddr, StoreDir: filepath.Join(c.DataDir, "nats"), GatePassword: password, SenderPassword: senderPassword,
			InSubject: c.InSubject, CheckSubject: c.CheckSubject, OutSubject: c.OutSubject, RefundSubject: c.RefundSubject,
		})
		if err != nil {
			return nil, "", err
		}
		closers.push("embedded nats", func() error { ns.Shutdown(); ns.WaitForShutdown(); return nil })
		url, name = ns.ClientURL(), "embedded nats-server on "+c.EmbeddedNATSAddr+" (GATE_NATS_URL unset)"
		auth = natsbus.EmbeddedGate(password)
	}
	var nc *nats.Conn
	err := retryStart(ctx, log, "nats", func() error {
		var err error
		nc, err = natsbus.Connect(url, "gate", log, auth...)
		return err
	}, func(err error) bool { return !errors.Is(err, nats.ErrBadSubject) })
	if err != nil {
		return nil, "", err
	}
	closers.push("nats", func() error { return drainConn(nc, natsDrainWait) })
	return nc, name, nil
}

// natsDrainWait bounds how long closing waits for the connection's drain.
const natsDrainWait = 10 * time.Second

// drainConn drains nc and waits until it is closed, at most wait: Drain
// only starts the drain, and a process that exits before it ends loses the
// acks still in the connection's buffer, leaving messages it handled to be
// redelivered after the ack wait.
func drainConn(nc *nats.Conn, wait time.Duration) error {
	if err := nc.Drain(); err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	for !nc.IsClosed() {
		if time.Now().After(deadline) {
			return fmt.Errorf("nats: the drain did not end within %v; unflushed acks will be redelivered", wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// retryStart retries a dependency that is not up yet, so the gate can
// start before its services do. It gives up when ctx ends, and at once on an
// error that waiting cannot fix (a bad URL, a failed migration).
func retryStart(ctx context.Context, log *slog.Logger, what string, f func() error, transient func(error) bool) error {
	delay := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil {
			return nil
		}
		if !transient(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("waiting for "+what, "attempt", attempt, "err", err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s unavailable at start: %w", what, err)
		case <-t.C:
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// closeStack closes resources in reverse order of opening.
type closeStack struct {
	names []string
	fns   []func() error
}

func (c *closeStack) push(name string, f func() error) {
	c.names = append(c.names, name)
	c.fns = append(c.fns, f)
}

func (c *closeStack) closeAll(log *slog.Logger) {
	for i := len(c.fns) - 1; i >= 0; i-- {
		if err := c.fns[i](); err != nil {
			log.Warn("close", "what", c.names[i], "err", err)
		}
	}
}
