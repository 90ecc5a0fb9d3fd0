package gate

import (
	"errors"
	"fmt"
)

// InvalidError says a message can never be decided: it is malformed, too
// large, or lacks a required field. It is permanent: the transport parks the
// message on the dead-letter subject with Reason and terminates it.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return "invalid message: " + e.Reason }

func invalidf(format string, args ...any) error {
	return &InvalidError{Reason: fmt.Sprintf(format, args...)}
}

// IsInvalid reports whether err marks a message that can never be decided.
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
// audit store, NATS). A message that meets it is retried later, never acked.
var ErrUnavailable = errors.New("dependency unavailable")

// ErrPermanent marks a store's refusal of the data it was given, which no
// retry can change: text the database cannot hold (invalid UTF-8, a NUL
// byte), a constraint violated, a value over one of its limits. Retrying the
// same data fails the same way, so a message that meets it is parked, never
// retried: were it retried, every such message would hold a place among the
// unacknowledged ones for good, and enough of them stop all delivery. It is
// never wrapped together with ErrUnavailable.
var ErrPermanent = errors.New("refused permanently")

// ErrNotFound is returned by lookups that find nothing.
var ErrNotFound = errors.New("not found")

// ErrBadRequest marks a query the caller must correct (a bad filter, cursor
// or time).
var ErrBadRequest = errors.New("bad request")

