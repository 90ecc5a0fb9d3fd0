package gormstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/antifatigue/gate/internal/gate"
)

// commitFresh writes a batch whose keys are all new to the ledger:
// commitOnPostgres has locked each key's hash and left out the keys some
// partition of the ledger holds already, so no other gate can claim them
// meanwhile, on either side of a partition boundary.
// Its INSERTs have no ON CONFLICT: a unique violation could only come from
// a bug, and fails the whole statement, which rolls it back and is retried
// as any failed commit. Nothing then joins the keys claimed, and the batch's counters
// arrive summed per (scene, hour). An ON CONFLICT clause has PostgreSQL look
// each row up in the unique index before inserting it (speculative
// insertion), and then confirm the row in the WAL: with the joins, that was
// a quarter of the server's CPU per record (perf, BenchmarkCommit500).
//
// The ledger rows go first: the other rows wait on ledgered (a one-time
// filter, true unless commitAtOnce found a key held), and the counter and
// held rows on the queue rows too. So concurrent commits meet first on the keys' locks,
// in hash order, and take queue rows before counter and held rows, as
// Settle does.
//
// A batch's statement holds only the parts its rows need (commitShape): a
// batch of checks has no held messages, and most have no audit row. Each
// part costs PostgreSQL its plan nodes' set-up on every run, rows or none,
// and that set-up was the largest share of its CPU at 1,000 checks a
// second (perf: ExecutorStart, a quarter of the backend's time).
func commitFresh(shape commitShape) string { return freshStatements[shape] }

// commitAtOnce is commitFresh for a batch not yet known to be fresh: it
// first counts the keys of $1 the ledger holds (hits), and writes
// nothing unless that count is 0. It returns the count and the number of
// ledger rows written. Sent in one pipeline after claimLocks, it is the
// whole commit in one round trip (commitOnPostgres).
func commitAtOnce(shape commitShape) string { return atOnceStatements[shape] }

// commitAtOnceName is the name commitAtOnce(shape) is prepared under on
// each connection: one constant text per shape, so one plan per shape to
// keep per backend.
func commitAtOnceName(shape commitShape) string {
	return fmt.Sprintf("gate_commit_at_once_%d", shape)
}

// commitShape says which parts a batch's commit statement holds beside the
// claim and the counters, which every batch has.
type commitShape uint8

const (
	withAudit   commitShape = 1 << iota // audit rows (suppressions)
	withHeld                            // held messages, and their queue rows
	withAnswers                         // check answers
	everyPart   = withAudit | withHeld | withAnswers
)

// freshStatements and atOnceStatements are the texts of commitFresh and
// commitAtOnce, by shape.
var freshStatements, atOnceStatements = func() (fresh, atOnce [everyPart + 1]string) {
	for shape := range everyPart + 1 {
		fresh[shape] = freshStatement(new(paramSeq), false, shape)
		atOnce[shape] = freshStatement(new(paramSeq), true, shape)
	}
	return fresh, atOnce
}()

// freshStatement is the text of commitFresh, its parameters numbered in the
// order of commitColumns.freshArgs; atOnce makes it commitAtOnce.
func freshStatement(p *paramSeq, atOnce bool, shape commitShape) string {
	const first = ` WHERE (SELECT n FROM ledgered) > 0`
	var hits, claimIf, counted, last string
	if atOnce {
		hits = `hits AS (
	SELECT count(*) AS n FROM unnest($1::text[]) AS k(k)
	CROSS JOIN LATERAL (SELECT 1 FROM decisions WHERE "key" = k.k LIMIT 1) AS d
), `
		claimIf = ` WHERE (SELECT n FROM hits) = 0`
		counted = `, counted AS (`
		last = `
)
SELECT (SELECT n FROM hits), (SELECT n FROM ledgered)`
	}
	q := `WITH ` + hits + `claimed AS (
	INSERT INTO decisions (` + claimColumns + `)
	SELECT ` + p.unnests("", claimTypes...) + claimIf + `
	RETURNING 1
), ledgered AS (
	SELECT count(*) AS n FROM claimed
)`
	if shape&withAudit != 0 {
		q += `, audited AS (
	INSERT INTO suppressions (` + auditColumns + `)
	SELECT ` + p.unnests("", auditTypes...) + first + `
	ORDER BY 1
)`
	}
	queuesLocked := ""
	if shape&withHeld != 0 {
		queuesLocked = ", queues_locked"
		q += `, holds AS (
	SELECT ` + p.unnests(heldColumns, heldTypes...) + `
), ` + queueRows(first) + `, kept AS (
	INSERT INTO held (` + heldColumns + `)
	SELECT ` + heldColumns + ` FROM holds, queues_locked` + first + `
	ORDER BY recipient COLLATE "C", queue COLLATE "C", seq, message_id COLLATE "C"
)`
	}
	if shape&withAnswers != 0 {
		q += `, answered AS (
	INSERT INTO check_answers (id, answer, decided_at)
	SELECT v.id, v.answer, v.decided_at FROM unnest(` + p.arrays("text", "text", "timestamptz") + `) AS v(id, answer, decided_at)
	` + answerUnlessStored + ` AND (SELECT n FROM ledgered) > 0
	ORDER BY v.id
)`
	}
	return q + counted + `
INSERT INTO scene_counters (scene, hour, ` + eachCounter("%s", ", ") + `)
SELECT scene, hour, ` + eachCounter("%s", ", ") + `
FROM unnest(` + p.arrays(append([]string{"text", "timestamptz"}, slices.Repeat([]string{"bigint"}, gate.NumCounters)...)...) + `)
	AS c(scene, hour, ` + eachCounter("%s", ", ") + `)` + queuesLocked + first + `
ORDER BY scene COLLATE "C", hour` + addCounts + last
}

// unnests is "unnest($n::t1[]) AS name1, unnest($n+1::t2[]) AS name2, …",
// one parameter per type, named by names (comma-separated) unless empty.
// In the select list, PostgreSQL hands the arrays' elements on one row at
// a time (ProjectSet) and zips them as unnest(a, b, …) does; unnest() in
// FROM first copied each array into a tuplestore of its own.
func (p *paramSeq) unnests(names string, types ...string) string {
	var as []string
	if names != "" {
		as = strings.Split(names, ", ")
	}
	parts := strings.Split(p.arrays(types...), ", ")
	for i := range parts {
		parts[i] = "unnest(" + parts[i] + ")"
		if as != nil {
			parts[i] += " AS " + as[i]
		}
	}
	return strings.Join(parts, ", ")
}

// shape is the commit statement the batch needs.
func (c *commitColumns) shape() commitShape {
	var shape commitShape
	if len(c.sup.key) > 0 {
		shape |= withAudit
	}
	if len(c.held.key) > 0 {
		shape |= withHeld
	}
	if len(c.answers.ids) > 0 {
		shape |= withAnswers
	}
	return shape
}

// freshArgs are the parameters of commitFresh(shape): the ledger's columns,
// the audit rows' and the held messages' (without the key the other statement
// joins on), the checks' answers, and the counters summed per (scene, hour),
// each part only when shape holds it. A held message
// whose audit row carries its very bytes gets an empty payload, as
// commitPostgres's kept CTE gives it: here every audit row is written.
func (c *commitColumns) freshArgs(shape commitShape) []any {
	args := []any{c.keys, c.outcomes, c.ats, c.scenes, c.recipients, c.priorities, c.zones, c.bodyHashes}
	if shape&withAudit != 0 {
		args = append(args, c.sup.args()[1:]...)
	}
	if shape&withHeld != 0 {
		args = append(args, c.heldArgs()...)
	}
	if shape&withAnswers != 0 {
		args = append(args, nonNil(c.answers.ids), nonNil(c.answers.texts), nonNil(c.answers.ats))
	}
	var (
		scenes = make([]string, 0, len(c.sums))
		hours  = make([]time.Time, 0, len(c.sums))
		sums   [gate.NumCounters][]int64
	)
	for _, row := range c.sums {
		scenes, hours = append(scenes, row.Scene), append(hours, row.hour)
		for j, v := range row.Counters() {
			sums[j] = append(sums[j], *v)
		}
	}
	args = append(args, scenes, hours)
	for _, v := range sums {
		args = append(args, nonNil(v))
	}
	return args
}

// heldArgs are the held messages' columns for freshArgs.
func (c *commitColumns) heldArgs() []any {
	held := c.held.args()[1:]
	if len(c.held.payload) > 0 {
		audited := make(map[string]string, len(c.sup.messageID))
		for i, id := range c.sup.messageID {
			if p := c.sup.payload[i]; p != nil {
				audited[id] = *p
			}
		}
		payloads := make([][]byte, len(c.held.payload))
		for i, p := range c.held.payload {
			if a, ok := audited[c.held.messageID[i]]; ok && a == string(p) {
				p = []byte{}
			}
			payloads[i] = p
		}
		held[len(held)-1] = payloads
	}
	return held
}

// uniqueViolation reports whether err is PostgreSQL's unique_violation.
func uniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
