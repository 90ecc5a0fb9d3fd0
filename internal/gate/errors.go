package gate

import (
	"context"
	"errors"
	"fmt"
)

// Class is what kind of failure an error is: the one question a transport
// asks of an error before it answers a request (an HTTP status) or settles
// a message (ack, dead letter, redelivery). Classify answers it from the
// sentinels and the error type below, so that a new failure is classified
// once, here, and every transport answers it alike; the transports alone
// turn a class into their answer.
type Class int

// The classes, from Classify. Each sentinel and type below names its own.
const (
	// ClassNone is no error: the work is done.
	ClassNone Class = iota
	// ClassInternal is an error nothing classifies: a bug of the gate, or
	// a store's refusal of data the gate itself built (ErrPermanent or
	// ErrInvalidRequest alone: the message path turns those into an
	// *InvalidError naming the store). The caller can correct nothing and
	// its details, which may name hosts, stay in the log; a message that
	// meets one is retried, which is the safer answer to a fault that a
	// fix and a restart may cure.
	ClassInternal
	// ClassInvalid is a request its caller must correct (ErrBadRequest):
	// a bad filter, cursor, time or field. Asked again unchanged, it fails
	// again.
	ClassInvalid
	// ClassNotFound is a request for something the gate does not have
	// (ErrNotFound, ErrNeverDecided). Asked again, it gets the same answer.
	ClassNotFound
	// ClassConflict is a valid request that what it names refuses, as it
	// stands (ErrNotForwarded, ErrLedgerIncomplete, ErrReusedID). Asked
	// again, it gets the same answer.
	ClassConflict
	// ClassUnavailable is a dependency that did not answer in time
	// (ErrUnavailable, a context deadline or cancellation): nothing was
	// decided, and the same request may succeed later.
	ClassUnavailable
	// ClassPark is an input that can never be decided (an *InvalidError):
	// malformed, over a limit, refused for good by a store, or one that
	// made the gate panic. A stream parks it on the dead letter with its
	// reason instead of retrying it forever; a request's caller is told the
	// reason.
	ClassPark
)

// Classify returns err's class; nil is ClassNone. An error that wraps
// several sentinels takes the first class of this order: ClassPark,
// ClassInvalid, ClassUnavailable, ClassNotFound, ClassConflict. A transient
// failure comes before the two classes a transport acknowledges (a refund
// refused), so that an error that is both is retried, never dropped.
func Classify(err error) Class {
	switch {
	case err == nil:
		return ClassNone
	case IsInvalid(err):
		return ClassPark
	case errors.Is(err, ErrBadRequest):
		return ClassInvalid
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ClassUnavailable
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNeverDecided):
		return ClassNotFound
	case errors.Is(err, ErrNotForwarded), errors.Is(err, ErrLedgerIncomplete), errors.Is(err, ErrReusedID):
		return ClassConflict
	}
	return ClassInternal
}

// InvalidError says an input can never be decided: a message or a request
// body that is malformed, too large, or lacks a required field; on the
// message path also one a store refused for good or one that made the gate
// panic, with a reason that says so. It is permanent (ClassPark): a
// transport parks the message on the dead-letter subject with Reason and
// terminates it, or tells the caller Reason. Err, when set, is the error
// the reason stems from (a *ReusedError), for errors.Is and errors.As.
type InvalidError struct {
	Reason string
	Err    error
}

func (e *InvalidError) Error() string { return "invalid message: " + e.Reason }

// Unwrap returns Err.
func (e *InvalidError) Unwrap() error { return e.Err }

func invalidf(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// IsInvalid reports whether err marks an input that can never be decided
// (ClassPark).
func IsInvalid(err error) bool {
	var ie *InvalidError
	return errors.As(err, &ie)
}

// InvalidReason returns the reason of an *InvalidError in err's chain, or "".
func InvalidReason(err error) string {
	var ie *InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return ""
}

// ErrUnavailable marks a transient failure of a dependency (window store,
// audit store, NATS), ClassUnavailable. A message that meets it is retried
// later, never acked.
var ErrUnavailable = errors.New("dependency unavailable")

// ErrOutcomeUnknown marks, beside ErrUnavailable, a write the store sent and
// lost sight of: the connection broke after the commit left, so it may or
// may not have taken effect (a database killed while it committed). What
// the write would have undone elsewhere stays, since the write may stand:
// a check keeps its slot in the windows, and asked again with its id finds
// its answer or, when nothing was committed, that slot.
var ErrOutcomeUnknown = errors.New("outcome unknown")

// ErrPermanent marks a store's refusal of the data it was given, which no
// retry can change: text the database cannot hold (invalid UTF-8, a NUL
// byte), a constraint violated, a value over one of its limits. Retrying the
// same data fails the same way, so a message that meets it is parked, never
// retried: were it retried, every such message would hold a place among the
// unacknowledged ones for good, and enough of them stop all delivery. The
// message path parks it by turning it into an *InvalidError that names the
// store; alone it is ClassInternal (data the gate built, which the caller
// cannot correct), with ErrBadRequest ClassInvalid. It is never wrapped
// together with ErrUnavailable.
var ErrPermanent = errors.New("refused permanently")

// ErrNotFound is returned by lookups that find nothing (ClassNotFound).
var ErrNotFound = errors.New("not found")

// ErrBadRequest marks a query or a field the caller must correct (a bad
// filter, cursor or time): ClassInvalid.
var ErrBadRequest = errors.New("bad request")
