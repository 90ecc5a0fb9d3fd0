package gormstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

// outRow is a forward a settlement lets out, on its way to the outbox
// (released_forwards), with the queue it leaves: the queue stays Waiting
// until the forward is Sent.
type outRow struct {
	f     gate.Forward
	queue gate.Queue
	at    time.Time
}

// outboxColumns are released_forwards' columns a forward is written to
// and read from, seq aside.
const outboxColumns = `message_id, recipient, queue, scene, rules_version, shadow_of, bypass, deferred_from, digest_count, payload, released_at`

// insertForwards writes the forwards of a round's settlements to the
// outbox, in the settle transaction, in the order settled. A digest's
// forward, named by each message it carries, is written once.
func (s *Store) insertForwards(tx *gorm.DB, rows []outRow) error {
	for chunk := range slices.Chunk(rows, chunkRows) {
		args := make([]any, 0, 11*len(chunk))
		for _, r := range chunk {
			f := r.f
			args = append(args, f.MessageID, r.queue.Recipient, r.queue.Name, f.Scene, f.RulesVersion, string(f.ShadowOf),
				f.Bypass, s.dbTimeOrNull(f.DeferredFrom), f.DigestCount, nonNil(f.Data), s.dbTime(r.at))
		}
		err := tx.Exec(multiRow(`INSERT INTO released_forwards (`+outboxColumns+`)`, 11, len(chunk))+
			` ON CONFLICT (message_id) DO NOTHING`, args...).Error
		if err != nil {
			return fmt.Errorf("write released forwards: %w", err)
		}
	}
	return nil
}

// Outbox returns up to limit forwards of settled messages not yet Sent, in
// the order they were settled (gate.HoldStore).
func (s *Store) Outbox(ctx context.Context, limit int) ([]gate.Forward, error) {
	const op = "read released forwards"
	if limit <= 0 {
		return nil, fmt.Errorf("%s: %w: %w: want a positive limit, got %d", op, gate.ErrPermanent, gate.ErrBadRequest, limit)
	}
	rows, err := s.db.WithContext(ctx).Raw(`SELECT `+outboxColumns+` FROM released_forwards ORDER BY seq LIMIT ?`, limit).Rows()
	if err != nil {
		return nil, classify(op, err)
	}
	defer rows.Close()
	var fs []gate.Forward
	for rows.Next() {
		var (
			f                  gate.Forward
			recipient, queue   string
			shadowOf           string
			deferred, released scanTime
		)
		if err := rows.Scan(&f.MessageID, &recipient, &queue, &f.Scene, &f.RulesVersion, &shadowOf, &f.Bypass,
			&deferred, &f.DigestCount, &f.Data, &released); err != nil {
			return nil, classify(op, err)
		}
		f.ShadowOf, f.DeferredFrom = gate.Action(shadowOf), deferred.t
		fs = append(fs, f)
	}
	if err := rows.Err(); err != nil {
		return nil, classify(op, err)
	}
	return fs, nil
}

// Sent removes the forwards of ids from the outbox: the outbound stream
// stored them (gate.HoldStore). An id not there (sent by another gate
// already) is no error.
func (s *Store) Sent(ctx context.Context, ids []string) error {
	for chunk := range slices.Chunk(ids, chunkRows) {
		if err := s.db.WithContext(ctx).Exec(`DELETE FROM released_forwards WHERE message_id IN ?`, chunk).Error; err != nil {
			return classify("mark released forwards sent", err)
		}
	}
	return nil
}
