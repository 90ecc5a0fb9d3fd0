package faulttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/redis/go-redis/v9"
)

// TestGatesOnRedisCluster runs two gates, unchanged but for
// GATE_REDIS_CLUSTER=true, on a Redis Cluster of three masters, and sends
// them thousands of messages whose recipients spread over every slot
// range. Every decision is one script over a scene key and the recipient's
// cap key; no CROSSSLOT error may appear, and the ledger must balance.
func TestGatesOnRedisCluster(t *testing.T) {
	url := testenv.RedisClusterURL(t)
	s, msgs, _, _ := standardRun(t, 4000, 400, 0, stackOptions{RedisURL: url, Env: map[string]string{"GATE_REDIS_CLUSTER": "true"}})
	gates := []*gateProc{s.startGate(nil), s.startGate(nil)}
	// Every recipient of the run is open_id:ou_<run>_<n>.
	run := msgs[0].To[:strings.LastIndexByte(msgs[0].To, '_')+1]
	t.Cleanup(func() { deleteClusterKeys(t, url, "gate:{open_id:"+run) })
	t0 := time.Now()
	if err := s.publishInBackground(msgs)(); err != nil {
		t.Fatal(err)
	}
	s.awaitDrained(2 * time.Minute)
	var tm timing
	tm.add("published and drained in", time.Since(t0))
	for _, g := range gates {
		g.clusterRetriesOnlyTimeouts()
	}
	r := s.check(msgs, standardModel, gates[0])
	report(t, "redis cluster, two gates", r, tm)
}

// clusterRetriesOnlyTimeouts checks what a gate on a Redis Cluster that
// stays whole must show: no CROSSSLOT, and no message retried for anything
// but a batch that outlasted GATE_STORE_TIMEOUT (on a loaded machine, as
// designed). Any other failure (MOVED or ASK not followed, CLUSTERDOWN,
// READONLY, a script error) would be a fault of the cluster path. It logs
// the store errors and timed-out retries it saw.
func (g *gateProc) clusterRetriesOnlyTimeouts() {
	g.t.Helper()
	if g.LogContains("CROSSSLOT") {
		g.t.Errorf("%s met CROSSSLOT:\n%s", g.name, g.Tail(20))
	}
	retried := g.LogLines(`msg="message not decided, will retry"`)
	for _, line := range retried {
		if !strings.Contains(line, "context deadline exceeded") {
			g.t.Errorf("%s: a message was retried for something other than a timeout:\n%s", g.name, line)
			break
		}
	}
	g.t.Logf("%s: %d window store errors, %d messages retried after a timeout", g.name, int(g.metric("gate_store_errors_total", `store="window"`)), len(retried))
}

// deleteClusterKeys deletes the keys starting with prefix on every master,
// so the shared test cluster does not keep a run's windows for a day.
// prefix must hold no glob character.
func deleteClusterKeys(t testing.TB, url, prefix string) {
	opts, err := redis.ParseClusterURL(url)
	if err != nil {
		t.Errorf("cluster url: %v", err)
		return
	}
	c := redis.NewClusterClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys, err := testenv.ClusterKeys(ctx, c, prefix)
	for _, k := range keys {
		c.Del(ctx, k)
	}
	if err != nil {
		t.Logf("cleaning the cluster: %v", err)
	}
}
