package gormstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/migrations"
)

// cancelRounds bounds how often Cancel looks again for queues it has not
// locked: a message it would cancel can move to another queue (a deferred
// one past max_defer moves to its digest queue) while Cancel waits for a
// Settle of its first queue.
const cancelRounds = 4

// Cancel takes back the held messages of req (gate.HoldStore), in one
// transaction:
//
//  1. it finds the queues that hold messages with req's cancel_key (and
//     recipient), and locks their held_queues rows in byte order, as a
//     commit takes them; on PostgreSQL FOR UPDATE without SKIP LOCKED, so
//     it waits for a Settle of them in progress and then sees what that
//     Settle left (on SQLite the transaction excludes every other writer);
//  2. it reads the matching messages again, under those locks: a message a
//     Settle released, digested or gave its fallback is no longer held,
//     and its forward is in the outbox or out, so it stays as settled;
//  3. it deletes them from held, marks their audit rows settled
//     "cancelled" at now, refreshes their queues' rows (new oldest message,
//     or gone) and, last, adds Cancelled to their scenes' counters of the
//     hour of now.
//
// A message committed with the key after the lookup is not cancelled: the
// cancel came first. Errors wrap gate.ErrUnavailable; a request without a
// key wraps gate.ErrPermanent and gate.ErrBadRequest.
func (s *Store) Cancel(ctx context.Context, req gate.CancelRequest, now time.Time) ([]gate.Settlement, error) {
	const op = "cancel held messages"
	if req.Key == "" {
		return nil, fmt.Errorf("%s: %w: %w: a cancel without its cancel_key", op, gate.ErrPermanent, gate.ErrBadRequest)
	}
	var out []gate.Settlement
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		out = nil
		locked := map[gate.Queue]bool{}
		var held []gate.Held
		// Each round reads the messages again under the locks taken so far;
		// the messages of the last read whose queues were locked before it
		// are those cancelled.
		for round := 0; ; round++ {
			var err error
			if held, err = s.cancelled(tx, req); err != nil {
				return err
			}
			var more []gate.Queue
			for _, h := range held {
				if !locked[h.Queue] && !slices.Contains(more, h.Queue) {
					more = append(more, h.Queue)
				}
			}
			if len(more) == 0 || round == cancelRounds {
				break
			}
			if err := s.lockQueues(tx, more); err != nil {
				return err
			}
			for _, q := range more {
				locked[q] = true
			}
		}
		var mine []gate.Held
		for _, h := range held {
			if locked[h.Queue] {
				mine = append(mine, h)
			}
		}
		if len(mine) == 0 {
			return nil
		}
		p := settlePlan{heldAt: map[string]time.Time{}}
		ids := make([]string, 0, len(mine))
		queues := make([]gate.Queue, 0, len(locked))
		for _, h := range mine {
			p.deleted = append(p.deleted, keyOf(h))
			p.heldAt[h.MessageID] = h.HeldAt
			p.sums.at(h.Scene, now).Cancelled++
			ids = append(ids, h.MessageID)
			if !slices.Contains(queues, h.Queue) {
				queues = append(queues, h.Queue)
			}
			out = append(out, gate.Settlement{MessageID: h.MessageID, Scene: h.Scene, Kind: gate.SettleCancelled, At: now})
		}
		for chunk := range slices.Chunk(p.deleted, chunkRows) {
			list, args := keyList(chunk)
			if err := tx.Exec(`DELETE FROM held`+heldWhere+list+`)`, args...).Error; err != nil {
				return fmt.Errorf("delete cancelled messages: %w", err)
			}
		}
		for chunk := range slices.Chunk(ids, chunkRows) {
			where, byID := s.auditRowsOf(p, chunk)
			args := append([]any{string(gate.SettleCancelled), s.dbTime(now)}, byID...)
			if err := tx.Exec(`UPDATE suppressions SET settled = ?, settled_at = ?`+where, args...).Error; err != nil {
				return fmt.Errorf("mark audit rows cancelled: %w", err)
			}
		}
		slices.SortFunc(queues, compareQueues)
		if err := s.refreshQueues(tx, queues); err != nil {
			return err
		}
		// Counters last, after every queue row, as Commit and Settle take them.
		return s.upsertCounters(tx, p.sums)
	})
	if err != nil {
		return nil, unavailable(op, err)
	}
	return out, nil
}

// cancelled reads the held messages of req: their keys, scenes and held
// times, which is what a cancel changes and counts.
func (s *Store) cancelled(tx *gorm.DB, req gate.CancelRequest) ([]gate.Held, error) {
	q, args := `SELECT message_id, recipient, queue, seq, scene, held_at FROM held WHERE cancel_key = ?`, []any{req.Key}
	if req.Recipient != "" {
		q, args = q+` AND recipient = ?`, append(args, req.Recipient)
	}
	rows, err := tx.Raw(q, args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("find held messages to cancel: %w", err)
	}
	defer rows.Close()
	var held []gate.Held
	for rows.Next() {
		var (
			h      gate.Held
			seq    int64
			heldAt scanTime
		)
		if err := rows.Scan(&h.MessageID, &h.Queue.Recipient, &h.Queue.Name, &seq, &h.Scene, &heldAt); err != nil {
			return nil, fmt.Errorf("find held messages to cancel: %w", err)
		}
		h.Seq, h.HeldAt = uint64(seq), heldAt.t
		held = append(held, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find held messages to cancel: %w", err)
	}
	return held, nil
}

// lockQueues locks the held_queues rows of queues, in byte order, on
// PostgreSQL, waiting for a transaction that holds one (a Settle, a
// commit into it). SQLite's write transaction holds the whole database.
func (s *Store) lockQueues(tx *gorm.DB, queues []gate.Queue) error {
	if s.dialect.name != migrations.Postgres {
		return nil
	}
	queues = slices.SortedFunc(slices.Values(queues), compareQueues)
	for chunk := range slices.Chunk(queues, chunkRows) {
		list, args := queueList(chunk)
		err := tx.Exec(`SELECT 1 FROM held_queues WHERE (recipient, queue) IN (`+list+`)
	ORDER BY recipient COLLATE "C", queue COLLATE "C" FOR UPDATE`, args...).Error
		if err != nil {
			return fmt.Errorf("lock held queues: %w", err)
		}
	}
	return nil
}
