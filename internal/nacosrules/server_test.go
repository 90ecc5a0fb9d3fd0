package nacosrules

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/testenv"
)

// TestNacosServer drives a Source through nacos-sdk-go against the real
// Nacos server make test starts (r-nacos, scripts/nacos.sh): publish, read,
// listen for pushed changes, reject an invalid document, and start from the
// SDK's snapshot once the server cannot be reached.
func TestNacosServer(t *testing.T) {
	addr := testenv.NacosAddr(t)
	dataID := testenv.Unique("gate-rules") + ".yaml"
	dir := t.TempDir()
	src, err := New(Options{Addrs: addr, DataID: dataID, DataDir: dir, Resync: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}

	publish := func(d string) {
		t.Helper()
		if err := src.Publish([]byte(d)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	publish(doc(1))
	// The server may answer a publish before the document is readable.
	eventually(t, "the published document readable", func() bool {
		c, err := src.Get()
		return err == nil && c == doc(1)
	})
	first, fromSnapshot, err := src.Initial()
	if err != nil || string(first) != doc(1) || fromSnapshot {
		t.Fatalf("Initial = %q, fromSnapshot %v, %v; want the published document from the server", first, fromSnapshot, err)
	}
	live := newLive(t, string(first))
	watch(t, src, live)

	publish(doc(2))
	eventually(t, "a published change in force", func() bool { return inForce(live) == version(t, doc(2)) })

	publish("scenes: [unclosed")
	eventually(t, "an invalid document rejected", func() bool { return live.Status().LastError != "" })
	if got := inForce(live); got != version(t, doc(2)) {
		t.Errorf("version %s after an invalid document, want the last good %s", got, version(t, doc(2)))
	}

	for max := 3; max <= 6; max++ { // quick edits: the newest wins
		publish(doc(max))
	}
	eventually(t, "the newest of quick edits in force", func() bool {
		st := live.Status()
		return st.Version == version(t, doc(6)) && st.LastError == ""
	})

	// The SDK keeps a snapshot of what it read; a Source over the same data
	// folder whose server is down starts from it and says so.
	eventually(t, "the snapshot holds the newest document", func() bool {
		b, err := os.ReadFile(src.snapshotPath())
		return err == nil && string(b) == doc(6)
	})
	down, err := New(Options{Addrs: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)), DataID: dataID, DataDir: dir, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	got, fromSnapshot, err := down.Initial()
	if err != nil || string(got) != doc(6) || !fromSnapshot {
		t.Errorf("Initial with the server down = %q, fromSnapshot %v, %v; want the snapshot's document", got, fromSnapshot, err)
	}
}
