package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// round is one Releaser round: the due queues the hold store handed over,
// what to do with each of their messages, and what that takes (one call to
// the window store for every queue, one to the forwarder).
//
// A deferred message is released when its scene's current rules admit it
// again, oldest first: the first one of a queue that stays held holds every
// later one of the queue back (rescheduled to when it is due again), so a
// queue comes out in order. One past its expiry gets its fallback whatever
// its place. A digest queue comes out whole, as one digest, when the
// window admits the digest's own id.
type round struct {
	r     *Releaser
	rules *gate.RuleSet
	now   time.Time

	queues  []*queueRound
	asks    []gate.AdmitRequest
	results []gate.AdmitResult
	fs      []gate.Forward
	out     []gate.Settlement
	unadmit []gate.AdmitRequest
}

// step is what a round does with one held message.
type step int

const (
	stepWait       step = iota // not due: it stays as it is
	stepAsk                    // ask the window store (round.asks[ask])
	stepRelease                // forward without a window (unknown_scene: forward)
	stepFallBack               // settle it with fallback
	stepReschedule             // it stays held, due again at due
)

type heldStep struct {
	h        gate.Held
	step     step
	ask      int
	due      time.Time
	fallback gate.Action
	rule     gate.SceneRule
	forced   bool
}

// queueRound is one queue of a round.
type queueRound struct {
	queue  gate.Queue
	digest bool
	rows   []heldStep
	// A digest queue is settled as a whole: send it (ask >= 0 and admitted,
	// or sendUnchecked), or give every row its step.
	ask           int
	sendUnchecked bool
	digestID      string
}

// sceneRule is the current rule of a held message's scene, and its zone:
// the message's own, else the scene's.
func (rd *round) sceneRule(h gate.Held) (gate.SceneRule, *time.Location, bool) {
	rule, ok := rd.rules.Scene(h.Scene)
	return rule, rule.ZoneNamed(h.TZ), ok
}

// expired reports whether a deferred message is past max_defer.
func (rd *round) expired(h gate.Held) bool {
	return !h.Expires.IsZero() && !rd.now.Before(h.Expires)
}

// ask queues a request for the window store and returns its index; -1 when
// the request is one no store can decide (rules that cannot hold), which
// is logged.
func (rd *round) ask(req gate.AdmitRequest) int {
	if err := req.Validate(); err != nil {
		rd.r.o.Log.Warn("a held message cannot be admitted under its scene's rules; it falls back", "id", req.ID, "scene", req.Scene, "err", err)
		return -1
	}
	rd.asks = append(rd.asks, req)
	return len(rd.asks) - 1
}

// planDefer plans a deferred queue, in order, up to its first message held
// back by quiet hours (the ones after it wait behind it).
func (rd *round) planDefer(rows []gate.Held) {
	q := &queueRound{queue: rows[0].Queue, ask: -1}
	quiet := false
	for _, h := range rows {
		s := heldStep{h: h}
		rule, zone, known := rd.sceneRule(h)
		s.rule = rule
		switch {
		case rd.expired(h):
			s.step, s.fallback, s.due = stepFallBack, h.Fallback, rd.now
		case h.DueAt.After(rd.now):
			s.step = stepWait
		case quiet:
			s.step, s.due = stepReschedule, rd.now
		case !known:
			s.step, s.fallback = rd.unknownScene()
		default:
			if until, ok := rule.QuietFor(h.Priority, rd.now, zone); ok {
				s.step, s.due, quiet = stepReschedule, until, true
				break
			}
			s.forced = rule.Bypasses(h.Priority)
			s.ask = rd.ask(rd.rules.AdmitRequestFor(rule, h.MessageID, q.queue.Recipient, h.Scene, s.forced, zone))
			s.step = stepAsk
			if s.ask < 0 {
				s.step, s.fallback = stepFallBack, gate.ActionSuppress
			}
		}
		q.rows = append(q.rows, s)
	}
	rd.queues = append(rd.queues, q)
}

// unknownScene is the step of a held message whose scene lost its rule:
// the unknown_scene action, as a new message of the scene would get.
func (rd *round) unknownScene() (step, gate.Action) {
	if a := rd.rules.UnknownScene; a == gate.ActionSuppress || a == gate.ActionDrop {
		return stepFallBack, a
	}
	return stepRelease, ""
}

// planDigest plans a digest queue whose head is due: one admission under
// the digest's own id, in the head's scene.
func (rd *round) planDigest(rows []gate.Held) {
	head := rows[0]
	q := &queueRound{queue: head.Queue, digest: true, ask: -1, digestID: gate.DigestID(head.Queue, head.MessageID, rows[len(rows)-1].MessageID)}
	rd.queues = append(rd.queues, q)
	all := func(st step, due time.Time, fallback gate.Action) {
		for _, h := range rows {
			q.rows = append(q.rows, heldStep{h: h, step: st, due: due, fallback: fallback})
		}
	}
	if head.DueAt.After(rd.now) {
		all(stepWait, time.Time{}, "")
		return
	}
	rule, zone, known := rd.sceneRule(head)
	if !known {
		st, a := rd.unknownScene()
		q.sendUnchecked = st == stepRelease
		all(st, rd.now, a)
		return
	}
	// A digest is a notification too: quiet hours hold it.
	if until, ok := rule.QuietFor("", rd.now, zone); ok {
		all(stepReschedule, until, "")
		return
	}
	q.ask = rd.ask(rd.rules.AdmitRequestFor(rule, q.digestID, q.queue.Recipient, head.Scene, false, zone))
	if q.ask < 0 {
		all(stepFallBack, rd.now, gate.ActionSuppress)
		return
	}
	all(stepAsk, time.Time{}, "")
	for i := range q.rows {
		q.rows[i].rule = rule
	}
}

// admit asks the window store about every request of the round at once.
func (rd *round) admit(ctx context.Context) error {
	if len(rd.asks) == 0 {
		return nil
	}
	res, err := rd.r.o.Store.Admit(ctx, rd.asks)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	rd.results = res
	return nil
}

// nextDue is when a message the window held back is tried again.
func (rd *round) nextDue(res gate.AdmitResult) time.Time {
	if res.NextAllowedAt.After(rd.now) {
		return res.NextAllowedAt
	}
	return rd.now.Add(rd.r.o.Interval)
}

// finish settles the queue on the window store's answers.
func (q *queueRound) finish(rd *round) {
	if q.digest {
		q.finishDigest(rd)
		return
	}
	// floor is the latest due time of a message of the queue that stays
	// held: no later message is released ahead of it.
	var floor time.Time
	stay := func(s heldStep, due time.Time) {
		// Due by its expiry at the latest (see gate.Decision.HoldUntil);
		// expiries follow the queue's order, as its messages were held.
		if !s.h.Expires.IsZero() && s.h.Expires.Before(due) {
			due = s.h.Expires
		}
		due = later(due, floor)
		floor = due
		rd.reschedule(s.h, due)
	}
	for _, s := range q.rows {
		switch s.step {
		case stepWait:
			floor = later(floor, s.h.DueAt)
		case stepFallBack:
			rd.fallBack(s.h, s.fallback, s.due)
		case stepReschedule:
			stay(s, s.due)
		case stepRelease:
			if !floor.IsZero() {
				stay(s, floor)
				continue
			}
			rd.release(s.h, false)
		case stepAsk:
			res := rd.results[s.ask]
			switch {
			case !floor.IsZero():
				if res.Admitted {
					rd.unadmit = append(rd.unadmit, rd.asks[s.ask])
				}
				stay(s, floor)
			case res.Admitted:
				rd.release(s.h, s.forced)
			case s.rule.Shadow:
				// The scene is in shadow mode now: it would forward.
				rd.release(s.h, false)
			case s.rule.OnExceed != gate.ActionDefer:
				// Held by quiet hours (or by rules since changed) in a scene
				// that does not defer over its limit: its limit's action.
				rd.fallBack(s.h, s.rule.OnExceed, rd.nextDue(res))
			default:
				stay(s, rd.nextDue(res))
			}
		}
	}
}

func (q *queueRound) finishDigest(rd *round) {
	send := q.sendUnchecked
	var due time.Time
	if q.ask >= 0 {
		res := rd.results[q.ask]
		send = res.Admitted || q.rows[0].rule.Shadow
		due = rd.nextDue(res)
	}
	if !send {
		for _, s := range q.rows {
			switch s.step {
			case stepAsk:
				if due.After(s.h.DueAt) {
					rd.reschedule(s.h, due)
				}
			case stepReschedule:
				if s.due.After(s.h.DueAt) {
					rd.reschedule(s.h, s.due)
				}
			case stepFallBack:
				rd.fallBack(s.h, s.fallback, s.due)
			}
		}
		return
	}
	held := make([]gate.Held, len(q.rows))
	for i, s := range q.rows {
		held[i] = s.h
		rd.out = append(rd.out, gate.Settlement{MessageID: s.h.MessageID, Scene: s.h.Scene, Kind: gate.SettleDigested, At: rd.now, DigestID: q.digestID})
	}
	rd.fs = append(rd.fs, gate.Forward{MessageID: q.digestID, Scene: q.queue.Name, RulesVersion: rd.rules.Version,
		DigestCount: len(held), Data: gate.DigestEnvelope(q.digestID, q.queue, held)})
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (rd *round) release(h gate.Held, forced bool) {
	rd.fs = append(rd.fs, gate.Forward{MessageID: h.MessageID, Scene: h.Scene, RulesVersion: rd.rules.Version,
		Bypass: forced, DeferredFrom: h.HeldAt, Data: h.Payload})
	rd.out = append(rd.out, gate.Settlement{MessageID: h.MessageID, Scene: h.Scene, Kind: gate.SettleReleased, At: rd.now})
}

func (rd *round) reschedule(h gate.Held, due time.Time) {
	rd.out = append(rd.out, gate.Settlement{MessageID: h.MessageID, Scene: h.Scene, Kind: gate.SettleReschedule, At: rd.now, DueAt: due})
}

// fallBack settles h with action a: suppressed or dropped, or moved to its
// scene's digest queue, due at due.
func (rd *round) fallBack(h gate.Held, a gate.Action, due time.Time) {
	s := gate.Settlement{MessageID: h.MessageID, Scene: h.Scene, Kind: gate.SettleFellBack, At: rd.now}
	switch a {
	case gate.ActionDigest:
		rule, _ := rd.rules.Scene(h.Scene)
		s.Kind, s.DueAt = gate.SettleMoved, later(due, rd.now)
		s.Queue = gate.Queue{Recipient: h.Queue.Recipient, Name: rule.DigestQueue(h.Scene)}
	case gate.ActionDrop:
		s.Fallback = gate.ActionDrop
	default:
		s.Fallback = gate.ActionSuppress
	}
	rd.out = append(rd.out, s)
}

// forward publishes the round's releases and digests; any failure fails the
// round, which is rolled back and tried again (GATE_OUT's duplicate window
// keeps one copy of what this round did publish).
func (rd *round) forward(ctx context.Context) error {
	if len(rd.fs) == 0 {
		return nil
	}
	errs := rd.r.o.Forwarder.Forward(ctx, rd.fs)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release: forward: %w", err)
	}
	return nil
}
