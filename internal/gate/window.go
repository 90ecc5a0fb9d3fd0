package gate

import (
	"context"
	"time"
)

// Scope says which limit a message exceeded: its scene's, or its
// recipient's cap across all scenes.
type Scope string

// The scopes of a limit.
const (
	ScopeScene     Scope = "scene"
	ScopeRecipient Scope = "recipient"
)

// AdmitRequest asks the window store to admit one message.
type AdmitRequest struct {
	ID        string // message id; the window's member and idempotency key
	Recipient string // Message.Recipient()
	Scene     string
	Limits    []Limit // the scene's limits (may be empty)
	Caps      []Limit // the recipient caps (may be empty)
	// Force admits the message whatever the counts (a bypass priority); it
	// still counts in every window.
	Force bool
}

// Exceeded names the limit that held a message back.
type Exceeded struct {
	Scope Scope `json:"scope"`
	Limit Limit `json:"limit"`
	// Count is how many admitted messages were in the window at decision time.
	Count int `json:"count"`
}

// AdmitResult is the store's verdict on one request.
type AdmitResult struct {
	// Admitted is true when the message passed every limit (or was forced)
	// and is now counted.
	Admitted bool
	// Duplicate is true when the id had already been admitted: nothing was
	// counted again and Admitted is true.
	Duplicate bool
	// Exceeded is set when Admitted is false: the limit that was hit (the one
	// that reopens last, when several are).
	Exceeded *Exceeded
	// NextAllowedAt is when the window reopens for this (recipient, scene),
	// set when Admitted is false.
	NextAllowedAt time.Time
	// Now is the store's clock at the decision.
	Now time.Time
}

// WindowStore keeps the sliding windows.
//
// Admit decides a batch in order; requests of one recipient are decided in
// the order given. Each decision is one atomic check-and-record step on the
// store's own clock: any number of gate processes sharing one store never
// admit more than a limit's Max in any window. Only admitted messages are
// recorded; a rejected request changes nothing. Admitting an id that was
// already admitted returns Duplicate and counts nothing, so Admit is safe
// to retry after a partial failure.
//
// Errors are transient (wrap ErrUnavailable): the caller retries the batch.
// On error, some requests of the batch may have been recorded; retrying
// them returns Duplicate.
type WindowStore interface {
	Admit(ctx context.Context, reqs []AdmitRequest) ([]AdmitResult, error)
	Ping(ctx context.Context) error
}
