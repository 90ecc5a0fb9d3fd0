package natsbus

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/antifatigue/gate/internal/gate"
)

// CancelFunc cancels held messages from a cancel request's JSON body (the
// pipeline's Canceller, with source nats).
type CancelFunc func(ctx context.Context, body []byte) (gate.CancelResult, error)

// ServeCancels answers core NATS requests on the cancel subject
// (Options.CancelSubject, DefaultCancelSubject by default) until ctx ends,
// as ServeChecks answers checks: in the queue group o.Queue, each request
// answered once by one gate, only on a reply subject the gate may publish
// to (the same reply guard, refusals counted). The reply is POST
// /v1/cancel's answer, {"count": N}, or {"error": …, "status": …} (400 for
// a request no gate can read, 503 when the audit store did not answer: ask
// again, a cancel is idempotent).
func (b *Bus) ServeCancels(ctx context.Context, cancel CancelFunc, o CheckOptions) error {
	return b.serveRequests(ctx, b.opts.CancelSubject, "cancel", o, func(m *nats.Msg, o CheckOptions) { b.answerCancel(cancel, m, o) })
}

// answerCancel answers one cancel request.
func (b *Bus) answerCancel(cancel CancelFunc, m *nats.Msg, o CheckOptions) {
	ctx, stop := context.WithTimeout(context.Background(), o.Timeout)
	defer stop()
	var reply any
	res, err := cancel(ctx, m.Data)
	if err != nil {
		status := o.Status(gate.Classify(err))
		if status >= 500 {
			b.log.Warn("cancel failed", "subject", m.Subject, "status", status, "err", err)
		}
		reply = checkError{Error: CancelFailure(err), Status: status}
	} else {
		reply = res
	}
	data, err := json.Marshal(reply)
	if err != nil {
		b.log.Error("encoding a cancel's reply", "err", err)
		data = []byte(`{"error":"internal error","status":500}`)
	}
	if err := m.Respond(data); err != nil {
		b.log.Warn("replying to a cancel", "err", err)
	}
}

// CancelFailure is the message of the {"error": …} body that answers a
// cancel that failed with err, on POST /v1/cancel and gate.cancel alike. A
// store's own words stay in the log: they may name hosts.
func CancelFailure(err error) string {
	switch gate.Classify(err) {
	case gate.ClassPark:
		return "invalid cancel: " + gate.InvalidReason(err)
	case gate.ClassUnavailable:
		return "the audit store did not answer: ask again (a cancel is idempotent)"
	}
	return "internal error"
}
