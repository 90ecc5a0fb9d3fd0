package pipeline

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// round is one Releaser round: the due queues the hold store handed over,
// what to do with each of their messages (its step), and the core's items
// of the messages (and digests) whose windows it asks. The round is a
// front end of the core: each message is planned by its plan stage, the
// items are admitted by its admit stage (one call to the window store for
// every queue of the round) and decided by its resolve stage, and the
// admissions of messages that stay held are taken back by its forget
// stage. What the round lets out leaves by the outbox: each release's
// settlement carries its forward (gate.Settlement.Out), which the hold
// store writes in the round's transaction, and the Releaser publishes it
// after that transaction (Releaser.drain).
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

	queues []*queueRound
	// items are the messages and digests whose windows the round asks,
	// as the core's items (heldStep.ask and queueRound.ask index them).
	items   []item
	out     []gate.Settlement
	unadmit []gate.AdmitRequest
}

// step is what a round does with one held message.
type step int

const (
	stepWait       step = iota // not due: it stays as it is
	stepAsk                    // ask the window store (round.items[ask]), and go by the core's decision
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
}

// queueRound is one queue of a round.
type queueRound struct {
	queue  gate.Queue
	digest bool
	rows   []heldStep
	// A digest queue is settled as a whole: send it (ask >= 0 and let out,
	// or sendUnchecked), or give every row its step.
	ask           int
	sendUnchecked bool
	digestID      string
}

// heldMessage is the message the core plans for h: id (h's own, or its
// digest's) of priority p, in h's scene, to h's queue's recipient (the
// Recipient of the message held, "receive_id_type:receive_id", the type
// one of Feishu's, without a colon), in h's own zone: a zone gone from the
// zone database since is none, and the scene's applies
// (gate.SceneRule.ZoneNamed).
func heldMessage(h gate.Held, id string, p gate.Priority) gate.Message {
	typ, rid, _ := strings.Cut(h.Queue.Recipient, ":")
	m := gate.Message{ID: id, Scene: h.Scene, ReceiveIDType: typ, ReceiveID: rid, Priority: p, TZ: h.TZ}
	if h.TZ != "" {
		m.Zone, _ = gate.LoadZone(h.TZ)
	}
	return m
}

// plan plans m, a held message (or a queue's digest), through the core's
// plan stage, as a new message of its scene would be planned: the rules in
// force, its own zone over its scene's, quiet hours, a bypass priority (no
// preferences apply: the Releaser's core has none). It returns m's step:
// its scene's unknown_scene action when the scene lost its rule, a
// reschedule to their end while quiet hours hold it, else an ask of its
// windows (ask indexes its item); a request no store can decide (rules
// that cannot hold) is not asked, and falls back (cannotAdmit).
func (rd *round) plan(ctx context.Context, m gate.Message) (st step, due time.Time, fallback gate.Action, ask int) {
	its := []item{{key: m.ID, msg: m}}
	rd.r.core.plan(ctx, rd.rules, its, rd.now)
	switch p := its[0].plan; {
	case !p.Known:
		st, fallback = rd.unknownScene()
		return st, rd.now, fallback, -1
	case p.Quiet:
		return stepReschedule, p.QuietUntil, "", -1
	}
	if err := its[0].plan.Request.Validate(); err != nil {
		rd.cannotAdmit(m, err)
		return stepFallBack, rd.now, gate.ActionSuppress, -1
	}
	rd.items = append(rd.items, its[0])
	return stepAsk, time.Time{}, "", len(rd.items) - 1
}

// cannotAdmit logs a held message (or digest) that falls back because no
// window store can admit it under its scene's rules.
func (rd *round) cannotAdmit(m gate.Message, err error) {
	rd.r.o.Log.Warn("a held message cannot be admitted under its scene's rules; it falls back", "id", m.ID, "scene", m.Scene, "err", err)
}

// expired reports whether a deferred message is past max_defer.
func (rd *round) expired(h gate.Held) bool {
	return !h.Expires.IsZero() && !rd.now.Before(h.Expires)
}

// planDefer plans a deferred queue, in order, up to its first message held
// back by quiet hours (the ones after it wait behind it).
func (rd *round) planDefer(ctx context.Context, rows []gate.Held) {
	q := &queueRound{queue: rows[0].Queue, ask: -1}
	quiet := false
	for _, h := range rows {
		s := heldStep{h: h, ask: -1}
		switch {
		case rd.expired(h):
			s.step, s.fallback, s.due = stepFallBack, h.Fallback, rd.now
		case h.DueAt.After(rd.now):
			s.step = stepWait
		case quiet:
			s.step, s.due = stepReschedule, rd.now
		default:
			s.step, s.due, s.fallback, s.ask = rd.plan(ctx, heldMessage(h, h.MessageID, h.Priority))
			quiet = s.step == stepReschedule
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
// the digest's own id, in the head's scene and zone. A digest is a
// notification too: quiet hours hold it; it has no priority, so none
// bypasses them or the windows.
func (rd *round) planDigest(ctx context.Context, rows []gate.Held) {
	head := rows[0]
	q := &queueRound{queue: head.Queue, digest: true, ask: -1, digestID: gate.DigestID(head.Queue, head.MessageID, rows[len(rows)-1].MessageID)}
	rd.queues = append(rd.queues, q)
	st, due, fallback := stepWait, time.Time{}, gate.Action("")
	if !head.DueAt.After(rd.now) {
		st, due, fallback, q.ask = rd.plan(ctx, heldMessage(head, q.digestID, ""))
		q.sendUnchecked = st == stepRelease
	}
	for _, h := range rows {
		q.rows = append(q.rows, heldStep{h: h, step: st, ask: q.ask, due: due, fallback: fallback})
	}
}

// decide asks the window store about every item of the round at once and
// decides them: the core's admit and resolve stages. A request the store
// refuses for good (isolated by halves, as for every front end) makes its
// item invalid: its message (or every message of its digest) falls back
// as one no store can decide. Should the store fail, the round fails, to
// be rolled back and tried again: a held message never fails open, it
// stays held.
func (rd *round) decide(ctx context.Context) error {
	c := &rd.r.core
	c.admit(ctx, releasePolicy, rd.items)
	for i := range rd.items {
		if it := &rd.items[i]; it.state == failed {
			return fmt.Errorf("release: %w", it.err)
		}
	}
	c.resolve(rd.rules, rd.items)
	for i := range rd.items {
		if it := &rd.items[i]; it.state == invalid {
			rd.cannotAdmit(it.msg, it.err)
		}
	}
	for _, q := range rd.queues {
		for j := range q.rows {
			if s := &q.rows[j]; s.step == stepAsk && rd.items[s.ask].state == invalid {
				s.step, s.due, s.fallback = stepFallBack, rd.now, gate.ActionSuppress
			}
		}
		if q.ask >= 0 && rd.items[q.ask].state == invalid {
			q.ask = -1
		}
	}
	return nil
}

// letsOut reports whether d, the core's decision on a held message (or a
// digest) whose windows were asked, lets it out now: they admitted it (by
// force, for a bypass priority), or its scene is in shadow mode and would
// forward it. Otherwise it stays held where its scene defers, and gets its
// scene's on_exceed where it does not.
func letsOut(d gate.Decision) bool {
	return d.Outcome == gate.OutcomeForward && (d.Reason != gate.ReasonLimit || d.Shadow)
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
			rd.release(s.h, gate.Decision{})
		case stepAsk:
			it := &rd.items[s.ask]
			switch {
			case !floor.IsZero():
				if req := it.admission(); req != nil {
					rd.unadmit = append(rd.unadmit, *req)
				}
				stay(s, floor)
			case letsOut(it.dec):
				// Admitted, or the scene is in shadow mode now: it would
				// forward (a bypass only when admitted).
				rd.release(s.h, it.dec)
			case it.dec.Outcome != gate.OutcomeDefer:
				// Held by quiet hours (or by rules since changed) in a scene
				// that does not defer over its limit: its limit's action.
				rd.fallBack(s.h, it.plan.Rule.OnExceed, rd.nextDue(it.res))
			default:
				stay(s, rd.nextDue(it.res))
			}
		}
	}
}

func (q *queueRound) finishDigest(rd *round) {
	send := q.sendUnchecked
	var (
		due time.Time
		dec gate.Decision
	)
	if q.ask >= 0 {
		it := &rd.items[q.ask]
		send, dec = letsOut(it.dec), it.dec
		due = rd.nextDue(it.res)
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
	}
	f := gate.ForwardOf(q.digestID, q.queue.Name, rd.rules.Version, dec, gate.DigestEnvelope(q.digestID, q.queue, held))
	f.DigestCount = len(held)
	for _, s := range q.rows {
		rd.out = append(rd.out, gate.Settlement{MessageID: s.h.MessageID, Scene: s.h.Scene, Kind: gate.SettleDigested, At: rd.now, DigestID: q.digestID, Out: &f})
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// release lets h out, as d decided (zero for a release unchecked).
func (rd *round) release(h gate.Held, d gate.Decision) {
	f := gate.ForwardOf(h.MessageID, h.Scene, rd.rules.Version, d, h.Payload)
	f.DeferredFrom = h.HeldAt
	rd.out = append(rd.out, gate.Settlement{MessageID: h.MessageID, Scene: h.Scene, Kind: gate.SettleReleased, At: rd.now, Out: &f})
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
