package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// FreePort returns a loopback port nobody listens on right now.
func FreePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreeClusterPort returns a loopback port for a Redis Cluster node whose
// cluster bus port, 10000 above it, is free too. FreePort alone leaves the
// bus port to chance: on a busy machine another socket holds it now and
// then, and the node aborts ("Failed listening on port … (cluster)"). The
// port is drawn from 51000-55535, so its bus port lies above Linux's
// ephemeral range (32768-60999), where no outgoing connection takes it.
func FreeClusterPort(tb testing.TB) int {
	tb.Helper()
	const lo, hi, bus = 51000, 55535, 10000
	for range 1000 {
		p := lo + rand.IntN(hi-lo+1)
		a, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+bus))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return p
	}
	tb.Fatalf("no free port in %d-%d whose cluster bus port (+%d) is free too", lo, hi, bus)
	return 0
}
