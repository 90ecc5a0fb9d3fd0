package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsCluster is a JetStream cluster of nats-server processes on loopback,
// for the scale measure: each a process of its own, so that each one's CPU
// is its own.
type natsCluster struct {
	procs []*proc
	urls  []string // client URLs, one per server
}

// startNATSCluster starts n servers routed to each other and waits until
// JetStream answers (the cluster has elected its meta leader).
func startNATSCluster(ctx context.Context, bin, dir string, n int) (*natsCluster, error) {
	client, routes := make([]int, n), make([]string, n)
	for i := range n {
		var err error
		if client[i], err = freePort(); err != nil {
			return nil, err
		}
		rp, err := freePort()
		if err != nil {
			return nil, err
		}
		routes[i] = "nats://127.0.0.1:" + strconv.Itoa(rp)
	}
	cl := &natsCluster{}
	for i := range n {
		name := fmt.Sprintf("gatebench-n%d", i+1)
		p, err := start(name, filepath.Join(dir, name+".log"), os.Environ(), bin,
			"-a", "127.0.0.1", "-p", strconv.Itoa(client[i]), "-n", name, "-js", "-sd", filepath.Join(dir, name),
			"--cluster_name", "gatebench", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		if err != nil {
			cl.stop()
			return nil, err
		}
		cl.procs = append(cl.procs, p)
		cl.urls = append(cl.urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := cl.ready(ctx)
		if err == nil {
			return cl, nil
		}
		for _, p := range cl.procs {
			if e := p.exited(); e != nil {
				cl.stop()
				return nil, e
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cl.stop()
			return nil, fmt.Errorf("nats cluster not ready within 60s: %w", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ready is nil once every server takes clients and JetStream answers on
// each.
func (cl *natsCluster) ready(ctx context.Context) error {
	for _, u := range cl.urls {
		nc, err := nats.Connect(u, nats.Timeout(2*time.Second))
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = js.AccountInfo(actx)
			cancel()
		}
		nc.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", u, err)
		}
	}
	return nil
}

func (cl *natsCluster) pids() []int {
	pids := make([]int, len(cl.procs))
	for i, p := range cl.procs {
		pids[i] = p.pid()
	}
	return pids
}

func (cl *natsCluster) stop() {
	for _, p := range cl.procs {
		_ = p.stop()
	}
}
