package gormstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

// heldPerStatement bounds the queues one statement of Settle reads: each is
// a branch of a UNION ALL, and SQLite allows 500 of those.
const heldPerStatement = 200

// Settle settles held messages of due queues, in one transaction:
//
//  1. it picks up to maxQueues queues whose oldest message is due at now,
//     soonest first. On PostgreSQL it locks their held_queues rows (FOR
//     UPDATE SKIP LOCKED): a queue another caller holds is skipped, never
//     waited for, so N gates settle N different sets of queues and no
//     message is handed to two of them. On SQLite the transaction begins
//     IMMEDIATE and so excludes every other writer until it ends;
//  2. it reads each queue's oldest perQueue messages in Seq order (due or
//     not: a digest carries every message it collected), DueAt made
//     non-decreasing along each slice;
//  3. it calls settle with them, inside the transaction, and applies what
//     settle returns: released, fell_back and digested messages leave held
//     and their audit rows say so (settled, settled_at, and fallback or
//     digest_id); rescheduled ones get their new due time; moved ones join
//     the digest queue named, their audit row's fallback saying "digest".
//     Released counts on its scene's counters in the hour of the
//     settlement, fell_back and moved count FellBack; digested counts
//     nothing, as Digested counted the message when it was collected. A
//     message settle says nothing of stays as it was.
//
// Each queue's row then names its new oldest message, or goes when it holds
// none. A message committed into a queue while the queue is settled is
// never half seen: its commit upserts the queue's row first, which waits for
// the lock, so the message is in none of what settle was handed and joins
// the queue, in Seq order, when this transaction ends.
//
// settle runs while the transaction holds the queues (and, on SQLite, the
// database's only connection, so commits wait for it): it should do what it
// must (publish, admit) and return, and must not call the Store, which on
// SQLite would wait for the connection its own caller holds. Its error, or a failure of the store,
// rolls everything back and is returned, settle's wrapped as it was, the
// store's wrapping gate.ErrUnavailable. Settlements that name a message not
// handed to settle, name one twice or lack what their kind needs roll back
// too, with an error wrapping gate.ErrPermanent and gate.ErrBadRequest.
// It returns how many messages were settled other than rescheduled.
func (s *Store) Settle(ctx context.Context, now time.Time, maxQueues, perQueue int,
	settle func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error)) (int, error) {
	const op = "settle held messages"
	if maxQueues <= 0 || perQueue <= 0 || settle == nil {
		return 0, fmt.Errorf("%s: %w: %w: want a settle function and positive numbers of queues and messages, got %d and %d",
			op, gate.ErrPermanent, gate.ErrBadRequest, maxQueues, perQueue)
	}
	var (
		n       int
		refusal error // settle's own error, or its settlements refused
	)
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		queues, err := s.lockDue(tx, now, maxQueues)
		if err != nil || len(queues) == 0 {
			return err
		}
		due, err := s.readHeld(tx, queues, perQueue)
		if err != nil {
			return err
		}
		var p settlePlan
		if len(due) > 0 {
			out, err := settle(ctx, due)
			if err != nil {
				refusal = err
				return err
			}
			if p, err = planSettlements(due, out, now); err != nil {
				refusal = fmt.Errorf("%w: %w: %w", gate.ErrPermanent, gate.ErrBadRequest, err)
				return refusal
			}
			if err := s.applySettlements(tx, p); err != nil {
				return err
			}
		}
		if err := s.refreshQueues(tx, queues); err != nil {
			return err
		}
		// Counters last, after every queue row, as Commit takes them.
		n = p.settled
		return s.upsertCounters(tx, p.sums)
	})
	switch {
	case refusal != nil:
		return 0, fmt.Errorf("%s: %w", op, refusal)
	case err != nil:
		return 0, unavailable(op, err)
	}
	return n, nil
}

// dueQuery selects up to limit queues due at now, soonest first, from
// held_queues_due_idx; on PostgreSQL it locks them, skipping those locked.
func (s *Store) dueQuery(now time.Time, limit int) (string, []any) {
	q := `SELECT recipient, queue FROM held_queues WHERE due_at <= ? ORDER BY due_at LIMIT ?` + s.dialect.lockDue
	return q, []any{s.dbTime(now), limit}
}

// lockDue returns the queues of dueQuery, soonest first.
func (s *Store) lockDue(tx *gorm.DB, now time.Time, limit int) ([]gate.Queue, error) {
	q, args := s.dueQuery(now, limit)
	rows, err := tx.Raw(q, args...).Rows()
	if err != nil {
		return nil, fmt.Errorf("pick due queues: %w", err)
	}
	defer rows.Close()
	var queues []gate.Queue
	for rows.Next() {
		var q gate.Queue
		if err := rows.Scan(&q.Recipient, &q.Name); err != nil {
			return nil, fmt.Errorf("pick due queues: %w", err)
		}
		queues = append(queues, q)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pick due queues: %w", err)
	}
	return queues, nil
}

// heldQuery reads the oldest perQueue messages of each of queues: one
// branch per queue, each a range of held's primary key.
func (s *Store) heldQuery(queues []gate.Queue, perQueue int) (string, []any) {
	columns := s.dialect.heldRead
	branches := make([]string, len(queues))
	args := make([]any, 0, 3*len(queues))
	for i, q := range queues {
		branches[i] = fmt.Sprintf(`SELECT * FROM (SELECT %s FROM held WHERE recipient = ? AND queue = ? ORDER BY seq LIMIT ?) AS q%d`,
			columns, i)
		args = append(args, q.Recipient, q.Name, perQueue)
	}
	return strings.Join(branches, "\nUNION ALL "), args
}

// heldPostgres is heldQuery on PostgreSQL, in one statement of constant
// text, prepared once per connection: the queues as two arrays, each
// queue's oldest $3 messages read by a range of held's primary key
// (LATERAL). heldQuery's text changed with the number of queues, and
// PostgreSQL planned its UNION of up to 200 branches (each with the payload
// lookup into the audit rows' partitions) anew on every call: 70-110 ms in
// the soak, while the settle held its queues' locks and commits into them
// waited.
var heldPostgres = `SELECT h.* FROM unnest($1::text[], $2::text[]) AS q(recipient, queue)
	CROSS JOIN LATERAL (SELECT ` + heldNoPayload + ", " + heldPayloadPostgres + ` FROM held
		WHERE held.recipient = q.recipient AND held.queue = q.queue ORDER BY seq LIMIT $3) AS h`

// heldInChunks reads heldQuery for queues into byQueue, heldPerStatement
// queues a statement (SQLite).
func (s *Store) heldInChunks(tx *gorm.DB, queues []gate.Queue, perQueue int, byQueue map[gate.Queue][]gate.Held) error {
	for chunk := range slices.Chunk(queues, heldPerStatement) {
		q, args := s.heldQuery(chunk, perQueue)
		rows, err := tx.Raw(q, args...).Rows()
		if err != nil {
			return err
		}
		if err := scanHeld(rows, byQueue); err != nil {
			return err
		}
	}
	return nil
}

// heldOnPostgres reads heldPostgres for queues into byQueue.
func (s *Store) heldOnPostgres(tx *gorm.DB, queues []gate.Queue, perQueue int, byQueue map[gate.Queue][]gate.Held) error {
	recipients, names := make([]string, len(queues)), make([]string, len(queues))
	for i, q := range queues {
		recipients[i], names[i] = q.Recipient, q.Name
	}
	rows, err := tx.Statement.ConnPool.QueryContext(tx.Statement.Context, heldPostgres,
		pgx.QueryExecModeCacheStatement, recipients, names, perQueue)
	if err != nil {
		return err
	}
	return scanHeld(rows, byQueue)
}

// readHeld returns the messages of heldQuery, one slice per queue that
// holds any, in the order of queues. Along each slice DueAt is raised to
// the latest DueAt before it: a message is never due before one ahead of it
// (a rescheduled head holds back the rest of its queue).
func (s *Store) readHeld(tx *gorm.DB, queues []gate.Queue, perQueue int) ([][]gate.Held, error) {
	byQueue := make(map[gate.Queue][]gate.Held, len(queues))
	if err := s.dialect.held(s, tx, queues, perQueue, byQueue); err != nil {
		return nil, fmt.Errorf("read held messages: %w", err)
	}
	var due [][]gate.Held
	for _, q := range queues {
		hs := byQueue[q]
		if len(hs) == 0 {
			continue
		}
		slices.SortFunc(hs, func(a, b gate.Held) int { return cmpUint(a.Seq, b.Seq) })
		for i := 1; i < len(hs); i++ {
			if hs[i].DueAt.Before(hs[i-1].DueAt) {
				hs[i].DueAt = hs[i-1].DueAt
			}
		}
		due = append(due, hs)
	}
	return due, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// scanHeld reads rows of heldColumns into byQueue, and closes rows.
func scanHeld(rows *sql.Rows, byQueue map[gate.Queue][]gate.Held) error {
	defer rows.Close()
	for rows.Next() {
		var (
			h                    gate.Held
			kind, prio, fallback string
			seq                  int64
			heldAt, due, expires scanTime
		)
		if err := rows.Scan(&h.MessageID, &kind, &h.Queue.Recipient, &h.Queue.Name, &h.Scene, &prio, &h.TZ, &seq,
			&heldAt, &due, &expires, &fallback, &h.Reason, &h.CancelKey, &h.Payload); err != nil {
			return err
		}
		h.Kind, h.Priority, h.Fallback, h.Seq = gate.HoldKind(kind), gate.Priority(prio), gate.Action(fallback), uint64(seq)
		h.HeldAt, h.DueAt, h.Expires = heldAt.t, due.t, expires.t
		byQueue[h.Queue] = append(byQueue[h.Queue], h)
	}
	return rows.Err()
}

// refreshQueues makes the rows of queues name their oldest messages, and
// deletes those of queues left empty.
func (s *Store) refreshQueues(tx *gorm.DB, queues []gate.Queue) error {
	for chunk := range slices.Chunk(queues, chunkRows) {
		list, args := queueList(chunk)
		err := tx.Exec(`DELETE FROM held_queues WHERE (recipient, queue) IN (`+list+`)
	AND NOT EXISTS (SELECT 1 FROM held h WHERE h.recipient = held_queues.recipient AND h.queue = held_queues.queue)`, args...).Error
		if err != nil {
			return fmt.Errorf("delete empty held queues: %w", err)
		}
		err = tx.Exec(`UPDATE held_queues SET
	due_at = (SELECT h.due_at FROM held h WHERE h.recipient = held_queues.recipient AND h.queue = held_queues.queue ORDER BY h.seq LIMIT 1),
	head_seq = (SELECT h.seq FROM held h WHERE h.recipient = held_queues.recipient AND h.queue = held_queues.queue ORDER BY h.seq LIMIT 1)
	WHERE (recipient, queue) IN (`+list+`)`, args...).Error
		if err != nil {
			return fmt.Errorf("update held queues: %w", err)
		}
	}
	return nil
}
