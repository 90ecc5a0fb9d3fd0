package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/redis/go-redis/v9"
)

// TestRedisClusterFailover runs two gates on a Redis Cluster of three
// masters with a replica each, and while they decide, fails every master
// over to its replica, one after the other (CLUSTER FAILOVER: what an
// operator does to patch or move a node). Each failover moves a third of
// the slots to another node under the gates' feet; their client follows
// the MOVED replies. Asserted: every failover completes (the three former
// replicas are the masters after, and the whole cluster agrees); no message
// is retried for anything but a batch that outlasted GATE_STORE_TIMEOUT (a
// manual failover loses nothing and refuses nothing, so a loaded machine's
// slowness is the only excuse); and the ledger balances with exact counts:
// nothing lost or doubled, every recipient admitted exactly what its limits
// allow. How long each failover took is logged, not asserted (the machine
// is shared).
func TestRedisClusterFailover(t *testing.T) {
	c := startRedisCluster(t)
	s, msgs, _, _ := standardRun(t, 12000, 1200, 0, stackOptions{RedisURL: c.url(), Env: map[string]string{"GATE_REDIS_CLUSTER": "true"}})
	gates := []*gateProc{s.startGate(nil), s.startGate(nil)}
	t0 := time.Now()
	wait := s.publishInBackground(msgs)
	var tm timing
	replicas := c.replicas(t)
	for _, replica := range replicas {
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
	if got := c.masters(t); !slices.Equal(got, replicas) {
		t.Errorf("masters after the failovers: %v, want the former replicas %v", got, replicas)
	}
	s.awaitDrained(2 * time.Minute)
	tm.add("published and drained in", time.Since(t0))
	for _, g := range gates {
		g.clusterRetriesOnlyTimeouts()
	}
	r := s.check(msgs, standardModel, gates[0])
	if r.Unchecked != 0 {
		t.Errorf("%d messages forwarded unchecked: no scene of the model fails open", r.Unchecked)
	}
	report(t, "redis cluster failover, two gates", r, tm)
}

// TestRedisClusterMasterKilled runs two gates on a Redis Cluster of three
// masters with a replica each and, while they decide, kills one master with
// SIGKILL: no manual failover. Its slots go unanswered until the cluster
// promotes its replica (cluster-node-timeout, 2 s here, then an election);
// meanwhile every batch holding a recipient of those slots fails, and its
// messages wait and are retried, as when Redis is down. Asserted: the
// cluster promotes the replica; the gates stay up, ready, and decide every
// message soon after the promotion (within a generous 30 s: the client must
// learn the new slot map, not wait for its periodic reload, a minute in
// go-redis by default); the batches did meet the loss (window store
// errors); the ledger balances: nothing lost, nothing doubled. Admissions the master had not yet
// replicated are lost with it (docs/operating.md), so a recipient of its slots may get
// a message over a limit for each (one, or as many as it had forwarded in
// the 2 s before the kill); every other recipient's counts stay exact. The
// killed node is then started again and rejoins as a replica.
func TestRedisClusterMasterKilled(t *testing.T) {
	c := startRedisCluster(t)
	s, msgs, _, _ := standardRun(t, 12000, 1200, 0, stackOptions{RedisURL: c.url(), Env: map[string]string{"GATE_REDIS_CLUSTER": "true"}})
	gates := []*gateProc{s.startGate(nil), s.startGate(nil)}
	replica := c.replicas(t)[0]
	master := c.masterOf(t, replica)
	lost := c.recipientsServedBy(t, master, recipients(msgs))
	sum := func(name string, labels ...string) (n float64) {
		for _, g := range gates {
			n += g.metric(name, labels...)
		}
		return n
	}
	var tm timing
	t0 := time.Now()
	wait := s.publishInBackground(msgs)
	// Kill it mid-stream: most messages are still to be decided.
	waitUntil(t, 2*time.Minute, "a quarter of the messages decided", func() bool {
		return sum("gate_decisions_total") >= float64(len(msgs)/4)
	})
	errsBefore, decidedBefore := sum("gate_store_errors_total", `store="window"`), sum("gate_decisions_total")
	c.proc(master).Kill()
	tKill := time.Now()
	tm.add("kill -9 of master "+master+": replica promoted by the cluster in",
		waitUntil(t, 2*time.Minute, replica+" promoted by the cluster", func() bool { return c.promoted(replica) }))
	decidedMeanwhile := sum("gate_decisions_total") - decidedBefore
	tPromoted := time.Now()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	// The gates follow the promotion: once it is done, what is left takes
	// retry delays to decide, not a minute of dialling the dead node until
	// the client's periodic reload of the slot map.
	waitUntil(t, 30*time.Second, "every message decided within 30s of the promotion and the last publish", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n, err := s.bus.inFlight(ctx)
		return err == nil && n == 0
	})
	tm.add("every message decided after the kill in", time.Since(tKill))
	tm.add("after the promotion in", time.Since(tPromoted))
	tm.add("published and drained in", time.Since(t0))
	for _, g := range gates {
		if !g.alive() {
			t.Fatalf("%s did not survive the loss of a master:\n%s", g.name, g.Tail(40))
		}
		g.waitReady(time.Minute)
		t.Logf("%s: messages retried, by cause: %v", g.name, retryCauses(g))
	}
	if sum("gate_store_errors_total", `store="window"`) == errsBefore {
		t.Error("no window store error after the kill: no batch met the lost slots, the scenario did not test their loss")
	}
	// What the master had not replicated when it died is lost: at most the
	// admissions of its recipients' messages forwarded in the moments
	// before the kill (at least one each: a replica that kept up loses the
	// last). A replica starved of CPU can lag by several batches, so a
	// recipient may lose more than one.
	recent := forwardsNear(s, msgs, tKill, 2*time.Second, time.Second)
	r := s.checkWith(msgs, standardModel, gates[0], ledgerOptions{overLimit: func(to string) int {
		if lost[to] {
			return max(1, recent[to])
		}
		return 0
	}})
	t.Logf("%d of %d recipients were served by the killed master; %d got a message over a limit; %v messages decided between the kill and the promotion",
		len(lost), len(recipients(msgs)), r.OverLimit, decidedMeanwhile)

	// The killed node comes back as a replica of the one that replaced it.
	c.proc(master).Start()
	c.awaitAgreed(t, "after the killed master rejoined")
	if got := c.masterOf(t, master); got != replica {
		t.Errorf("the restarted node replicates %s, want %s, promoted in its place", got, replica)
	}
	report(t, "redis cluster master killed, two gates", r, tm)
}

// retryCauses counts the messages a gate handed back for a retry, by the
// error it logged, ids and addresses left in.
func retryCauses(g *gateProc) map[string]int {
	out := map[string]int{}
	for _, line := range g.LogLines(`msg="message not decided, will retry"`) {
		_, cause, _ := strings.Cut(line, " err=")
		out[cause]++
	}
	return out
}

// redisCluster is a throwaway Redis Cluster of three masters and three
// replicas on free loopback ports, gone with the test.
type redisCluster struct {
	addrs []string
	procs []*proc // the redis-server of each address
}

func startRedisCluster(t *testing.T) *redisCluster {
	t.Helper()
	needServices(t)
	bin := needBinary(t, "redis-server")
	cli := needBinary(t, "redis-cli")
	c := &redisCluster{}
	for range 6 {
		port := strconv.Itoa(testenv.FreeClusterPort(t))
		addr := "127.0.0.1:" + port
		p := newProc(t, "redis-node-"+port, bin, []string{
			"--bind", "127.0.0.1", "--port", port, "--dir", t.TempDir(), "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0",
			"--daemonize", "no", "--protected-mode", "no",
		}, baseEnv())
		p.Start()
		c.addrs = append(c.addrs, addr)
		c.procs = append(c.procs, p)
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
func (c *redisCluster) replicas(t *testing.T) []string { return c.withRole(t, "slave") }

// masters lists the nodes that are masters now.
func (c *redisCluster) masters(t *testing.T) []string { return c.withRole(t, "master") }

// withRole lists the three nodes whose INFO says role, in address order.
func (c *redisCluster) withRole(t *testing.T, role string) []string {
	t.Helper()
	var out []string
	for _, a := range c.addrs {
		if strings.Contains(c.info(a, "replication"), "role:"+role) {
			out = append(out, a)
		}
	}
	if len(out) != 3 {
		t.Fatalf("%d nodes say role:%s, want 3", len(out), role)
	}
	return out
}

// proc is the redis-server process of the node at addr.
func (c *redisCluster) proc(addr string) *proc { return c.procs[slices.Index(c.addrs, addr)] }

// masterOf is the address of the master that replica replicates.
func (c *redisCluster) masterOf(t *testing.T, replica string) string {
	t.Helper()
	var host, port string
	for line := range strings.Lines(c.info(replica, "replication")) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "master_host:"); ok {
			host = v
		}
		if v, ok := strings.CutPrefix(line, "master_port:"); ok {
			port = v
		}
	}
	if host == "" || port == "" {
		t.Fatalf("%s names no master in INFO replication", replica)
	}
	return host + ":" + port
}

// promoted reports whether replica is now a master that serves its slots.
func (c *redisCluster) promoted(replica string) bool {
	return strings.Contains(c.info(replica, "replication"), "role:master") &&
		strings.Contains(c.clusterInfo(replica), "cluster_state:ok")
}

// recipientsServedBy returns the recipients (a message's To) whose windows
// live in the slots master serves: the gate keys every window of a
// recipient by one hash tag, so its slot is that of any of them.
func (c *redisCluster) recipientsServedBy(t *testing.T, master string, tos []string) map[string]bool {
	t.Helper()
	n := c.node(master)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shards, err := n.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	keys := keyNames(t)
	pipe := n.Pipeline()
	slots := make([]*redis.IntCmd, len(tos))
	for i, to := range tos {
		slots[i] = pipe.ClusterKeySlot(ctx, keys.CapKey(message{To: to}.recipient()))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	out := map[string]bool{}
	for i, to := range tos {
		slot := slots[i].Val()
		for _, sh := range shards {
			if !servesAsMaster(sh, master) {
				continue
			}
			for _, r := range sh.Slots {
				if r.Start <= slot && slot <= r.End {
					out[to] = true
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no recipient of the run lives on %s: %v", master, shards)
	}
	return out
}

// servesAsMaster reports whether addr (host:port) is the master of sh.
func servesAsMaster(sh redis.ClusterShard, addr string) bool {
	for _, n := range sh.Nodes {
		if n.Role == "master" && net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)) == addr {
			return true
		}
	}
	return false
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
	promoted := func() bool { return c.promoted(replica) }
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

// forwardsNear counts, per recipient, the messages GATE_OUT stored from
// before ahead of at to after past it.
func forwardsNear(s *stack, msgs []message, at time.Time, before, after time.Duration) map[string]int {
	to := make(map[string]string, len(msgs))
	for _, m := range msgs {
		to[m.ID] = m.To
	}
	n := map[string]int{}
	for _, o := range s.bus.read(natsbus.StreamOut) {
		if o.Time.Before(at.Add(-before)) || o.Time.After(at.Add(after)) {
			continue
		}
		var env struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(o.Data, &env) == nil && to[env.ID] != "" {
			n[to[env.ID]]++
		}
	}
	return n
}
