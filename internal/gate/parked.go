package gate

import (
	"strconv"
	"time"
)

// ParkedRecord is the audit record of a delivery parked after exhausting
// its deliveries undecided, counted at at in its scene's hourly counters
// (received and parked). The scene is read as a decision reads it, within
// maxBytes; a message that cannot be read counts under no scene, as
// invalid ones do. Its key is the message's GATE_IN sequence with its id,
// so a second park of the same message finds the key claimed and changes
// nothing.
func ParkedRecord(d Delivery, maxBytes int, at time.Time) Record {
	msg, _ := ParseDelivery(d, maxBytes)
	// Only a checked id goes into the key: a header id is any bytes, and an
	// audit store refusing the key would retry the park for ever.
	key := "parked:" + strconv.FormatUint(d.Seq, 10) + ":" + msg.ID
	return Record{Key: key, Scene: msg.Scene, Outcome: OutcomeParked, At: at}
}
