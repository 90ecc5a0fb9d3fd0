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

	"github.com/jackc/pgx/v5"
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
	err := s.dialect.answers(s, ctx, ids, func(rows rowSource) error {
		defer rows.Close()
		for rows.Next() {
			var (
				id                                string
				answer, outcome, scene, recipient sql.NullString
				at                                scanTime
			)
			if err := rows.Scan(&id, &answer, &outcome, &at, &scene, &recipient); err != nil {
				return err
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
		return rows.Err()
	})
	if err != nil {
		return nil, classify(op, err)
	}
	return out, nil
}

// answersInOne is Answers' statement on SQLite: one row per id whatever is
// found, each id joined to each table, the oldest answer last.
func (s *Store) answersInOne(ctx context.Context, ids []string, scan func(rowSource) error) error {
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
		return err
	}
	return scan(rows)
}

// answersPostgres is Answers' statement on PostgreSQL: one row per id, its
// answer and its ledger row, each found by one index probe per partition
// (LATERAL, LIMIT 1). Joined to a list of constants instead, a batch of ids
// was planned as a parallel scan of every partition. An id has one answer
// at most (saveOnPostgres saves it under the id's lock, unless one is
// found), so there is no order to ask for: ORDER BY decided_at LIMIT 1 had
// PostgreSQL walk the decided_at index for each id, 100-400 ms a batch in
// the soak.
const answersPostgres = `SELECT k.k, a.answer, d.outcome, d.decided_at, d.scene, d.recipient
FROM unnest($1::text[]) AS k(k)
LEFT JOIN LATERAL (SELECT answer FROM check_answers WHERE id = k.k LIMIT 1) AS a ON true
LEFT JOIN LATERAL (SELECT outcome, decided_at, scene, recipient FROM decisions WHERE "key" = k.k LIMIT 1) AS d ON true`

const answersPostgresName = "gate_answers"

func (s *Store) answersOnPostgres(ctx context.Context, ids []string, scan func(rowSource) error) error {
	return s.queryGeneric(ctx, answersPostgresName, answersPostgres, []any{ids}, scan)
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
	c, err := answersOf(ids, answers)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if s.partitioned {
		return s.saveOnPostgres(ctx, c)
	}
	if err := s.insertAnswers(s.db.WithContext(ctx), c); err != nil {
		return classify(op, err)
	}
	return nil
}

// insertAnswers writes c's answers on an unpartitioned table, in one INSERT
// per saveRows: an id with an answer stored already keeps it.
func (s *Store) insertAnswers(db *gorm.DB, c answerColumns) error {
	for lo := 0; lo < len(c.ids); lo += saveRows {
		hi := min(lo+saveRows, len(c.ids))
		args := make([]any, 0, 3*(hi-lo))
		for i := lo; i < hi; i++ {
			args = append(args, c.ids[i], c.texts[i], s.dbTime(c.ats[i]))
		}
		err := db.Exec(multiRow("INSERT INTO check_answers (id, answer, decided_at)", 3, hi-lo)+" ON CONFLICT (id) DO NOTHING", args...).Error
		if err != nil {
			return err
		}
	}
	return nil
}

// answerRow is what check_answers keeps of a: its JSON, and its decision
// time (now when a has none).
func answerRow(a gate.CheckAnswer) (string, time.Time, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: %w", gate.ErrPermanent, err)
	}
	at := a.DecidedAt
	if at.IsZero() {
		at = time.Now()
	}
	return string(b), at.UTC().Truncate(time.Microsecond), nil
}

// answerUnlessStored ends a SELECT of answers v whose id has none stored
// in any partition: each id is looked up by one index probe per partition
// (LATERAL, LIMIT 1).
const answerUnlessStored = `LEFT JOIN LATERAL (SELECT true AS found FROM check_answers a WHERE a.id = v.id LIMIT 1) AS x ON true
	WHERE x.found IS NULL`

// saveAnswers writes the answers of $1 (ids, sorted), $2 and $3 whose id
// has no answer stored.
const (
	saveAnswers = `INSERT INTO check_answers (id, answer, decided_at)
SELECT v.id, v.answer, v.decided_at FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS v(id, answer, decided_at)
` + answerUnlessStored + `
ORDER BY v.id`
	saveAnswersName = "gate_save_answers"
)

// StoresAnswersWithClaims says that Commit stores each record's Answer
// with its claim (gate.AnswersWithClaims): in commitAtOnce's and
// commitFresh's statement on PostgreSQL, in commitInTransaction's
// transaction on SQLite.
func (s *Store) StoresAnswersWithClaims() {}

var _ gate.AnswersWithClaims = (*Store)(nil)

// answerColumns are the answers of a batch's records, column by column.
type answerColumns struct {
	ids, texts []string
	ats        []time.Time
}

// put appends the answer a to id.
func (c *answerColumns) put(id string, a gate.CheckAnswer) error {
	text, at, err := answerRow(a)
	if err != nil {
		return err
	}
	c.ids, c.texts, c.ats = append(c.ids, id), append(c.texts, text), append(c.ats, at)
	return nil
}

// add appends r's answer; uniqueRecords has checked that it encodes.
func (c *answerColumns) add(r gate.Record) {
	_ = c.put(r.Key, *r.Answer)
}

// saveOnPostgres is SaveAll on partitioned tables, where no unique index
// holds an id across partitions: it takes the answer lock of each id, then
// writes those with no answer stored, in one pipeline (one round trip, one
// implicit transaction; the second statement's snapshot comes after the
// locks, as in commitAtOnceOnPostgres). Of two gates saving an id at once,
// the second finds the first's answer.
func (s *Store) saveOnPostgres(ctx context.Context, c answerColumns) error {
	b := new(pgx.Batch)
	b.Queue(answerLocksName, c.ids)
	b.Queue(saveAnswersName, c.ids, c.texts, c.ats)
	err := s.inOnePipeline(ctx, b, map[string]string{answerLocksName: answerLocks, saveAnswersName: saveAnswers}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		_, err := br.Exec()
		return err
	})
	if err != nil {
		return classify("save check answers", err)
	}
	return nil
}

// answersOf is answers (id to answer) column by column, in the order of ids.
func answersOf(ids []string, answers map[string]gate.CheckAnswer) (answerColumns, error) {
	var c answerColumns
	for _, id := range ids {
		if err := c.put(id, answers[id]); err != nil {
			return c, err
		}
	}
	return c, nil
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
