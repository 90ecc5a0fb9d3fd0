package gormstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

// Held messages live in two tables. held has one row per message, keyed by
// (recipient, queue, seq, message_id), the order it is read in. held_queues has one row per queue
// that holds messages, with the due time and sequence of its oldest one: it
// is what Waiting reads, what the releaser picks due queues from, and, on
// PostgreSQL, the lock that makes a queue one gate's at a time. Commit
// upserts a queue's row before it writes the queue's messages and before it
// touches any counter, and Settle locks queue rows first and counters last,
// so the two never wait on each other in opposite orders.

var _ gate.HoldStore = (*Store)(nil)

// checkHold checks the message r holds: a defer or digest record holds one,
// of the matching kind, with its queue, times and a sequence the database
// can store; no other record holds any.
func checkHold(r gate.Record) error {
	var want gate.HoldKind
	switch r.Outcome {
	case gate.OutcomeDefer:
		want = gate.HoldDefer
	case gate.OutcomeDigest:
		want = gate.HoldDigest
	}
	h := r.Hold
	switch {
	case want == "" && h != nil:
		return fmt.Errorf("a %s record holds no message, got one to hold", r.Outcome)
	case want == "":
		return nil
	case h == nil:
		return fmt.Errorf("a %s record without the message to hold", r.Outcome)
	case h.Kind != want:
		return fmt.Errorf("a %s record holds its message as %q, want %q", r.Outcome, h.Kind, want)
	case h.Queue.Recipient == "" || h.Queue.Name == "":
		return errors.New("held message without its queue")
	case h.HeldAt.IsZero() || h.DueAt.IsZero():
		return errors.New("held message without its held or due time")
	case h.Seq > math.MaxInt64:
		return fmt.Errorf("held message sequence %d over the largest the store keeps", h.Seq)
	}
	return nil
}

// heldOf is the message r holds, with the defaults the audit row gets too:
// its id and scene are the record's unless it names its own.
func heldOf(r gate.Record) gate.Held {
	h := *r.Hold
	h.MessageID = cmp.Or(h.MessageID, r.Key)
	h.Scene = cmp.Or(h.Scene, r.Scene)
	if h.Payload == nil {
		h.Payload = []byte{} // the column is NOT NULL
	}
	return h
}

// queueHead is a queue's oldest message as one transaction sees it: the
// sequence and due time its held_queues row keeps.
type queueHead struct {
	queue gate.Queue
	seq   int64
	due   time.Time
}

// queueHeads returns the oldest of held in each of their queues, sorted by
// queue: the order in which every transaction takes queue rows.
func queueHeads(held []gate.Held) []queueHead {
	heads := make(map[gate.Queue]queueHead)
	for _, h := range held {
		if cur, ok := heads[h.Queue]; !ok || int64(h.Seq) < cur.seq {
			heads[h.Queue] = queueHead{queue: h.Queue, seq: int64(h.Seq), due: h.DueAt}
		}
	}
	out := make([]queueHead, 0, len(heads))
	for _, h := range heads {
		out = append(out, h)
	}
	slices.SortFunc(out, func(a, b queueHead) int { return compareQueues(a.queue, b.queue) })
	return out
}

func compareQueues(a, b gate.Queue) int {
	return cmp.Or(strings.Compare(a.Recipient, b.Recipient), strings.Compare(a.Name, b.Name))
}

// upsertHead ends an INSERT into held_queues: a queue that exists keeps its
// row unless the new message is older than its oldest (a message decided on
// one gate may commit after a later one decided on another). The row is
// locked either way, which is what makes a commit into a queue wait while
// a releaser settles it.
const upsertHead = ` ON CONFLICT (recipient, queue) DO UPDATE SET due_at = excluded.due_at, head_seq = excluded.head_seq
	WHERE excluded.head_seq < held_queues.head_seq`

// upsertQueues makes sure each of heads' queues has its row, in the order
// of heads.
func (s *Store) upsertQueues(tx *gorm.DB, heads []queueHead) error {
	for chunk := range slices.Chunk(heads, chunkRows) {
		args := make([]any, 0, 4*len(chunk))
		for _, h := range chunk {
			args = append(args, h.queue.Recipient, h.queue.Name, s.dbTime(h.due), h.seq)
		}
		err := tx.Exec(multiRow(`INSERT INTO held_queues (recipient, queue, due_at, head_seq)`, 4, len(chunk))+upsertHead, args...).Error
		if err != nil {
			return fmt.Errorf("upsert held queues: %w", err)
		}
	}
	return nil
}

// heldKeyColumns are held's primary key (migration 0012): every read of
// held is a queue's messages in order, and every change names messages
// Settle has read. message_id ends it so that two messages never collide,
// even if a stream sequence comes back.
const heldKeyColumns = `(recipient, queue, seq, message_id)`

// heldColumns are the columns of held in the order Settle reads them and
// Commit writes them; heldNoPayload all but the last, payload.
const (
	heldNoPayload = `message_id, kind, recipient, queue, scene, priority, tz, seq, held_at, due_at, expires_at, fallback, reason, cancel_key`
	heldColumns   = heldNoPayload + `, payload`
)

// On PostgreSQL a held message whose audit row was written in the same
// statement with the same bytes as its payload keeps no copy of its own: its
// payload is empty and is read from the audit row (heldPayloadPostgres).
// Holding a 1 KB message otherwise wrote its bytes twice, and the second
// copy doubled what a deferring gate's PostgreSQL kept and vacuumed
// (gatebench). An audit row about to be pruned first gives its bytes back
// (sharedPayloadsBack), so a message held longer than GATE_AUDIT_RETENTION
// keeps them. The audit row is looked up by id and decision time (the
// held message's held_at): the time picks its one partition, where the id
// alone would read an index of every partition. (A message whose audit row existed before, for an id decided
// again after the ledger forgot it, keeps its own copy: the bytes differ.)
// SQLite keeps a copy always: it is one process's store, where the cost
// does not matter and the statement could not tell which rows it wrote.
const heldPayloadPostgres = `CASE WHEN length(payload) > 0 THEN payload ELSE coalesce(
	(SELECT convert_to(s.payload, 'UTF8') FROM suppressions s
		WHERE s.message_id = held.message_id AND s.decided_at = held.held_at), ''::bytea) END AS payload`

// sharedPayloadsBack copies, on PostgreSQL, the payload of every audit row
// decided before cutoff into its held message, when the held message shares
// it: PruneSuppressions is about to delete those rows.
const sharedPayloadsBack = `UPDATE held h SET payload = convert_to(s.payload, 'UTF8')
	FROM suppressions s
	WHERE s.message_id = h.message_id AND s.decided_at = h.held_at
		AND length(h.payload) = 0 AND s.payload IS NOT NULL AND s.decided_at < $1`

// insertHeld writes the held messages of recs (records new to the ledger),
// after the rows of their queues. A message held already at the same place
// (queue, sequence and id) keeps its row.
func (s *Store) insertHeld(tx *gorm.DB, recs []gate.Record) error {
	var held []gate.Held
	for _, r := range recs {
		if r.Hold != nil {
			held = append(held, heldOf(r))
		}
	}
	if len(held) == 0 {
		return nil
	}
	if err := s.upsertQueues(tx, queueHeads(held)); err != nil {
		return err
	}
	slices.SortFunc(held, func(a, b gate.Held) int {
		return cmp.Or(compareQueues(a.Queue, b.Queue), cmpUint(a.Seq, b.Seq), strings.Compare(a.MessageID, b.MessageID))
	})
	for chunk := range slices.Chunk(held, chunkRows) {
		args := make([]any, 0, 15*len(chunk))
		for _, h := range chunk {
			args = append(args, h.MessageID, string(h.Kind), h.Queue.Recipient, h.Queue.Name, h.Scene,
				string(h.Priority), h.TZ, int64(h.Seq), s.dbTime(h.HeldAt), s.dbTime(h.DueAt),
				s.dbTimeOrNull(h.Expires), string(h.Fallback), h.Reason, h.CancelKey, h.Payload)
		}
		err := tx.Exec(multiRow(`INSERT INTO held (`+heldColumns+`)`, 15, len(chunk))+
			` ON CONFLICT `+heldKeyColumns+` DO NOTHING`, args...).Error
		if err != nil {
			return fmt.Errorf("insert held messages: %w", err)
		}
	}
	return nil
}

// Waiting reports which of queues hold messages now: those are true in the
// map it returns, the others absent. It reads one row per queue, by primary
// key, 500 queues to a statement. A queue the database refuses (on
// PostgreSQL, text that is not UTF-8 or holds a NUL byte) gives an error
// wrapping gate.ErrPermanent, as Decided's keys do: nothing of it can be
// held. Other errors wrap gate.ErrUnavailable.
//
// On PostgreSQL it is one statement of constant text over two arrays, planned
// anew each time as Decided is: a list of row values makes a new statement
// for every batch size, which PostgreSQL parses and plans each time, and
// that cost three times what the rest of a deferring batch's audit costs
// (BenchmarkCommitHeld).
func (s *Store) Waiting(ctx context.Context, queues []gate.Queue) (map[gate.Queue]bool, error) {
	waiting := make(map[gate.Queue]bool)
	queues = slices.CompactFunc(slices.SortedFunc(slices.Values(queues), compareQueues),
		func(a, b gate.Queue) bool { return a == b })
	if len(queues) == 0 {
		return waiting, nil
	}
	if err := s.dialect.waiting(s, ctx, queues, waiting); err != nil {
		return nil, classify("waiting", err)
	}
	return waiting, nil
}

// waitingOnPostgres is Waiting's lookup on PostgreSQL: waitingPostgres
// over the queues' two columns as arrays.
func (s *Store) waitingOnPostgres(ctx context.Context, queues []gate.Queue, waiting map[gate.Queue]bool) error {
	recipients, names := make([]string, len(queues)), make([]string, len(queues))
	for i, q := range queues {
		recipients[i], names[i] = q.Recipient, q.Name
	}
	rows, err := s.sqlDB.QueryContext(ctx, waitingPostgres, pgx.QueryExecModeCacheStatement, recipients, names)
	if err != nil {
		return err
	}
	return scanQueues(rows, waiting)
}

// waitingInChunks is Waiting's lookup on SQLite: waitingQuery, chunkRows
// queues to a statement.
func (s *Store) waitingInChunks(ctx context.Context, queues []gate.Queue, waiting map[gate.Queue]bool) error {
	for chunk := range slices.Chunk(queues, chunkRows) {
		q, args := waitingQuery(chunk)
		rows, err := s.db.WithContext(ctx).Raw(q, args...).Rows()
		if err != nil {
			return err
		}
		if err := scanQueues(rows, waiting); err != nil {
			return err
		}
	}
	return nil
}

// waitingPostgres is Waiting on PostgreSQL: each (recipient, queue) pair of
// the two arrays looked up in held_queues' primary key. The lookup is a
// LATERAL subquery with LIMIT 1, which PostgreSQL can only run as one index
// probe per pair: as a plain join, planned while the table was young and
// its statistics small, it hashed the arrays against a scan of the whole
// table, a cost that grew with every held queue (14 µs of PostgreSQL per
// message at 30,000 held, BenchmarkCommitHeld at 400 batches).
//
// A queue whose released forwards are still in the outbox waits too, so
// that a new message does not overtake them: a second probe, in
// released_forwards_queue_idx, which the outbox keeps small.
const waitingPostgres = `SELECT q.recipient, q.queue FROM unnest($1::text[], $2::text[]) AS q(recipient, queue)
	CROSS JOIN LATERAL (SELECT 1 FROM held_queues h WHERE h.recipient = q.recipient AND h.queue = q.queue
		UNION ALL SELECT 1 FROM released_forwards r WHERE r.recipient = q.recipient AND r.queue = q.queue LIMIT 1) AS found`

// waitingQuery selects the queues of queues that held_queues or the outbox
// hold: lists of row values, which both databases look up in an index.
func waitingQuery(queues []gate.Queue) (string, []any) {
	q, args := queueList(queues)
	return `SELECT recipient, queue FROM held_queues WHERE (recipient, queue) IN (` + q + `)
		UNION SELECT recipient, queue FROM released_forwards WHERE (recipient, queue) IN (` + q + `)`, append(args, args...)
}

// queueList is "(?, ?), (?, ?), …" for queues, and its arguments.
func queueList(queues []gate.Queue) (string, []any) {
	args := make([]any, 0, 2*len(queues))
	for _, q := range queues {
		args = append(args, q.Recipient, q.Name)
	}
	return strings.TrimSuffix(strings.Repeat("(?, ?), ", len(queues)), ", "), args
}

// scanQueues adds the (recipient, queue) rows to set, and closes rows.
func scanQueues(rows *sql.Rows, set map[gate.Queue]bool) error {
	defer rows.Close()
	for rows.Next() {
		var q gate.Queue
		if err := rows.Scan(&q.Recipient, &q.Name); err != nil {
			return err
		}
		set[q] = true
	}
	return rows.Err()
}
