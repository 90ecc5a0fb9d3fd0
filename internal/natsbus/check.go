package natsbus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// Defaults of CheckOptions, and of Options.CheckSubject.
const (
	DefaultCheckSubject = "gate.check"
	DefaultCheckQueue   = "gate"
	// DefaultCheckInFlight bounds the checks one gate answers at once.
	DefaultCheckInFlight = 64
	// DefaultCheckTimeout bounds one check: a requester has given up long
	// before.
	DefaultCheckTimeout = 10 * time.Second
)

// CheckOptions configure ServeChecks; zero values take the defaults above,
// but Status is required. The subject is the bus's (Options.CheckSubject).
type CheckOptions struct {
	Queue    string
	InFlight int
	Timeout  time.Duration
	// Status is the HTTP status of a failure's class (httpapi.Status): a
	// failed check's reply carries the status POST /v1/check would have
	// answered, so the API's one map of classes to statuses serves both.
	Status func(gate.Class) int
	// RefusedReplies are reply subjects (wildcards allowed) no check is
	// answered on, besides the gate's own subjects and those starting with
	// $, which are always refused (replyGuard).
	RefusedReplies []string
	// Metrics, if set, counts refused replies.
	Metrics *metrics.Metrics
	// Serving, if set, is called once the requests are subscribed to: from
	// then on one is answered (readiness waits for it).
	Serving func()
}

// CheckFunc answers a check from its JSON body (the pipeline's Checker).
type CheckFunc func(ctx context.Context, body []byte) (gate.CheckAnswer, error)

// checkError is the reply of a check that failed: the {"error": …} body of
// POST /v1/check, with the HTTP status it would have had.
type checkError struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// ServeChecks answers core NATS requests on the check subject
// (Options.CheckSubject) until ctx ends, then drains the subscription and
// waits for the checks in hand. It subscribes in a queue group, so every
// gate of a deployment shares the subject and each request is answered
// once. Every request with a reply subject the gate may publish to gets
// one reply: the answer, or {"error": …, "status": …} (400, 503 or 500, as
// POST /v1/check). A request without a reply subject is not decided:
// nobody would read the answer, and a check that is not read must not take
// a slot. Nor is one whose reply subject the gate must not publish to
// (replyGuard: the gate's own subjects, those starting with $, and
// o.RefusedReplies): it is counted and logged (once a minute) instead,
// before it would wait for a slot, so that refusals never hold up checks.
// A malformed subject in o.RefusedReplies is an error.
func (b *Bus) ServeChecks(ctx context.Context, check CheckFunc, o CheckOptions) error {
	return b.serveRequests(ctx, b.opts.CheckSubject, "check", o, func(m *nats.Msg, o CheckOptions) { b.answerCheck(check, m, o) })
}

// serveRequests answers the core NATS requests on subject with answer, as
// ServeChecks says, noun naming a request in logs and errors. answer is
// handed o with its defaults.
func (b *Bus) serveRequests(ctx context.Context, subject, noun string, o CheckOptions, answer func(m *nats.Msg, o CheckOptions)) error {
	if o.Status == nil {
		return fmt.Errorf("serve %ss: CheckOptions.Status is required", noun)
	}
	if o.Queue == "" {
		o.Queue = DefaultCheckQueue
	}
	if o.InFlight <= 0 {
		o.InFlight = DefaultCheckInFlight
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultCheckTimeout
	}
	guard, err := b.newReplyGuard(ctx, o.RefusedReplies, o.Metrics)
	if err != nil {
		return fmt.Errorf("serve %ss: %w", noun, err)
	}
	slots := make(chan struct{}, o.InFlight)
	var wg sync.WaitGroup
	wg.Go(func() { guard.follow(ctx) })
	// The handler runs on the subscription's own goroutine: it hands each
	// request over once a slot is free, so a gate answering its share slowly
	// lets requests queue in the client, within NATS's pending limits.
	sub, err := b.nc.QueueSubscribe(subject, o.Queue, func(m *nats.Msg) {
		if m.Reply == "" {
			b.log.Debug(noun+" without a reply subject ignored", "subject", m.Subject)
			return
		}
		if guard.refuses(m) {
			return
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			answer(m, o)
		})
	})
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", subject, err)
	}
	if o.Serving != nil {
		o.Serving()
	}
	<-ctx.Done()
	if err := sub.Drain(); err != nil {
		b.log.Warn("draining the "+noun+" subscription", "err", err)
	}
	// Drain returns at once; the handler may still hand requests over until
	// the subscription is closed.
	for deadline := time.Now().Add(o.Timeout); sub.IsValid() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	return nil
}

// answerCheck answers one check request.
func (b *Bus) answerCheck(check CheckFunc, m *nats.Msg, o CheckOptions) {
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	var reply any
	a, err := check(ctx, m.Data)
	if err != nil {
		status := o.Status(gate.Classify(err))
		if status >= 500 {
			b.log.Warn("check failed", "subject", m.Subject, "status", status, "err", err)
		}
		reply = checkError{Error: gate.CheckFailure(err), Status: status}
	} else {
		reply = a
	}
	data, err := json.Marshal(reply)
	if err != nil {
		b.log.Error("encoding a check's reply", "err", err)
		data = []byte(`{"error":"internal error","status":500}`)
	}
	if err := m.Respond(data); err != nil {
		b.log.Warn("replying to a check", "err", err)
	}
}
