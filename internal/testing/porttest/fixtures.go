package porttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// T0 is on the hour, so that hour boundaries in tests are easy to read.
var T0 = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

// Record is a decided message of scene without an audit row.
func Record(key, scene string, o gate.Outcome, at time.Time) gate.Record {
	return gate.Record{Key: key, Scene: scene, Outcome: o, At: at}
}

// Suppressed is a suppressed message of scene for recipient, with its
// audit row.
func Suppressed(key, scene, recipient string, at time.Time) gate.Record {
	r := Record(key, scene, gate.OutcomeSuppress, at)
	r.Suppression = &gate.Suppression{
		MessageID:     key,
		Scene:         scene,
		Recipient:     recipient,
		Priority:      gate.PriorityNormal,
		Scope:         gate.ScopeScene,
		LimitWindow:   gate.Duration(time.Hour),
		LimitMax:      1,
		CountSeen:     1,
		Reason:        "limit",
		RulesVersion:  "v1",
		DecidedAt:     at,
		NextAllowedAt: at.Add(time.Hour),
		Payload:       `{"text":"disk ` + key + ` full"}`,
	}
	return r
}

// HeldRecord is the record of a message held in queue of recipient:
// deferred (its queue the scene) or collected for a digest, due at due.
func HeldRecord(key, scene, recipient, queue string, kind gate.HoldKind, seq uint64, at, due time.Time) gate.Record {
	r := Suppressed(key, scene, recipient, at)
	r.Outcome = gate.OutcomeDefer
	var expires time.Time
	if kind == gate.HoldDigest {
		r.Outcome = gate.OutcomeDigest
	} else {
		expires = at.Add(6 * time.Hour)
	}
	r.Suppression.HeldAs = kind
	r.Hold = &gate.Held{
		MessageID: key, Kind: kind, Queue: gate.Queue{Recipient: recipient, Name: queue}, Scene: scene,
		Priority: gate.PriorityNormal, TZ: "Asia/Shanghai", Seq: seq, HeldAt: at, DueAt: due, Expires: expires,
		Fallback: gate.ActionSuppress, Reason: gate.ReasonLimit,
		Payload: []byte("{\"text\":\"" + key + "\"}\x00\xff"), // forwarded as sent, whatever the bytes
	}
	return r
}

// Keys returns n distinct keys that sort in the order made.
func Keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// HeldIDs lists the message ids of each queue handed over by Settle.
func HeldIDs(due [][]gate.Held) [][]string {
	out := make([][]string, len(due))
	for i, q := range due {
		for _, h := range q {
			out[i] = append(out[i], h.MessageID)
		}
	}
	return out
}

// mustCommit commits recs or fails the test; it returns Commit's known keys.
func mustCommit(tb testing.TB, log gate.AuditLog, recs ...gate.Record) []string {
	tb.Helper()
	known, err := log.Commit(context.Background(), recs)
	if err != nil {
		tb.Fatalf("Commit(%d records): %v", len(recs), err)
	}
	return known
}

// decided is Decided or a failed test.
func decided(tb testing.TB, log gate.AuditLog, keys ...string) map[string]gate.Prior {
	tb.Helper()
	got, err := log.Decided(context.Background(), keys)
	if err != nil {
		tb.Fatalf("Decided(%d keys): %v", len(keys), err)
	}
	return got
}
