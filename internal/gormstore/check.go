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

	"gorm.io/gorm"

	"github.com/antifatigue/gate/internal/gate"
)

var _ gate.CheckAnswersBatch = (*Store)(nil)

// Answer returns the answer stored for the check of id and, in the same
// statement, what the ledger holds of id: a check asked again gets its first
// answer, and a check of an id decided on gate.in gets that outcome. An id
// the database refuses (on PostgreSQL, one that is not UTF-8 or holds a NUL
// byte) gives an error wrapping gate.ErrPermanent; other errors wrap
// gate.ErrUnavailable.
func (s *Store) Answer(ctx context.Context, id string) (gate.CheckAnswer, bool, gate.Prior, error) {
	found, err := s.Answers(ctx, []string{id})
	if err != nil {
		return gate.CheckAnswer{}, false, gate.Prior{}, err
	}
	sa := found[id]
	return sa.Answer, sa.Found, sa.Prior, nil
}

// Answers is Answer for many ids, in one statement. An id the database
// refuses fails the whole call, as Answer fails for it.
func (s *Store) Answers(ctx context.Context, ids []string) (map[string]gate.StoredAnswer, error) {
	const op = "check answer"
	out := make(map[string]gate.StoredAnswer, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	// One row per id whatever is found: each id joined to each table.
	var q strings.Builder
	args := make([]any, len(ids))
	for i, id := range ids {
		if i > 0 {
			q.WriteString(" UNION ALL ")
		}
		q.WriteString("SELECT CAST(? AS text) AS k")
		args[i] = id
	}
	rows, err := s.db.WithContext(ctx).Raw(`SELECT q.k, a.answer, d.outcome, d.decided_at, d.scene, d.recipient
FROM (`+q.String()+`) q
LEFT JOIN check_answers a ON a.id = q.k
LEFT JOIN decisions d ON d."key" = q.k
ORDER BY a.decided_at DESC`, args...).Rows()
	if err != nil {
		return nil, classify(op, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                                string
			answer, outcome, scene, recipient sql.NullString
			at                                scanTime
		)
		if err := rows.Scan(&id, &answer, &outcome, &at, &scene, &recipient); err != nil {
			return nil, classify(op, err)
		}
		var sa gate.StoredAnswer
		if outcome.Valid {
			sa.Prior = gate.Prior{Outcome: gate.Outcome(outcome.String), At: at.t, Scene: scene.String, Recipient: recipient.String}
		}
		if answer.Valid {
			if err := json.Unmarshal([]byte(answer.String), &sa.Answer); err != nil {
				// A row this store wrote and cannot read back: the ledger's
				// outcome stands in for it.
				s.log.WarnContext(ctx, "a stored check answer is unreadable; answering with the ledger's outcome", "id", id, "err", err)
				sa.Answer = gate.CheckAnswer{}
			} else {
				sa.Found = true
			}
		}
		out[id] = sa // the oldest answer comes last, and stays
	}
	if err := rows.Err(); err != nil {
		return nil, classify(op, err)
	}
	return out, nil
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
		row := "(?, ?, ?)"
		if s.partitioned {
			// No unique index holds an id across partitions: an id is
			// written unless one is stored, and of two gates saving it at
			// once Answers reads the older.
			q.WriteString("INSERT INTO check_answers (id, answer, decided_at) SELECT * FROM (VALUES ")
			row = "(CAST(? AS text), CAST(? AS text), CAST(? AS timestamptz))"
		} else {
			q.WriteString("INSERT INTO check_answers (id, answer, decided_at) VALUES ")
		}
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
			q.WriteString(row)
			args = append(args, id, string(b), s.dbTime(at))
		}
		if s.partitioned {
			q.WriteString(") AS v(id, answer, decided_at) WHERE NOT EXISTS (SELECT 1 FROM check_answers a WHERE a.id = v.id)")
		} else {
			q.WriteString(" ON CONFLICT (id) DO NOTHING")
		}
		if !s.partitioned {
			if err := s.db.WithContext(ctx).Exec(q.String(), args...).Error; err != nil {
				return classify(op, err)
			}
			continue
		}
		err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if _, err := tx.Statement.ConnPool.ExecContext(ctx, answerLocks, part); err != nil {
				return err
			}
			return tx.Exec(q.String(), args...).Error
		})
		if err != nil {
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
	if s.partitioned {
		return s.prunePartitions(ctx, checkAnswersTable, now.Add(-s.retention), pruneBatch, nil)
	}
	return s.deleteInBatches(ctx, "prune check answers", `DELETE FROM check_answers WHERE id IN
	(SELECT id FROM check_answers WHERE decided_at < ? LIMIT ?)`,
		pruneBatch, nil, s.dbTime(now.Add(-s.retention)))
}
