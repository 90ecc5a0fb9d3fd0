package natsbus

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsCluster is a JetStream cluster of in-process nats-servers on
// loopback, each storing its streams under a folder of the test's.
type natsCluster struct {
	t      *testing.T
	opts   []*server.Options
	nodes  []*server.Server
	routes []string
}

// newCluster prepares a cluster of n servers; start starts them.
func newCluster(t *testing.T, n int) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t}
	ports := freePorts(t, n)
	for i := range n {
		c.routes = append(c.routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	for i := range n {
		c.opts = append(c.opts, &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "gate-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(c.routes, ",")),
		})
	}
	c.nodes = make([]*server.Server, n)
	t.Cleanup(func() {
		for _, ns := range c.nodes {
			if ns != nil {
				ns.Shutdown()
				ns.WaitForShutdown()
			}
		}
	})
	return c
}

// freePorts returns n loopback ports nothing listens on now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// start starts server i and waits until it accepts clients (not until the
// cluster has a leader).
func (c *natsCluster) start(i int) {
	c.t.Helper()
	ns, err := server.NewServer(c.opts[i])
	if err != nil {
		c.t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		c.t.Fatalf("nats-server %s not ready", c.opts[i].ServerName)
	}
	c.nodes[i] = ns
}

// startAll starts every server and waits until JetStream has a meta leader.
func (c *natsCluster) startAll() {
	c.t.Helper()
	for i := range c.nodes {
		c.start(i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for c.metaLeader() == "" {
		if time.Now().After(deadline) {
			c.t.Fatal("no JetStream meta leader within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *natsCluster) metaLeader() string {
	for _, ns := range c.nodes {
		if ns != nil && ns.JetStreamIsLeader() {
			return ns.Name()
		}
	}
	return ""
}

// url is every server's client URL, comma-separated, as GATE_NATS_URL
// takes a cluster.
func (c *natsCluster) url() string {
	var urls []string
	for _, ns := range c.nodes {
		if ns != nil {
			urls = append(urls, ns.ClientURL())
		}
	}
	return strings.Join(urls, ",")
}

// connect opens a client on the cluster, as the gate does.
func (c *natsCluster) connect(log *slog.Logger) *nats.Conn {
	c.t.Helper()
	nc, err := Connect(c.url(), "natsbus test", log)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// logBuffer is a log the test reads while the code under test writes it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

var gateStreams = []string{StreamIn, StreamOut, StreamDead, StreamRefund}

// replicasOf reads how many replicas each of the gate's streams has.
func replicasOf(ctx context.Context, t *testing.T, js jetstream.JetStream) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, name := range gateStreams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		out[name] = s.CachedInfo().Config.Replicas
	}
	return out
}

func wantReplicas(ctx context.Context, t *testing.T, js jetstream.JetStream, want int, when string) {
	t.Helper()
	for name, got := range replicasOf(ctx, t, js) {
		if got != want {
			t.Errorf("%s: stream %s has %d replicas, want %d", when, name, got, want)
		}
	}
}

// consumerPeers waits until the consumer's group has want peers (its
// leader and want-1 replicas) and fails the test if it does not within
// 30s.
func consumerPeers(ctx context.Context, t *testing.T, js jetstream.JetStream, stream, consumer string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	got := -1
	for time.Now().Before(deadline) {
		c, err := js.Consumer(ctx, stream, consumer)
		if err == nil {
			if cl := c.CachedInfo().Cluster; cl != nil && cl.Leader != "" {
				got = 1 + len(cl.Replicas)
				if got == want {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("consumer %s on %s has %d peers, want %d: it does not follow its stream", consumer, stream, got, want)
}

// On a three-node cluster: a gate that sets no replicas makes R1 streams;
// one that sets 3 scales them with an update, saying so from/to, and their
// consumers follow; one that then sets none again leaves them at R3.
func TestStreamReplicasOnACluster(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	ctx := t.Context()

	var log1 logBuffer
	b, err := New(ctx, c.connect(log1.logger()), Options{}, log1.logger())
	if err != nil {
		t.Fatal(err)
	}
	wantReplicas(ctx, t, b.js, 1, "replicas unset on new streams")
	for _, ensure := range []func(context.Context) (jetstream.Consumer, error){b.EnsureConsumer, b.ensureRefunds} {
		if _, err := ensure(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(log1.String(), `msg="nats connected" server=n`) {
		t.Errorf("the log does not name the server connected to:\n%s", log1.String())
	}

	var log3 logBuffer
	b3, err := New(ctx, c.connect(log3.logger()), Options{Replicas: 3}, log3.logger())
	if err != nil {
		t.Fatal(err)
	}
	wantReplicas(ctx, t, b3.js, 3, "replicas 3 set on R1 streams")
	for _, name := range gateStreams {
		if line := "stream=" + name + " replicas_from=1 replicas_to=3"; !strings.Contains(log3.String(), line) {
			t.Errorf("the log does not say %q:\n%s", line, log3.String())
		}
	}
	consumerPeers(ctx, t, b3.js, StreamIn, ConsumerName, 3)
	consumerPeers(ctx, t, b3.js, StreamRefund, RefundConsumerName, 3)

	// A consumer the gate (re)creates after the scale-up follows too.
	if _, err := b3.EnsureConsumer(ctx); err != nil {
		t.Fatal(err)
	}
	consumerPeers(ctx, t, b3.js, StreamIn, ConsumerName, 3)

	var log0 logBuffer
	b0, err := New(ctx, c.connect(log0.logger()), Options{}, log0.logger())
	if err != nil {
		t.Fatal(err)
	}
	wantReplicas(ctx, t, b0.js, 3, "replicas unset on R3 streams")
	if strings.Contains(log0.String(), "scaled a stream") {
		t.Errorf("a gate without a replicas setting scaled a stream:\n%s", log0.String())
	}
}

// Streams the gate creates with a replicas setting are made with it.
func TestNewStreamsTakeTheReplicas(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	ctx := t.Context()
	var log logBuffer
	b, err := New(ctx, c.connect(log.logger()), Options{Replicas: 3}, log.logger())
	if err != nil {
		t.Fatal(err)
	}
	wantReplicas(ctx, t, b.js, 3, "new streams")
	if strings.Contains(log.String(), "scaled a stream") {
		t.Errorf("new streams were scaled rather than made with their replicas:\n%s", log.String())
	}
	if _, err := b.EnsureConsumer(ctx); err != nil {
		t.Fatal(err)
	}
	consumerPeers(ctx, t, b.js, StreamIn, ConsumerName, 3)
}

// A gate that starts before its cluster has elected a meta leader waits
// for it, saying what it waits for, rather than failing.
func TestNewWaitsForTheClusterToElect(t *testing.T) {
	c := newCluster(t, 3)
	c.start(0) // one of three: no quorum, no meta leader
	var log logBuffer
	nc := c.connect(log.logger())
	done := make(chan error, 1)
	go func() {
		_, err := New(t.Context(), nc, Options{Replicas: 3, StartWait: time.Minute}, log.logger())
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(log.String(), "waiting for the nats cluster") {
		select {
		case err := <-done:
			t.Fatalf("New returned %v before the cluster could elect a leader", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("New did not say it waits for the cluster within 20s:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.start(1)
	c.start(2)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("New after the cluster formed: %v\n%s", err, log.String())
		}
	case <-time.After(90 * time.Second):
		t.Fatal("New still waiting 90s after the cluster could form")
	}
	if !strings.Contains(log.String(), "nats cluster ready") {
		t.Errorf("the log does not say the wait is over:\n%s", log.String())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	wantReplicas(t.Context(), t, js, 3, "after the wait")
}

// Replicas out of range are refused, and so are replicas a single server
// cannot keep: at once, not after the start wait.
func TestReplicasRefused(t *testing.T) {
	nc := startServer(t)
	for _, r := range []int{-1, MaxReplicas + 1} {
		if _, err := New(t.Context(), nc, Options{Replicas: r}, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "from 1 to 5") {
			t.Errorf("Replicas %d: New = %v, want it refused", r, err)
		}
	}
	t0 := time.Now()
	_, err := New(t.Context(), nc, Options{Replicas: 3, StartWait: time.Minute}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("Replicas 3 on one server: New = %v, want a refusal naming replicas", err)
	}
	if took := time.Since(t0); took > 30*time.Second {
		t.Errorf("Replicas 3 on one server refused after %s: waited as if a cluster were electing", took)
	}
}

// The work loop's consumer waits for a cluster that has lost its quorum
// (no meta leader: the consumer cannot be created), saying so, and
// consumes once the cluster is whole again.
func TestConsumerWaitsForTheCluster(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	ctx := t.Context()
	var log logBuffer
	nc := c.connect(log.logger())
	b, err := New(ctx, nc, Options{Replicas: 3}, log.logger())
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		c.nodes[i].Shutdown()
		c.nodes[i].WaitForShutdown()
		c.nodes[i] = nil
	}
	seen := make(chan string, 1)
	runStaged(t, b, oneStep(func(_ context.Context, batch []gate.Delivery) []error {
		for _, d := range batch {
			select {
			case seen <- string(d.Data):
			default:
			}
		}
		return make([]error, len(batch))
	}), ConsumeOptions{})
	waitLog(t, &log, `msg="waiting for the nats cluster (leader elections)" for="consumer gate"`, 30*time.Second)
	c.start(1)
	c.start(2)
	waitLog(t, &log, `msg="consumer ready" consumer=gate`, 90*time.Second)
	// The consumer's leader can be ready before GATE_IN's: on a loaded
	// machine the stream may still be electing, and a producer's publish
	// meanwhile gets no answer. What is under test is the consumer, so the
	// publish is tried again until the stream answers.
	for deadline := time.Now().Add(60 * time.Second); ; {
		_, err := b.js.Publish(ctx, DefaultInSubject, []byte("after the election"), jetstream.WithMsgID("after-the-election"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish after the election: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	select {
	case got := <-seen:
		if got != "after the election" {
			t.Errorf("consumed %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("nothing consumed within 30s of the cluster being whole")
	}
}

// waitLog waits until the log holds line, and fails the test with the log
// if it does not within d.
func waitLog(t *testing.T, log *logBuffer, line string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(log.String(), line) {
		if time.Now().After(deadline) {
			t.Fatalf("the log does not say %s within %s:\n%s", line, d, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
