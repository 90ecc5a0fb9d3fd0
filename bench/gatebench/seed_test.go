package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go"
)

// The seed baseline does the gate's job under the gate's rules: on real
// Redis, PostgreSQL and JetStream it gives every message of a workload the
// outcome the simulation gives it (so rejected attempts do not fill its
// windows, and every limit and cap is checked), decides each once, and
// leaves no key behind.
func TestSeedBaselineDecidesAsTheSimulation(t *testing.T) {
	redisURL, dbURL := testenv.RedisURL(t), testenv.DatabaseURL(t)
	const password = "seed-test-password"
	ns, err := natsbus.StartEmbedded(natsbus.EmbeddedOptions{Addr: "127.0.0.1:-1", StoreDir: filepath.Join(t.TempDir(), "js"), GatePassword: password})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Shutdown()
	rdb, err := newRedis(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	var raw [4]byte
	_, _ = rand.Read(raw[:])
	r := &runner{cfg: &config{databaseURL: dbURL}, tag: hex.EncodeToString(raw[:]), redis: rdb, log: io.Discard,
		// As the gate: the streams and their consumers take its user.
		natsURL: "nats://" + natsbus.EmbeddedGateUser + ":" + password + "@" + ns.Addr().String()}
	if r.nc, err = nats.Connect(r.natsURL); err != nil {
		t.Fatal(err)
	}
	defer r.nc.Close()
	ctx := context.Background()
	// The gate's streams, GATE_OUT among them, as the gate's run leaves them.
	if _, err := natsbus.New(ctx, r.nc, natsbus.Options{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if r.pub, err = newPublisher(r.nc, false); err != nil {
		t.Fatal(err)
	}
	rs, err := benchRules()
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	data := newWorkload(7, r.tag, n/2).batchOf(n).data
	res, err := r.seedBaseline(ctx, rs, data)
	if err != nil {
		t.Fatal(err)
	}
	if res.n != n || res.counted != res.expected {
		t.Errorf("decided %d of %d: %+v, the simulation %+v", res.n, n, res.counted, res.expected)
	}
	if res.expected.suppress == 0 || res.expected.drop == 0 || res.expected.forward == 0 {
		t.Errorf("the workload tries too little: %+v", res.expected)
	}
	if keys, err := rdb.Keys(ctx, "gatebench-"+r.tag+"-seed:*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("left %d keys behind (%v)", len(keys), err)
	}
}
