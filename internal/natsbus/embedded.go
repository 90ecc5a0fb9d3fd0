package natsbus

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The embedded server's users, part of the public contract. A client that
// connects without credentials is EmbeddedProducer: it may only produce.
// Everything else (reading gate.out and gate.dead, the JetStream API) takes
// EmbeddedGateUser and its password.
const (
	EmbeddedGateUser = "gate"
	EmbeddedProducer = "producer"
	// EmbeddedInboxPrefix is the inbox prefix of the gate's own connection
	// to its embedded server. Its pull consumers receive GATE_IN's messages
	// on inbox subjects; under a prefix of their own, a producer, which
	// may subscribe to _INBOX.> for its replies, cannot read them.
	EmbeddedInboxPrefix = "_GATE_INBOX"
	// producerInbox is what a producer may subscribe to: the replies to
	// its requests and JetStream publishes, under nats.go's default
	// inbox prefix.
	producerInbox = nats.InboxPrefix + ">"
)

// EmbeddedOptions configure StartEmbedded. Zero subjects take the defaults.
type EmbeddedOptions struct {
	// Addr is where the server listens ("127.0.0.1:4222"; port -1 picks a
	// free one).
	Addr string
	// StoreDir holds the JetStream streams.
	StoreDir string
	// GatePassword is EmbeddedGateUser's password; required.
	GatePassword string
	// InSubject, CheckSubject and RefundSubject are the subjects a
	// producer may publish to ("gate.in", "gate.check", "gate.refund").
	InSubject, CheckSubject, RefundSubject string
}

// StartEmbedded runs a nats-server with JetStream inside the process, with
// two users: EmbeddedGateUser, allowed everything, and EmbeddedProducer,
// which every client that brings no credentials becomes. A producer may
// publish to the inbound, check and refund subjects and subscribe to its
// inbox (_INBOX.>), where JetStream's publish acks and the checks' answers
// arrive; nothing else, so that it can neither read nor forge what the
// gate forwards, nor touch the streams and consumers.
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("embedded nats address %q: %w", o.Addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded nats port %q: %w", portStr, err)
	}
	if o.GatePassword == "" {
		return nil, errors.New("embedded nats: the password of user " + EmbeddedGateUser + " is empty")
	}
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.InSubject, DefaultInSubject)
	def(&o.CheckSubject, DefaultCheckSubject)
	def(&o.RefundSubject, DefaultRefundSubject)
	// Nobody logs in as the producer: it is who comes without
	// credentials. A password nobody knows keeps it so.
	producerPassword := rand.Text()
	ns, err := server.NewServer(&server.Options{
		ServerName: "gate-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		NoLog:      true,
		Users: []*server.User{
			{Username: EmbeddedGateUser, Password: o.GatePassword},
			{Username: EmbeddedProducer, Password: producerPassword, Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{o.InSubject, o.CheckSubject, o.RefundSubject}},
				Subscribe: &server.SubjectPermission{Allow: []string{producerInbox}},
			}},
		},
		NoAuthUser: EmbeddedProducer,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats on %s did not become ready (is the port in use?)", o.Addr)
	}
	return ns, nil
}

// EmbeddedGate is how the gate connects to its embedded server: as
// EmbeddedGateUser, with inboxes under EmbeddedInboxPrefix.
func EmbeddedGate(password string) []nats.Option {
	return []nats.Option{nats.UserInfo(EmbeddedGateUser, password), nats.CustomInboxPrefix(EmbeddedInboxPrefix)}
}
