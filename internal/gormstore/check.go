package gormstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

var _ gate.CheckAnswersSaver = (*Store)(nil)

// Answer returns the answer stored for the check of id and, in the same
// statement, what the ledger holds of id: a check asked again gets its first
// answer, and a check of an id decided on gate.in gets that outcome. An id
// the database refuses (on PostgreSQL, one that is not UTF-8 or holds a NUL
// byte) gives an error wrapping gate.ErrPermanent; other errors wrap
// gate.ErrUnavailable.
func (s *Store) Answer(ctx context.Context, id string) (gate.CheckAnswer, bool, gate.Prior, error) {
	const op = "check answer"
	var (
		answer, outcome sql.NullString
		at              scanTime
	)
	// One row whatever is found: the id joined to each table.
	err := s.db.WithContext(ctx).Raw(`SELECT a.answer, d.outcome, d.decided_at
FROM (SELECT CAST(? AS text) AS k) q
LEFT JOIN check_answers a ON a.id = q.k
LEFT JOIN decisions d ON d."key" = q.k`, id).Row().Scan(&answer, &outcome, &at)
	if err != nil {
		return gate.CheckAnswer{}, false, gate.Prior{}, classify(op, err)
	}
	var prior gate.Prior
	if outcome.Valid {
		prior = gate.Prior{Outcome: gate.Outcome(outcome.String), At: at.t}
	}
	if !answer.Valid {
		return gate.CheckAnswer{}, false, prior, nil
	}
	var a gate.CheckAnswer
	if err := json.Unmarshal([]byte(answer.String), &a); err != nil {
		// A row this store wrote and cannot read back: the ledger's outcome
		// stands in for it.
		s.log.WarnContext(ctx, "a stored check answer is unreadable; answering with the ledger's outcome", "id", id, "err", err)
		return gate.CheckAnswer{}, false, prior, nil
	}
	return a, true, prior, nil
}

// Save stores a as the answer to the check of id, unless one is stored
// already: the first answer stays. Errors are as Answer's.
func (s *Store) Save(ctx context.Context, id string, a gate.CheckAnswer) error {
	return s.SaveAll(ctx, map[string]gate.CheckAnswer{id: a})
}

// saveRows bounds the rows of one INSERT of SaveAll: three parameters a
// row stay far below SQLite's and PostgreSQL's limits on parameters.
const saveRows = 200

// SaveAll stores answers (id to answer) as Save stores each, in one INSERT
// per saveRows answers: an id with an answer stored already keeps it. The
// ids are inserted in order, so that two gates saving overlapping batches
// at once take their row locks in the same order and do not deadlock.
// Errors are as Save's; rows inserted before a failed INSERT stay.
func (s *Store) SaveAll(ctx context.Context, answers map[string]gate.CheckAnswer) error {
	const op = "save check answers"
	ids := slices.Sorted(maps.Keys(answers))
	for part := range slices.Chunk(ids, saveRows) {
		var q strings.Builder
		q.WriteString("INSERT INTO check_answers (id, answer, decided_at) VALUES ")
		args := make([]any, 0, 3*len(part))
		for i, id := range part {
			a := answers[id]
			b, err := json.Marshal(a)
			if err != nil {
				return fmt.Errorf("%s: %w: %w", op, gate.ErrPermanent, err)
			}
			at := a.DecidedAt
			if at.IsZero() {
				at = time.Now()
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?)")
			args = append(args, id, string(b), s.dbTime(at))
		}
		q.WriteString(" ON CONFLICT (id) DO NOTHING")
		if err := s.db.WithContext(ctx).Exec(q.String(), args...).Error; err != nil {
			return classify(op, err)
		}
	}
	return nil
}

// PruneCheckAnswers deletes the stored check answers older than the ledger's
// retention (Options.LedgerRetention), as Prune deletes the ledger's keys:
// an id asked again after that is a new check. It returns how many it
// deleted. Errors wrap gate.ErrUnavailable.
func (s *Store) PruneCheckAnswers(ctx context.Context, now time.Time) (int64, error) {
	cutoff := s.dbTime(now.Add(-s.retention))
	var total int64
	for {
		res := s.db.WithContext(ctx).Exec(`DELETE FROM check_answers WHERE id IN
	(SELECT id FROM check_answers WHERE decided_at < ? LIMIT ?)`, cutoff, pruneBatch)
		if res.Error != nil {
			return total, unavailable("prune check answers", res.Error)
		}
		total += res.RowsAffected
		if res.RowsAffected < pruneBatch {
			return total, nil
		}
	}
}
