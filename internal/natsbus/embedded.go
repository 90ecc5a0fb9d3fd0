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

// The embedded server's users and accounts, part of the public contract.
// Each party lives in an account of its own, so that a subject means
// something only where the gate exported it:
//   - EmbeddedProducer, account PRODUCERS, is every client that brings no
//     credentials. It may publish to gate.in, gate.check and gate.cancel,
//     which the gate's account exports to it as services, and read its own
//     inbox (_INBOX.>), where the JetStream publish acks and the checks'
//     answers come back;
//   - EmbeddedSender, account SENDERS, reads gate.out through the pull
//     consumer SenderConsumer the gate keeps on GATE_OUT, and publishes to
//     gate.refund and gate.sent;
//   - EmbeddedGateUser, account GATE, owns the streams and may do anything.
//
// Because a service import carries a request's reply subject back into the
// requester's account, a reply subject a producer or a sender picks (gate.out,
// gate.dead, gate.in, an inbox of the gate's) names a subject of its own
// account, never one of the gate's: a JetStream publish ack or a check answer
// can no longer land in a stream of the gate's.
const (
	EmbeddedGateUser = "gate"
	EmbeddedProducer = "producer"
	EmbeddedSender   = "sender"
	// EmbeddedInboxPrefix is the inbox prefix of the gate's own connection
	// to its embedded server, where its pull consumers receive GATE_IN's
	// messages. The checks' reply guard refuses it on any server.
	EmbeddedInboxPrefix = "_GATE_INBOX"
	// SenderConsumer is the durable pull consumer on GATE_OUT that the
	// gate keeps for senders on its embedded server; senders share it, each
	// message going to one of them.
	SenderConsumer = "senders"
	// SenderAPIPrefix is where a sender of the embedded server finds the
	// JetStream API of the senders' consumer, in place of $JS.API, which
	// its own account has no JetStream behind: jetstream.NewWithAPIPrefix
	// in nats.go, --js-api-prefix in the nats CLI.
	SenderAPIPrefix = "gate.js"
	// DefaultCancelSubject and DefaultSentSubject are the subjects of
	// cancellation (producers) and of delivery reports (senders).
	DefaultCancelSubject = "gate.cancel"
	DefaultSentSubject   = "gate.sent"
	// The embedded server's accounts.
	accountGate      = "GATE"
	accountProducers = "PRODUCERS"
	accountSenders   = "SENDERS"
	// inbox is what producers and senders may subscribe to: the replies
	// to their requests and JetStream publishes, under nats.go's default
	// inbox prefix, in their own account.
	inbox = nats.InboxPrefix + ">"
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
	// SenderPassword is EmbeddedSender's password; empty leaves the sender
	// with a random password nobody knows, so that nobody is a sender.
	SenderPassword string
	// InSubject, CheckSubject and CancelSubject are what a producer may
	// publish to ("gate.in", "gate.check", "gate.cancel"); OutSubject is
	// what a sender reads and RefundSubject and SentSubject what it
	// publishes to ("gate.out", "gate.refund", "gate.sent").
	InSubject, CheckSubject, CancelSubject string
	OutSubject, RefundSubject, SentSubject string
}

// withDefaults fills the zero subjects.
func (o EmbeddedOptions) withDefaults() EmbeddedOptions {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.InSubject, DefaultInSubject)
	def(&o.CheckSubject, DefaultCheckSubject)
	def(&o.CancelSubject, DefaultCancelSubject)
	def(&o.OutSubject, DefaultOutSubject)
	def(&o.RefundSubject, DefaultRefundSubject)
	def(&o.SentSubject, DefaultSentSubject)
	return o
}

// RolesConfig is the accounts block of a nats-server configuration that
// gives the three parties what the embedded server gives them, for the
// subjects of o; passwords are left as "<…>" placeholders. The embedded
// server runs on it, and docs/operating.md shows it for a server of one's
// own (a test keeps the two the same).
func RolesConfig(o EmbeddedOptions) string {
	o = o.withDefaults()
	q := strconv.Quote
	next := "CONSUMER.MSG.NEXT." + StreamOut + "." + SenderConsumer
	info := "CONSUMER.INFO." + StreamOut + "." + SenderConsumer
	ack := q("$JS.ACK." + StreamOut + "." + SenderConsumer + ".>")
	gateAPI := func(s string) string { return q("$JS.API." + s) }
	sendersAPI := func(s string) string { return q(SenderAPIPrefix + "." + s) }
	return fmt.Sprintf(`accounts: {
  %[1]s: {
    jetstream: enabled
    users: [{user: %[4]s, password: "<gate password>"}]
    exports: [
      {service: %[7]s, accounts: [%[2]s]}
      {service: %[8]s, accounts: [%[2]s]}
      {service: %[9]s, accounts: [%[2]s]}
      {service: %[10]s, accounts: [%[3]s]}
      {service: %[11]s, accounts: [%[3]s]}
      {service: %[12]s, accounts: [%[3]s]}
      {service: %[13]s, response_type: stream, accounts: [%[3]s]}
      {service: %[14]s, accounts: [%[3]s]}
    ]
  }
  %[2]s: {
    users: [{user: %[5]s, password: "<nobody's>", permissions: {publish: [%[7]s, %[8]s, %[9]s], subscribe: [%[15]s]}}]
    imports: [
      {service: {account: %[1]s, subject: %[7]s}}
      {service: {account: %[1]s, subject: %[8]s}}
      {service: {account: %[1]s, subject: %[9]s}}
    ]
  }
  %[3]s: {
    users: [{user: %[6]s, password: "<sender password>", permissions: {publish: [%[10]s, %[11]s, %[16]s, %[17]s, %[14]s], subscribe: [%[15]s]}}]
    imports: [
      {service: {account: %[1]s, subject: %[10]s}}
      {service: {account: %[1]s, subject: %[11]s}}
      {service: {account: %[1]s, subject: %[12]s}, to: %[16]s}
      {service: {account: %[1]s, subject: %[13]s}, to: %[17]s}
      {service: {account: %[1]s, subject: %[14]s}}
    ]
  }
}
no_auth_user: %[5]s
`, accountGate, accountProducers, accountSenders, EmbeddedGateUser, EmbeddedProducer, EmbeddedSender,
		q(o.InSubject), q(o.CheckSubject), q(o.CancelSubject),
		q(o.RefundSubject), q(o.SentSubject), gateAPI(info), gateAPI(next), ack, q(inbox), sendersAPI(info), sendersAPI(next))
}

// StartEmbedded runs a nats-server with JetStream inside the process, with
// the accounts and users of RolesConfig: the gate's, which may do anything;
// the producers', which every client that brings no credentials joins; and
// the senders'. Passwords are set on the parsed users, never written into
// the configuration's text.
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
	opts := &server.Options{}
	if err := opts.ProcessConfigString(RolesConfig(o)); err != nil {
		return nil, fmt.Errorf("embedded nats: roles: %w", err)
	}
	// Nobody logs in as the producer: it is who comes without
	// credentials. A password nobody knows keeps it so, and keeps the
	// sender nobody while no password is chosen for it.
	passwords := map[string]string{EmbeddedGateUser: o.GatePassword, EmbeddedProducer: rand.Text(), EmbeddedSender: o.SenderPassword}
	if passwords[EmbeddedSender] == "" {
		passwords[EmbeddedSender] = rand.Text()
	}
	for _, u := range opts.Users {
		u.Password = passwords[u.Username]
	}
	opts.ServerName, opts.Host, opts.Port = "gate-embedded", host, port
	opts.JetStream, opts.StoreDir = true, o.StoreDir
	opts.NoSigs, opts.NoLog = true, true
	ns, err := server.NewServer(opts)
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
