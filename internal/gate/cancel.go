package gate

import (
	"context"
)

// CancelSource says how a cancel reached the gate.
type CancelSource string

// The sources of a cancel: POST /v1/cancel, the gate.cancel subject, or a
// message's resolves field (the message path).
const (
	CancelSourceAPI      CancelSource = "api"
	CancelSourceNATS     CancelSource = "nats"
	CancelSourceResolves CancelSource = "resolves"
)

// CancelRequest names the held messages a cancel takes back: those whose
// cancel_key is Key, of every recipient, or of Recipient alone
// (receive_id_type:receive_id, as Message.Recipient) when it is set.
type CancelRequest struct {
	Key       string
	Recipient string
}

// CancelResult answers a cancel: how many held messages it took back.
type CancelResult struct {
	Count int `json:"count"`
}

// MaxCancelBytes bounds a cancel request's body: three short fields.
const MaxCancelBytes = 64 << 10

// The fields of a cancel body, indexes into cancelFields; the scan runs
// in stream mode, so a key outside them is refused, as encoding/json's
// DisallowUnknownFields refuses it.
const (
	cclKey = iota
	cclReceiveIDType
	cclReceiveID
)

var cancelFields = []scanField{
	cclKey:           stringField("cancel_key"),
	cclReceiveIDType: stringField("receive_id_type"),
	cclReceiveID:     stringField("receive_id"),
}

// ParseCancel reads a cancel request's body, {"cancel_key": "…"} with,
// optionally, both "receive_id_type" and "receive_id" (the recipient, as a
// message names it; an email address is kept as RecipientID keeps it). The
// body is held to what every body is (within MaxCancelBytes, valid UTF-8
// without NUL bytes, no lone surrogate escape) and its keys to an
// envelope's (exact; none given twice); a key it does not know is refused.
// The key and the receive_id are held to CheckName and their byte limits.
// Every error is an *InvalidError.
func ParseCancel(body []byte) (CancelRequest, error) {
	if err := checkBody(body, MaxCancelBytes, "UTF-8 JSON"); err != nil {
		return CancelRequest{}, err
	}
	s := envScan{data: body, fields: cancelFields, stream: true}
	switch outcome, reason := s.run(); outcome {
	case scanBadText:
		return CancelRequest{}, invalidf("cancel body is not valid UTF-8 JSON: %s", reason)
	case scanAmbiguous:
		return CancelRequest{}, invalidf("cancel body is ambiguous: %s", reason)
	case scanSyntax, scanBadField:
		return CancelRequest{}, invalidf("cancel body must be a JSON object like {\"cancel_key\": \"order-1\"}: %s", reason)
	case scanTrailing:
		return CancelRequest{}, invalidf("cancel body has data after its JSON object")
	}
	if s.vals[cclKey].kind == valAbsent {
		return CancelRequest{}, invalidf("cancel body has no \"cancel_key\"")
	}
	return CancelRequestOf(s.text(cclKey), s.text(cclReceiveIDType), s.text(cclReceiveID))
}

// CancelRequestOf checks a cancel's key and its optional recipient (both
// typ and id, or neither) and returns the request. Every error is an
// *InvalidError.
func CancelRequestOf(key, typ, id string) (CancelRequest, error) {
	if err := CheckName("cancel_key", key, MaxCancelKeyBytes); err != nil {
		return CancelRequest{}, err
	}
	req := CancelRequest{Key: key}
	switch {
	case typ == "" && id == "":
		return req, nil
	case typ == "" || id == "":
		return CancelRequest{}, invalidf("cancel names receive_id_type and receive_id together, or neither: got only one")
	}
	if err := checkReceiveIDType("", typ); err != nil {
		return CancelRequest{}, err
	}
	if err := CheckName("receive_id", id, MaxReceiveIDBytes); err != nil {
		return CancelRequest{}, err
	}
	req.Recipient = Message{ReceiveIDType: typ, ReceiveID: RecipientID(typ, id)}.Recipient()
	return req, nil
}

// Canceller cancels held messages on request. Cancel reads body with
// ParseCancel (an *InvalidError when it cannot) and takes back every held
// message the request names (HoldStore.Cancel). It is idempotent: asked
// again, it cancels nothing more and answers 0. Other errors are transient
// (wrap ErrUnavailable) and the same call may succeed later.
type Canceller interface {
	Cancel(ctx context.Context, body []byte, source CancelSource) (CancelResult, error)
}
