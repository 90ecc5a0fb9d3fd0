package faulttest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// TestRedisClusterFailover runs two gates on a Redis Cluster of three
// masters with a replica each, and while they decide, fails every master
// over to its replica, one after the other (CLUSTER FAILOVER: what an
// operator does to patch or move a node). Each failover moves a third of
// the slots to another node under the gates' feet; their client follows
// the MOVED replies. Nothing may be lost or doubled, no recipient may get
// over a limit, and the gates must decide again within seconds.
func TestRedisClusterFailover(t *testing.T) {
	c := startRedisCluster(t)
	s, msgs, _, _ := standardRun(t, 12000, 1200, 0, stackOptions{RedisURL: c.url(), Env: map[string]string{"GATE_REDIS_CLUSTER": "true"}})
	gates := []*gateProc{s.startGate(nil), s.startGate(nil)}
	t0 := time.Now()
	wait := s.publishInBackground(msgs)
	var tm timing
	for _, replica := range c.replicas(t) {
		time.Sleep(300 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pending, _ := s.bus.inFlight(ctx)
		cancel()
		took := c.failover(t, replica)
		tm.add(fmt.Sprintf("failover to %s (%d messages not yet settled) took", replica, pending), took)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	c.awaitAgreed(t, "after the failovers")
	s.awaitDrained(2 * time.Minute)
	tm.add("published and drained in", time.Since(t0))
	var storeErrors float64
	for _, g := range gates {
		if g.logContains("CROSSSLOT") {
			t.Errorf("%s met CROSSSLOT:\n%s", g.name, tail(g.log, 20))
		}
		storeErrors += g.metric("gate_store_errors_total", `store="window"`)
	}
	t.Logf("window store errors during the failovers, both gates: %v batches retried", storeErrors)
	r := s.check(msgs, standardModel, gates[0])
	report(t, "redis cluster failover, two gates", r, tm)
}

// redisCluster is a throwaway Redis Cluster of three masters and three
// replicas on free loopback ports, gone with the test.
type redisCluster struct {
	addrs []string
}

func startRedisCluster(t *testing.T) *redisCluster {
	t.Helper()
	needServices(t)
	bin := needBinary(t, "redis-server")
	cli := needBinary(t, "redis-cli")
	c := &redisCluster{}
	for range 6 {
		port := strconv.Itoa(testenv.FreePort(t))
		addr := "127.0.0.1:" + port
		p := newProc(t, "redis-node-"+port, bin, []string{
			"--bind", "127.0.0.1", "--port", port, "--dir", t.TempDir(), "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0",
			"--daemonize", "no", "--protected-mode", "no",
		}, baseEnv())
		p.start()
		c.addrs = append(c.addrs, addr)
	}
	for _, a := range c.addrs {
		waitUntil(t, 20*time.Second, "cluster node answers PING on "+a, func() bool {
			n := c.node(a)
			defer n.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return n.Ping(ctx).Err() == nil
		})
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, c.addrs...), "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.awaitAgreed(t, "after create")
	return c
}

func (c *redisCluster) url() string {
	return "redis://" + c.addrs[0] + "?addr=" + strings.Join(c.addrs[1:], "&addr=")
}

// node is a client of one node, not of the cluster.
func (c *redisCluster) node(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
}

func (c *redisCluster) info(addr, section string) string {
	n := c.node(addr)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, _ := n.Info(ctx, section).Result()
	return s
}

// clusterInfo is CLUSTER INFO of one node (INFO's cluster section does not
// hold the state).
func (c *redisCluster) clusterInfo(addr string) string {
	n := c.node(addr)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, _ := n.ClusterInfo(ctx).Result()
	return s
}

// replicas lists the nodes that are replicas now.
func (c *redisCluster) replicas(t *testing.T) []string {
	var out []string
	for _, a := range c.addrs {
		if strings.Contains(c.info(a, "replication"), "role:slave") {
			out = append(out, a)
		}
	}
	if len(out) != 3 {
		t.Fatalf("%d replicas, want 3", len(out))
	}
	return out
}

// awaitAgreed waits until every node sees the same three masters and
// three replicas, none of them failing, has cluster_state:ok, and every
// replica's link to its master is up. A replica's own INFO says it is one
// as soon as it syncs, but its master ignores a failover request from a
// node it does not yet know as its replica, and the other masters refuse
// it their votes; so agreement on the cluster bus, not the replica's word,
// is what a failover needs.
func (c *redisCluster) awaitAgreed(t *testing.T, when string) {
	t.Helper()
	var why string
	defer func() {
		if t.Failed() {
			t.Logf("cluster %s: %s", when, why)
		}
	}()
	waitUntil(t, 30*time.Second, "every cluster node agrees on 3 masters and 3 replicas ("+when+")", func() bool {
		var first string
		for _, a := range c.addrs {
			if cl := c.clusterInfo(a); !strings.Contains(cl, "cluster_state:ok") {
				why = a + ": " + cl
				return false
			}
			view, err := c.roles(a)
			if err != nil {
				why = a + ": " + err.Error()
				return false
			}
			if first == "" {
				first = view
			} else if view != first {
				why = fmt.Sprintf("%s sees %s, %s sees %s", c.addrs[0], first, a, view)
				return false
			}
			repl := c.info(a, "replication")
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				why = a + ": " + repl
				return false
			}
		}
		return true
	})
}

// roles is one node's view of the cluster from CLUSTER NODES, as sorted
// "address role" pairs, or an error when it sees other than three masters
// and three replicas, or a node failing or not yet joined.
func (c *redisCluster) roles(addr string) (string, error) {
	n := c.node(addr)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := n.ClusterNodes(ctx).Result()
	if err != nil {
		return "", err
	}
	var view []string
	count := map[string]int{}
	for line := range strings.Lines(strings.TrimSpace(out)) {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		flags := f[2]
		for _, bad := range []string{"fail", "handshake", "noaddr"} {
			if strings.Contains(flags, bad) {
				return "", fmt.Errorf("node %s is %s", f[1], flags)
			}
		}
		role := "master"
		if strings.Contains(flags, "slave") {
			role = "slave"
		}
		count[role]++
		view = append(view, strings.SplitN(f[1], "@", 2)[0]+" "+role)
	}
	if count["master"] != 3 || count["slave"] != 3 {
		return "", fmt.Errorf("sees %d masters and %d replicas", count["master"], count["slave"])
	}
	slices.Sort(view)
	return strings.Join(view, ", "), nil
}

// failover promotes replica with CLUSTER FAILOVER, which waits for it to
// catch up with its master first, and returns once it is master and its
// cluster state ok. (The other nodes learn of it by gossip within about a
// second; the next failover, of another shard, does not wait for that.) A
// manual failover that is not done within 5 s is aborted by the
// replica itself (CLUSTER_MF_TIMEOUT); like an operator, the test then asks
// again, up to three times, and says so.
func (c *redisCluster) failover(t *testing.T, replica string) time.Duration {
	t.Helper()
	n := c.node(replica)
	defer n.Close()
	start := time.Now()
	promoted := func() bool {
		return strings.Contains(c.info(replica, "replication"), "role:master") &&
			strings.Contains(c.clusterInfo(replica), "cluster_state:ok")
	}
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := n.ClusterFailover(ctx).Err()
		cancel()
		if err != nil {
			t.Fatalf("CLUSTER FAILOVER on %s: %v", replica, err)
		}
		deadline := time.Now().Add(8 * time.Second)
		for !promoted() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if promoted() {
			break
		}
		view, err := c.roles(replica)
		if attempt == 3 {
			t.Fatalf("CLUSTER FAILOVER on %s: still a replica after %d attempts; its view: %s %v", replica, attempt, view, err)
		}
		t.Logf("CLUSTER FAILOVER on %s: not promoted within 8s (attempt %d), asking again; its view: %s %v", replica, attempt, view, err)
	}
	return time.Since(start)
}
