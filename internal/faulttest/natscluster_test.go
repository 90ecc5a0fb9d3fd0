package faulttest

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/gateproc"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNATSClusterLeadersKilled runs three gates on a JetStream cluster of
// three nats-server processes, with every stream at three replicas
// (GATE_STREAM_REPLICAS=3): gate-1 is given node 1's URL only, gate-2 node
// 2's, gate-3 the whole list. While messages flow at a steady 600/s it
// kills -9 the node leading GATE_IN, starts it again and waits until every
// stream and consumer is whole (a leader, both replicas current), then does
// the same to the node leading GATE_OUT. Asserted: the streams are R3 (an
// R1 GATE_IN on the killed node would stop the gates until it came back);
// each gate logs the server it connected to; the gates stay up and ready;
// and the ledger balances as in every fault scenario: one outcome per
// message, nothing forwarded twice, nobody over a limit. How long deciding
// stopped at each kill (the longest gap between two rises of the decided
// count, from the kill until the cluster is whole again), and acking (the
// same of GATE_IN's acked count: a forward is acked once GATE_OUT stored
// it) is logged, not asserted: it is the cluster's leader election, a few
// seconds, and the machine is shared.
func TestNATSClusterLeadersKilled(t *testing.T) {
	needServices(t)
	tSetup := time.Now()
	c := startNATSCluster(t, 3)
	sc := scaleFor(t, 36000, 3600, 2)
	rng := sc.rng()
	s := newStack(t, stackOptions{RedisURL: startRedis(t).url(), Rules: standardModel, NATSURL: c.url(),
		Env: map[string]string{"GATE_STREAM_REPLICAS": "3"}})
	msgs := workload(rng, sc.Messages, sc.Recipients, standardMix, 97)
	var tm timing
	tm.add("built and services started in", time.Since(tSetup))
	t0 := time.Now()
	gates := []*gateProc{
		s.startGate(map[string]string{"GATE_NATS_URL": c.nodes[0].url()}),
		s.startGate(map[string]string{"GATE_NATS_URL": c.nodes[1].url()}),
		s.startGate(nil), // the whole list
	}
	tm.add("cluster formed and three gates ready in", time.Since(t0))
	for _, g := range gates {
		if !g.LogContains(`msg="nats connected" server=node-`) {
			t.Errorf("%s does not log the NATS server it connected to:\n%s", g.name, g.Tail(20))
		}
	}
	c.wantReplicas(t, s.bus.js, 3)

	// Two counts: decided (committed, a suppression as soon as its row
	// is written; a forward is committed before it is published) and
	// done (acked on GATE_IN, a forward only once GATE_OUT stored it).
	watch := watchCount(t, gates[2].received)
	acked := watchCount(t, s.bus.acked)
	stop := make(chan struct{})
	wait := s.publishPaced(msgs, 600, stop)
	tStart := time.Now()
	for k, stream := range []string{natsbus.StreamIn, natsbus.StreamOut} {
		// Mid-stream: a few seconds of traffic decided since the start
		// or since the cluster healed.
		from := watch.last()
		waitUntil(t, time.Minute, fmt.Sprintf("1,500 more messages decided before kill %d", k+1), func() bool { return watch.last() >= from+1500 })
		leader := c.leaderOf(t, s.bus.js, stream)
		node := c.node(leader)
		node.Kill()
		tKill := time.Now()
		elected := c.waitLeader(t, s.bus.js, stream, leader)
		time.Sleep(500 * time.Millisecond) // down a moment more, as a crash would be
		node.start()
		c.waitWhole(t, s.bus.js)
		tWhole := time.Now()
		stall, ackStall := watch.longestStall(tKill, tWhole), acked.longestStall(tKill, tWhole)
		t.Logf("STALL kill %d: %s leader %s killed: %s elected after %s; deciding stopped for at most %s, acking (every effect done) for at most %s; whole again %s after the kill",
			k+1, stream, leader, stream, elected.Round(10*time.Millisecond), stall.Round(10*time.Millisecond),
			ackStall.Round(10*time.Millisecond), tWhole.Sub(tKill).Round(10*time.Millisecond))
		tm.add(fmt.Sprintf("kill -9 of the %s leader (%s): deciding stopped for at most", stream, leader), stall)
		tm.add("acking for at most", ackStall)
	}
	// A little traffic on the healed cluster, then the publisher stops
	// starting messages and finishes those it started.
	time.Sleep(2 * time.Second)
	close(stop)
	n, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	msgs = msgs[:n]
	tm.add(fmt.Sprintf("%d messages published over", n), time.Since(tStart))
	if n == sc.Messages {
		t.Errorf("the publisher ran out of messages (%d) before the second kill was healed: the kills were not mid-stream", n)
	}
	tm.add("drained after the last kill in", s.awaitDrained(2*time.Minute))
	for _, g := range gates {
		if !g.alive() {
			t.Fatalf("%s did not survive the leader kills:\n%s", g.name, g.Tail(40))
		}
		g.waitReady(time.Minute)
		t.Logf("%s: %d reconnects logged, messages retried by cause: %v", g.name, len(g.LogLines(`msg="nats reconnected"`)), retryKinds(g))
	}
	watch.stop()
	acked.stop()
	tCheck := time.Now()
	r := s.check(msgs, standardModel, gates[2])
	tm.add("ledger checked in", time.Since(tCheck))
	if r.Unchecked != 0 {
		t.Errorf("%d messages forwarded unchecked: no scene of the model fails open", r.Unchecked)
	}
	report(t, "nats cluster, stream leaders killed, three gates", r, tm)
}

// retryKinds counts the messages a gate handed back for a retry, by the
// kind of error it logged: retryCauses without the message ids and
// addresses, which make every line a cause of its own.
func retryKinds(g *gateProc) map[string]int {
	out := map[string]int{}
	for cause, n := range retryCauses(g) {
		out[retryNoise.ReplaceAllString(cause, "…")] += n
	}
	return out
}

var retryNoise = regexp.MustCompile(`forward \S+:|\d+\.\d+\.\d+\.\d+:\d+`)

// natsCluster is a JetStream cluster of nats-server processes on loopback,
// each storing its streams on disk so that a kill -9 and a restart keep
// them.
type natsCluster struct {
	nodes []*natsServer
	names []string
}

// startNATSCluster starts n nodes (named node-1, …) routed to each other,
// without waiting for their JetStream meta leader: the gates wait for it.
func startNATSCluster(t *testing.T, n int) *natsCluster {
	t.Helper()
	bin := gateproc.Build(t, "nats-server", natsServerPackage)
	var routes []string
	cports := make([]int, n)
	for i := range cports {
		cports[i] = testenv.FreePort(t)
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cports[i]))
	}
	c := &natsCluster{}
	for i := range n {
		port := strconv.Itoa(testenv.FreePort(t))
		name := fmt.Sprintf("node-%d", i+1)
		node := &natsServer{addr: "127.0.0.1:" + port, proc: newProc(t, "nats-"+name, bin, []string{
			"-a", "127.0.0.1", "-p", port, "-js", "-sd", t.TempDir(), "--server_name", name,
			"--cluster_name", "fault", "--cluster", routes[i], "--routes", strings.Join(routes, ","),
		}, baseEnv())}
		node.start()
		c.nodes = append(c.nodes, node)
		c.names = append(c.names, name)
	}
	return c
}

// url is every node's client URL, comma-separated, as GATE_NATS_URL takes
// a cluster.
func (c *natsCluster) url() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = n.url()
	}
	return strings.Join(urls, ",")
}

// node is the node of the given server name.
func (c *natsCluster) node(name string) *natsServer {
	for i, n := range c.names {
		if n == name {
			return c.nodes[i]
		}
	}
	panic("no node " + name)
}

// wantReplicas checks that the gates made every stream with r replicas.
func (c *natsCluster) wantReplicas(t *testing.T, js jetstream.JetStream, r int) {
	t.Helper()
	for _, name := range []string{natsbus.StreamIn, natsbus.StreamOut, natsbus.StreamDead, natsbus.StreamRefund} {
		info := streamInfo(t, js, name)
		if got := info.Config.Replicas; got != r {
			t.Errorf("stream %s has %d replicas, want %d (GATE_STREAM_REPLICAS)", name, got, r)
		}
	}
}

// streamInfo reads a stream's state, asking again while the cluster is
// slow to answer (a leader election).
func streamInfo(t *testing.T, js jetstream.JetStream, name string) *jetstream.StreamInfo {
	t.Helper()
	var info *jetstream.StreamInfo
	waitUntil(t, time.Minute, "the state of stream "+name, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, name)
		if err != nil {
			return false
		}
		info = s.CachedInfo()
		return true
	})
	return info
}

// leaderOf is the server leading stream name now.
func (c *natsCluster) leaderOf(t *testing.T, js jetstream.JetStream, name string) string {
	t.Helper()
	var leader string
	waitUntil(t, time.Minute, "a leader of stream "+name, func() bool {
		info := streamInfo(t, js, name)
		leader = ""
		if info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		return leader != ""
	})
	return leader
}

// waitLeader waits until stream name has a leader other than old, and
// returns how long that took.
func (c *natsCluster) waitLeader(t *testing.T, js jetstream.JetStream, name, old string) time.Duration {
	t.Helper()
	return waitUntil(t, time.Minute, "a new leader of stream "+name, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, name)
		if err != nil {
			return false
		}
		cl := s.CachedInfo().Cluster
		return cl != nil && cl.Leader != "" && cl.Leader != old
	})
}

// waitWhole waits until every stream of the gate's and both consumers
// have a leader and all their replicas are online and current.
func (c *natsCluster) waitWhole(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	whole := func(cl *jetstream.ClusterInfo) bool {
		if cl == nil || cl.Leader == "" || len(cl.Replicas) != len(c.nodes)-1 {
			return false
		}
		for _, p := range cl.Replicas {
			if !p.Current || p.Offline {
				return false
			}
		}
		return true
	}
	waitUntil(t, 2*time.Minute, "the cluster whole again: every stream and consumer with a leader and current replicas", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, name := range []string{natsbus.StreamIn, natsbus.StreamOut, natsbus.StreamDead, natsbus.StreamRefund} {
			s, err := js.Stream(ctx, name)
			if err != nil || !whole(s.CachedInfo().Cluster) {
				return false
			}
		}
		for _, cons := range [][2]string{{natsbus.StreamIn, natsbus.ConsumerName}, {natsbus.StreamRefund, natsbus.RefundConsumerName}} {
			cc, err := js.Consumer(ctx, cons[0], cons[1])
			if err != nil || !whole(cc.CachedInfo().Cluster) {
				return false
			}
		}
		return true
	})
}

// countWatch samples a count that only grows (the gates' decided count,
// GATE_IN's acked count) every 50 ms; a sample count returns -1 when it
// cannot say.
type countWatch struct {
	mu      sync.Mutex
	samples []countSample
	done    chan struct{}
	stopped chan struct{}
}

type countSample struct {
	at time.Time
	n  int64
}

func watchCount(t *testing.T, count func() int64) *countWatch {
	w := &countWatch{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if n := count(); n >= 0 {
				w.mu.Lock()
				w.samples = append(w.samples, countSample{time.Now(), n})
				w.mu.Unlock()
			}
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *countWatch) stop() {
	select {
	case <-w.done:
	default:
		close(w.done)
	}
	<-w.stopped
}

// last is the latest count seen (0 before any).
func (w *countWatch) last() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) == 0 {
		return 0
	}
	return w.samples[len(w.samples)-1].n
}

// longestStall is the longest time the count did not rise, over
// the stalls that overlap [from, to]: from the last rise before from to
// the next rise, and so on until to.
func (w *countWatch) longestStall(from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var longest time.Duration
	var rose time.Time // the last rise so far
	var prev int64 = -1
	for _, s := range w.samples {
		if s.n > prev && prev >= 0 {
			if !rose.IsZero() && s.at.After(from) {
				longest = max(longest, s.at.Sub(rose))
			}
			rose = s.at
		}
		prev = max(prev, s.n)
		if s.at.After(to) {
			break
		}
	}
	if rose.Before(to) && !rose.IsZero() {
		longest = max(longest, to.Sub(rose))
	}
	return longest
}

// publishPaced publishes msgs in order at about rate a second, ten
// slices a second, each acknowledged before the next (a slice the cluster
// cannot take now is retried, as a producer would, and the next waits).
// Once stop is closed it starts no more; wait returns how many it
// published, every one of them stored in GATE_IN.
func (s *stack) publishPaced(msgs []message, rate int, stop <-chan struct{}) (wait func() (int, error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	s.t.Cleanup(cancel)
	slice := max(1, rate/10)
	var n int
	var err error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		for k := 0; n < len(msgs); k++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Until(start.Add(time.Duration(k) * 100 * time.Millisecond))):
			}
			end := min(n+slice, len(msgs))
			if err = s.bus.publish(ctx, msgs[n:end], nil); err != nil {
				return
			}
			n = end
		}
	}()
	return func() (int, error) { <-finished; cancel(); return n, err }
}

// acked is how many messages GATE_IN has had acknowledged (a work queue
// deletes each once acked): its last sequence less what it holds; -1 when
// the stream does not answer within a second (an election).
func (b *busClient) acked() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, natsbus.StreamIn)
	if err != nil {
		return -1
	}
	state := st.CachedInfo().State
	return int64(state.LastSeq - state.Msgs)
}
