package gormstore

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

// settlePlan is what one round's settlements change, grouped so that a
// round writes a few statements however many messages it settles: the
// releaser settles a round at one time, so most groups hold many messages.
type settlePlan struct {
	deleted []heldKey                // leave held: released, fell back, digested
	audits  map[auditUpdate][]string // audit rows marked settled, by message id
	dues    map[int64][]heldKey      // rescheduled: new due time (µs) -> messages
	moves   map[moveTo][]heldKey     // moved to a digest queue
	moved   []gate.Held              // the moved messages, in their new queues
	sums    hourSums                 // Released and FellBack
	settled int                      // all but the rescheduled
	heldAt  map[string]time.Time     // of audits and moves: when held, their audit rows' decided_at
	out     []outRow                 // the forwards that let messages out, once each, in order
}

// heldKey is a held message's primary key: its queue, sequence and id.
type heldKey struct {
	queue gate.Queue
	seq   int64
	id    string
}

func keyOf(h gate.Held) heldKey {
	return heldKey{queue: h.Queue, seq: int64(h.Seq), id: h.MessageID}
}

// keyList is "(?, ?, ?, ?), …" for keys, and its arguments: the row values
// of held's primary key, which both databases look up in it.
func keyList(keys []heldKey) (string, []any) {
	args := make([]any, 0, 4*len(keys))
	for _, k := range keys {
		args = append(args, k.queue.Recipient, k.queue.Name, k.seq, k.id)
	}
	return strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", len(keys)), ", "), args
}

// heldWhere selects the held messages of keys by primary key.
const heldWhere = ` WHERE (recipient, queue, seq, message_id) IN (`

// auditUpdate is one change of suppression rows: settled as kind at at (µs),
// with its fallback or digest.
type auditUpdate struct {
	kind     gate.SettleKind
	at       int64
	fallback gate.Action
	digestID string
}

// moveTo is where moved messages go: a queue and a due time (µs).
type moveTo struct {
	queue gate.Queue
	due   int64
}

// planSettlements checks out against the messages handed over (due) and
// groups it. A settlement without its time is settled at now.
func planSettlements(due [][]gate.Held, out []gate.Settlement, now time.Time) (settlePlan, error) {
	handed := make(map[string]gate.Held)
	for _, q := range due {
		for _, h := range q {
			handed[h.MessageID] = h
		}
	}
	p := settlePlan{audits: map[auditUpdate][]string{}, dues: map[int64][]heldKey{}, moves: map[moveTo][]heldKey{},
		heldAt: map[string]time.Time{}}
	seen := make(map[string]bool, len(out))
	for i, st := range out {
		h, ok := handed[st.MessageID]
		switch {
		case !ok:
			return settlePlan{}, fmt.Errorf("settlement %d: message %q was not handed over", i, st.MessageID)
		case seen[st.MessageID]:
			return settlePlan{}, fmt.Errorf("settlement %d: message %q settled twice", i, st.MessageID)
		}
		seen[st.MessageID] = true
		if out := st.Kind == gate.SettleReleased || st.Kind == gate.SettleDigested; out != (st.Out != nil) {
			return settlePlan{}, fmt.Errorf("settlement %d (%s): %s with a forward: %t, want %t", i, st.MessageID, st.Kind, st.Out != nil, out)
		}
		at := st.At
		if at.IsZero() {
			at = now
		}
		counts := p.sums.at(cmp.Or(st.Scene, h.Scene), at)
		switch st.Kind {
		case gate.SettleReleased, gate.SettleFellBack, gate.SettleDigested:
			u := auditUpdate{kind: st.Kind, at: at.UnixMicro()}
			switch st.Kind {
			case gate.SettleReleased:
				counts.Released++
			case gate.SettleFellBack:
				if st.Fallback == "" {
					return settlePlan{}, fmt.Errorf("settlement %d (%s): fell back to no action", i, st.MessageID)
				}
				u.fallback = st.Fallback
				counts.FellBack++
			case gate.SettleDigested:
				if st.DigestID == "" {
					return settlePlan{}, fmt.Errorf("settlement %d (%s): digested by no digest", i, st.MessageID)
				}
				u.digestID = st.DigestID
			}
			if st.Out != nil && !slices.ContainsFunc(p.out, func(r outRow) bool { return r.f.MessageID == st.Out.MessageID }) {
				p.out = append(p.out, outRow{*st.Out, h.Queue, at})
			}
			p.deleted = append(p.deleted, keyOf(h))
			p.audits[u] = append(p.audits[u], st.MessageID)
			p.heldAt[st.MessageID] = h.HeldAt
			p.settled++
		case gate.SettleReschedule:
			if st.DueAt.IsZero() {
				return settlePlan{}, fmt.Errorf("settlement %d (%s): rescheduled to no time", i, st.MessageID)
			}
			k := st.DueAt.UnixMicro()
			p.dues[k] = append(p.dues[k], keyOf(h))
		case gate.SettleMoved:
			if st.Queue.Recipient == "" || st.Queue.Name == "" {
				return settlePlan{}, fmt.Errorf("settlement %d (%s): moved to no queue", i, st.MessageID)
			}
			dueAt := st.DueAt
			if dueAt.IsZero() {
				dueAt = at
			}
			k := moveTo{st.Queue, dueAt.UnixMicro()}
			p.moves[k] = append(p.moves[k], keyOf(h))
			p.heldAt[st.MessageID] = h.HeldAt
			h.Queue, h.DueAt = st.Queue, dueAt
			p.moved = append(p.moved, h)
			// defer_fallback digest is a fallback: the message left the
			// deferred, and Digested counted only those collected when
			// decided.
			counts.FellBack++
			p.settled++
		default:
			return settlePlan{}, fmt.Errorf("settlement %d (%s): unknown kind %q", i, st.MessageID, st.Kind)
		}
	}
	return p, nil
}

// applySettlements writes p's changes of held messages and audit rows, and the rows of
// the queues moved messages joined (in queue order). The counters are left
// to the caller, to be written after every queue row.
func (s *Store) applySettlements(tx *gorm.DB, p settlePlan) error {
	for chunk := range slices.Chunk(p.deleted, chunkRows) {
		list, args := keyList(chunk)
		if err := tx.Exec(`DELETE FROM held`+heldWhere+list+`)`, args...).Error; err != nil {
			return fmt.Errorf("delete settled messages: %w", err)
		}
	}
	for u, ids := range p.audits {
		set, args := "settled = ?, settled_at = ?", []any{string(u.kind), s.dbTime(time.UnixMicro(u.at))}
		switch u.kind {
		case gate.SettleFellBack:
			set, args = set+", fallback = ?", append(args, string(u.fallback))
		case gate.SettleDigested:
			set, args = set+", digest_id = ?", append(args, u.digestID)
		}
		for chunk := range slices.Chunk(ids, chunkRows) {
			where, byID := s.auditRowsOf(p, chunk)
			if err := tx.Exec(`UPDATE suppressions SET `+set+where, append(args, byID...)...).Error; err != nil {
				return fmt.Errorf("mark audit rows %s: %w", u.kind, err)
			}
		}
	}
	for due, keys := range p.dues {
		for chunk := range slices.Chunk(keys, chunkRows) {
			list, args := keyList(chunk)
			if err := tx.Exec(`UPDATE held SET due_at = ?`+heldWhere+list+`)`, append([]any{s.dbTime(time.UnixMicro(due))}, args...)...).Error; err != nil {
				return fmt.Errorf("reschedule held messages: %w", err)
			}
		}
	}
	for m, keys := range p.moves {
		for chunk := range slices.Chunk(keys, chunkRows) {
			list, args := keyList(chunk)
			err := tx.Exec(`UPDATE held SET kind = ?, recipient = ?, queue = ?, due_at = ?, expires_at = NULL`+heldWhere+list+`)`,
				append([]any{string(gate.HoldDigest), m.queue.Recipient, m.queue.Name, s.dbTime(time.UnixMicro(m.due))}, args...)...).Error
			if err != nil {
				return fmt.Errorf("move held messages to %s: %w", m.queue.Name, err)
			}
			ids := make([]string, len(chunk))
			for i, k := range chunk {
				ids[i] = k.id
			}
			where, byID := s.auditRowsOf(p, ids)
			err = tx.Exec(`UPDATE suppressions SET fallback = ?`+where, append([]any{string(gate.ActionDigest)}, byID...)...).Error
			if err != nil {
				return fmt.Errorf("mark audit rows moved: %w", err)
			}
		}
	}
	if err := s.insertForwards(tx, p.out); err != nil {
		return err
	}
	if len(p.moved) > 0 {
		return s.upsertQueues(tx, queueHeads(p.moved))
	}
	return nil
}

// auditRowsOf is the WHERE clause, and its arguments, of the audit rows of
// the held messages ids. On partitioned tables it names their decision
// times too (the held messages' held_at), so that PostgreSQL reads the
// partitions of those times only, not an index of every partition.
func (s *Store) auditRowsOf(p settlePlan, ids []string) (string, []any) {
	if !s.partitioned {
		return ` WHERE message_id IN ?`, []any{ids}
	}
	ats := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		ats = append(ats, p.heldAt[id])
	}
	slices.SortFunc(ats, time.Time.Compare)
	ats = slices.Compact(ats)
	return ` WHERE message_id IN ? AND decided_at IN ?`, []any{ids, ats}
}
