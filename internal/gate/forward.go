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

// ForwardOf is the forward of message id of scene, with data its body,
// that d lets out under the rules of version: the one builder of every
// way a message leaves (decided now, replayed, released, digested). A
// forced admission (a bypass priority) says so; a shadow scene's forward
// says what enforcement would have done instead. A zero d is a forward
// whose decision is not known here (a replay of the ledger's outcome, an
// unknown scene's release).
func ForwardOf(id, scene, version string, d Decision, data []byte) Forward {
	f := Forward{MessageID: id, Scene: scene, RulesVersion: version, Data: data,
		Bypass: d.Bypass && !d.Shadow, Unchecked: d.Unchecked}
	if d.Shadow {
		f.ShadowOf = d.ShadowOf
	}
	return f
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
// The Header fields are the producer's headers, empty when absent (see
// ReadHeaders). When HeaderID, HeaderScene and HeaderRecipient are all set,
// ParseDelivery takes the message from them and does not decode Data (the
// header fast path).
type Delivery struct {
	Data            []byte
	HeaderID        string // the Nats-Msg-Id header, if any
	HeaderScene     string // the Gate-Scene header, if any
	HeaderRecipient string // the Gate-Recipient header (receive_id_type:receive_id), if any
	HeaderPriority  string // the Gate-Priority header, if any
	HeaderTZ        string // the Gate-TZ header, if any
	HeaderCancelKey string // the Gate-Cancel-Key header, if any
	HeaderResolves  string // the Gate-Resolves header, if any
	// RepeatedHeader names the first header of InboundHeaders that the
	// message gives more than once, "" when none is: ParseDelivery refuses
	// the message.
	RepeatedHeader string
	Seq            uint64 // the message's sequence in the inbound stream
	NumDelivered   uint64 // 1 on first delivery
	ReceivedAt     time.Time
}

// InboundHeaders are the headers of an inbound message the gate reads, in
// the order ReadHeaders judges them: the header fast path's, Gate-TZ,
// Gate-Cancel-Key and Gate-Resolves.
var InboundHeaders = [...]string{MsgIDHeader, SceneHeader, RecipientHeader, PriorityHeader, TZHeader, CancelKeyHeader, ResolvesHeader}

// ReadHeaders sets d's Header fields from h, an inbound message's headers
// as NATS hands them over (names case-sensitive, each with its values in
// the order given; nil when there are none). A header the gate reads
// given twice is refused as a body key given twice is (see
// envelope_keys.go): the gate would take the first value and a reader
// downstream might take the last, and count one message while another is
// delivered. So a repeated one is named in RepeatedHeader, for
// ParseDelivery to refuse, even when the values agree: one rule, and
// nothing a producer needs, since a header it means once it sends once.
func (d *Delivery) ReadHeaders(h map[string][]string) {
	if len(h) == 0 {
		return
	}
	fields := [len(InboundHeaders)]*string{&d.HeaderID, &d.HeaderScene, &d.HeaderRecipient, &d.HeaderPriority, &d.HeaderTZ,
		&d.HeaderCancelKey, &d.HeaderResolves}
	for i, name := range InboundHeaders {
		vs := h[name]
		if len(vs) == 0 {
			continue
		}
		if len(vs) > 1 && d.RepeatedHeader == "" {
			d.RepeatedHeader = name
		}
		*fields[i] = vs[0]
	}
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
