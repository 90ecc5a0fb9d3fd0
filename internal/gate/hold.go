package gate

import (
	"context"
	"time"
)

// HoldKind says why a message is held: to be forwarded later on its own
// (deferred), or to be summarised in a digest.
type HoldKind string

// The kinds of held messages.
const (
	HoldDefer  HoldKind = "defer"
	HoldDigest HoldKind = "digest"
)

// Reasons a message is held, as its audit row and Decision.Reason say.
const (
	ReasonLimit      = "limit"       // a limit of its scene or recipient was full
	ReasonQuietHours = "quiet_hours" // it came during the scene's quiet hours
	// ReasonQueued: messages of its (recipient, queue) were held already; a
	// new message never jumps ahead of them.
	ReasonQueued = "queued"
)

// ScopeQuietHours is the Scope of an audit row (and a check answer) of a
// message held back by quiet hours rather than by a limit.
const ScopeQuietHours Scope = "quiet_hours"

// Queue names one recipient's queue of held messages: the scene's for
// deferred messages, DigestQueue for a digest's. Held messages of one queue
// are released in the order they arrived.
type Queue struct {
	Recipient string
	Name      string
}

// Held is one message held for later, as the audit store keeps it.
type Held struct {
	MessageID string
	Kind      HoldKind
	Queue     Queue
	Scene     string
	Priority  Priority
	// TZ is the message's own zone ("" when it named none).
	TZ string
	// Seq orders the messages of one queue: the GATE_IN stream sequence.
	Seq uint64
	// HeldAt is when the message was first held; a released message carries
	// it in Gate-Deferred-From.
	HeldAt time.Time
	// DueAt is when it is next tried. The store keeps DueAt non-decreasing
	// along Seq within a queue, so the due messages of a queue are its oldest.
	DueAt time.Time
	// Expires is HeldAt+max_defer for a deferred message (zero for a digest's):
	// past it, the message gets Fallback.
	Expires  time.Time
	Fallback Action
	Reason   string // ReasonLimit, ReasonQuietHours or ReasonQueued
	// CancelKey is the message's cancel_key ("" when none): a cancel of it
	// takes the message back while it is held (HoldStore.Cancel).
	CancelKey string
	Payload   []byte // the original bytes, forwarded untouched
}

// SettleKind is what became of a held message.
type SettleKind string

// The ways a held message is settled.
const (
	SettleReleased   SettleKind = "released"    // forwarded, with Gate-Deferred-From
	SettleFellBack   SettleKind = "fell_back"   // past max_defer: Settlement.Fallback applied
	SettleDigested   SettleKind = "digested"    // carried by digest Settlement.DigestID
	SettleReschedule SettleKind = "rescheduled" // still held, tried again at DueAt
	// SettleMoved: past max_defer with defer_fallback digest, the message
	// moved to its scene's digest queue (Settlement.Queue).
	SettleMoved SettleKind = "moved"
	// SettleCancelled: taken back while held by a cancel of its cancel_key
	// (HoldStore.Cancel), never forwarded. The releaser never settles so.
	SettleCancelled SettleKind = "cancelled"
)

// Settlement is what the releaser decided for one held message.
type Settlement struct {
	MessageID string
	Scene     string
	Kind      SettleKind
	At        time.Time
	DueAt     time.Time // SettleReschedule, SettleMoved
	Fallback  Action    // SettleFellBack: suppress or drop
	DigestID  string    // SettleDigested
	Queue     Queue     // SettleMoved
	// Out is the forward that lets it out: a released message's own, a
	// digested one's digest (every message of a digest names the same).
	// Required on those two kinds, refused on the others.
	Out *Forward
}

// HoldStore keeps held messages durably, beside the audit log: a held
// message is written by AuditLog.Commit, in the same transaction as its
// ledger row (Record.Hold), so it is held exactly when its decision is
// durable.
//
// Waiting reports which of queues hold messages now, so that a new message
// of such a queue is held behind them.
//
// Settle hands settle the due queues, at most maxQueues of them, each as its
// oldest held messages in Seq order (at most perQueue of each), and applies
// the settlements settle returns in one transaction. The queues handed over
// are locked against every other caller of Settle (other gate processes)
// until that transaction ends, so each held message is settled by exactly
// one of them. A settlement's audit rows and counters are written in the same
// transaction. settle returning an error, or the process dying, settles
// nothing: the messages are handed over again. It returns how many messages
// were settled other than rescheduled.
//
// The forwards of the settlements (Settlement.Out) are the outbox: written
// in the same transaction, they are the one way a held message leaves.
// Nothing is published while queues are locked: the caller publishes the
// outbox after Settle returns. Outbox returns up to limit forwards not yet
// marked Sent, in the order they were settled, and Sent removes those the
// outbound stream stored. A queue whose forwards are in the outbox is
// Waiting, so that a new message of it does not overtake them.
//
// Cancel takes back every held message whose cancel_key is req.Key (of
// req.Recipient alone when it is set), in one transaction that takes the
// locks of their queues as Settle does, waiting for a Settle in progress
// rather than skipping it: a message is either settled by Settle (and then
// Cancel does not see it: released, it stays released) or cancelled, never
// both. A cancelled message leaves held, its audit row is settled
// "cancelled" at now and counted in its scene's Cancelled counter of that
// hour, and its queue's row names its new oldest message or goes. It
// returns a settlement (SettleCancelled) per message it cancelled: none
// when none matched, which is no error. Asked again, it finds nothing more
// to cancel.
//
// Errors wrap ErrUnavailable (retry later) or ErrPermanent.
type HoldStore interface {
	Waiting(ctx context.Context, queues []Queue) (map[Queue]bool, error)
	Settle(ctx context.Context, now time.Time, maxQueues, perQueue int,
		settle func(ctx context.Context, due [][]Held) ([]Settlement, error)) (int, error)
	Outbox(ctx context.Context, limit int) ([]Forward, error)
	Sent(ctx context.Context, ids []string) error
	Cancel(ctx context.Context, req CancelRequest, now time.Time) ([]Settlement, error)
}
