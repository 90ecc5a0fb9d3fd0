package gate

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ReasonReusedID is the reason of the audit row of a message whose id was
// first used for another scene or recipient: the row that tells its
// recipient why nothing came.
const ReasonReusedID = "reused_id"

// ErrReusedID marks an id used again for a different scene or recipient
// (ClassConflict): a conflict, not a duplicate. Asked again, it conflicts
// again.
var ErrReusedID = errors.New("id reused for another scene or recipient")

// Use is one use of an id: the scene and recipient it was decided for, and
// when.
type Use struct {
	Scene     string
	Recipient string
	At        time.Time
}

// ReusedError says an id was used again for another scene or recipient
// than its first use. It wraps ErrReusedID (ClassConflict): a check meeting
// it answers 409; the message path parks the message with it (Reused).
type ReusedError struct {
	ID    string
	First Use
}

func (e *ReusedError) Error() string {
	return fmt.Sprintf("id %q was first used for scene %q, recipient %q at %s: a different scene or recipient needs an id of its own",
		e.ID, e.First.Scene, e.First.Recipient, e.First.At.UTC().Format(time.RFC3339Nano))
}

// Unwrap makes a *ReusedError match ErrReusedID.
func (e *ReusedError) Unwrap() error { return ErrReusedID }

// Reuses is the one rule of reused ids: an id seen again with another
// scene or recipient than first is a conflict, m's *ReusedError; with the
// same scene and recipient it is a duplicate, and Reuses returns nil. A
// first use whose scene and recipient are both unknown (a ledger row
// written before the ledger kept them) is taken as the same: the gate
// keeps its earlier answer then, a duplicate.
func Reuses(first Use, m Message) *ReusedError {
	if first.Scene == "" && first.Recipient == "" {
		return nil
	}
	if first.Scene == m.Scene && first.Recipient == m.Recipient() {
		return nil
	}
	return &ReusedError{ID: m.ID, First: first}
}

// UseOf is the use a message made of its id when decided at at.
func UseOf(m Message, at time.Time) Use {
	return Use{Scene: m.Scene, Recipient: m.Recipient(), At: at}
}

// Use is the use of the id the ledger holds: its scene, recipient and time.
// An invalid message's prior keeps neither scene nor recipient, so it is
// never reused.
func (p Prior) Use() Use {
	if p.Outcome == OutcomeInvalid || p.Outcome == OutcomeParked {
		return Use{At: p.At}
	}
	return Use{Scene: p.Scene, Recipient: p.Recipient, At: p.At}
}

// Reused is the verdict on message m whose id e says was used before: an
// *InvalidError (the dead letter, ClassPark) whose reason names the first
// use, and which still matches ErrReusedID.
func (e *ReusedError) Reused() *InvalidError {
	return &InvalidError{Reason: "reused id: " + OneLine(e.Error(), 1024), Err: e}
}

// ReusedKey is the ledger key of the message delivered as the inbound
// stream's sequence seq whose id was reused: its own, since the id is the
// first use's, and the same on every redelivery, so that it is counted
// once.
func ReusedKey(seq uint64, id string) string {
	return "reused:seq:" + strconv.FormatUint(seq, 10) + ":" + id
}

// ReusedRecord is the ledger record of message m, delivered as seq, whose
// id e says was used before: counted once as invalid in m's scene, with an
// audit row for m's recipient (reason ReasonReusedID) that the report's
// "why didn't I get it?" lists. The row is filed under the record's key,
// not the id, which names the first use's row.
func ReusedRecord(m Message, seq uint64, at time.Time, rulesVersion string) Record {
	key := ReusedKey(seq, m.ID)
	return Record{Key: key, Scene: m.Scene, Outcome: OutcomeInvalid, At: at,
		Suppression: &Suppression{MessageID: key, Scene: m.Scene, Recipient: m.Recipient(), Priority: m.Priority,
			Reason: ReasonReusedID, RulesVersion: rulesVersion, DecidedAt: at, Payload: string(m.Raw)}}
}

// BodyHash is the short hash of a message's body (Raw) the ledger keeps
// with its key (Record.BodyHash): the first 8 bytes of its SHA-256. Eight
// bytes tell a producer's retry (the same body) from another message
// under its id, which a producer cannot make collide with a body it has
// not seen.
func BodyHash(raw []byte) int64 {
	sum := sha256.Sum256(raw)
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// BodyDiffers reports whether m, a message with the id whose first
// decision the ledger holds as p, for the same scene and recipient (a
// duplicate, not a reuse), has another body than the first: a second
// message that takes the first's outcome, where a producer's retry has the
// same body. Unknown when the ledger kept no hash (a check, a row written
// before it kept them): false.
func BodyDiffers(p Prior, m Message) bool {
	return p.BodyHash != 0 && p.BodyHash != BodyHash(m.Raw)
}
