package natsbus

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// StartEmbedded runs a nats-server with JetStream inside the process,
// listening on addr ("127.0.0.1:4222"; port -1 picks a free one) and storing
// streams under storeDir, so producers can reach it like any NATS server.
func StartEmbedded(addr, storeDir string) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded nats address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded nats port %q: %w", portStr, err)
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "gate-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats on %s did not become ready (is the port in use?)", addr)
	}
	return ns, nil
}
