package gate

import (
	"context"
	"time"
)

// Forward is one admitted message on its way to the outbound subject.
type Forward struct {
	MessageID    string
	Scene        string
	RulesVersion string
	// ShadowOf is set when a shadow-mode scene would have suppressed or
	// dropped the message.
	ShadowOf Action
	Bypass   bool
	// Unchecked is set when the message was forwarded without a window check.
	Unchecked bool
	// DeferredFrom is set on a held message released later: when it was
	// first held (the Gate-Deferred-From header).
	DeferredFrom time.Time
	// DigestCount is set on a digest: how many held messages it summarises
	// (Gate-Decision: digest, Gate-Digest-Count).
	DigestCount int
	Data        []byte // the original bytes, untouched (a digest's own envelope)
}

// Forwarder publishes admitted messages downstream.
//
// Forward publishes a batch and waits until each publish is durable (or
// failed); errs[i] is the outcome of fs[i]. Publishing is idempotent on
// MessageID within the outbound stream's duplicate window, so a retried
// forward is delivered once. Errors are transient.
type Forwarder interface {
	Forward(ctx context.Context, fs []Forward) (errs []error)
}

// Delivery is one message as the transport received it.
//
// The Header fields are the producer's headers, empty when absent. When
// HeaderID, HeaderScene and HeaderRecipient are all set, ParseDelivery takes
// the message from them and does not decode Data (the header fast path).
type Delivery struct {
	Data            []byte
	HeaderID        string // the Nats-Msg-Id header, if any
	HeaderScene     string // the Gate-Scene header, if any
	HeaderRecipient string // the Gate-Recipient header (receive_id_type:receive_id), if any
	HeaderPriority  string // the Gate-Priority header, if any
	HeaderTZ        string // the Gate-TZ header, if any
	Seq             uint64 // the message's sequence in the inbound stream
	NumDelivered    uint64 // 1 on first delivery
	ReceivedAt      time.Time
}

// BatchStarter decides a batch in two steps, so that a transport can keep
// several batches in flight. The transport calls it one batch at a time, in
// the order the batches arrived, and it returns once the part of the work
// whose order matters is done. The transport then calls finish exactly once,
// from any goroutine, and may start the next batches, and finish several,
// meanwhile. ctx must stay live until finish returns.
//
// errs[i] is the outcome of batch[i] (nil: done), which the transport alone
// turns into an acknowledgement by its class (Classify): done is acked, a
// ClassPark error parks the message on the dead letter and terminates it,
// and a transient or unclassified one hands it back for a delayed retry.
type BatchStarter func(ctx context.Context, batch []Delivery) (finish func() (errs []error))
