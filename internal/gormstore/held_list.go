package gormstore

import (
	"context"
	"slices"

	"github.com/antifatigue/gate/internal/gate"
)

var _ gate.HeldLister = (*Store)(nil)

// HeldQueues summarises those of recipient's queues (among queues, whose
// recipient is recipient's) that hold messages: how many, the oldest
// held_at and the next due_at. It is one statement, which walks held's
// primary key (recipient, queue, seq, message_id) for the queues asked.
// A queue of another recipient is left out. Errors wrap
// gate.ErrUnavailable or, for text the database refuses, gate.ErrPermanent.
func (s *Store) HeldQueues(ctx context.Context, recipient string, queues []gate.Queue) ([]gate.HeldQueueSummary, error) {
	const op = "summarise held queues"
	var names []string
	for _, q := range queues {
		if q.Recipient == recipient && !slices.Contains(names, q.Name) {
			names = append(names, q.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	rows, err := s.db.WithContext(ctx).Raw(`SELECT queue, MIN(kind), COUNT(*), MIN(held_at), MIN(due_at)
		FROM held WHERE recipient = ? AND queue IN ? GROUP BY queue ORDER BY queue`, recipient, names).Rows()
	if err != nil {
		return nil, classify(op, err)
	}
	defer rows.Close()
	var out []gate.HeldQueueSummary
	for rows.Next() {
		var q gate.HeldQueueSummary
		var kind string
		var heldAt, dueAt scanTime
		if err := rows.Scan(&q.Queue, &kind, &q.Count, &heldAt, &dueAt); err != nil {
			return nil, unavailable(op, err)
		}
		q.Kind, q.OldestHeldAt, q.NextDueAt = gate.HoldKind(kind), heldAt.t, dueAt.t
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(op, err)
	}
	return out, nil
}
