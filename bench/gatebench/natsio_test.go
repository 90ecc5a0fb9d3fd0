package main

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// Both forms of an ack subject give the stream, consumer, stream sequence
// and stored time; anything else is refused.
func TestParseAckSubject(t *testing.T) {
	for _, tt := range []struct {
		subject string
		want    ackSubject
		ok      bool
	}{
		{"$JS.ACK.GATE_IN.gate.1.42.40.1700000000000000000.7", ackSubject{"GATE_IN", "gate", 42, 1700000000000000000}, true},
		{"$JS.ACK.hub.ACCHASH.GATE_IN.gate.2.43.41.1700000000000000001.6.tok", ackSubject{"GATE_IN", "gate", 43, 1700000000000000001}, true},
		{"$JS.ACK.hub.ACCHASH.GATE_IN.gate.2.43.41.1700000000000000001.6", ackSubject{"GATE_IN", "gate", 43, 1700000000000000001}, true},
		{"$JS.ACK.GATE_IN.gate.1.x.40.1700000000000000000.7", ackSubject{}, false},
		{"$JS.ACK.GATE_IN.gate.1.42.40", ackSubject{}, false},
		{"$JS.NAK.GATE_IN.gate.1.42.40.1700000000000000000.7", ackSubject{}, false},
	} {
		got, ok := parseAckSubject(tt.subject)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("%s: got %+v, %t; want %+v, %t", tt.subject, got, ok, tt.want, tt.ok)
		}
	}
}

// A phase counts distinct stream sequences: an ack seen twice for one
// sequence is one outcome, a nak is no outcome, and acks of another
// consumer count nowhere. A repeat of an earlier phase's sequence does not
// count in the next phase either.
func TestAckWatchCountsDistinctSequences(t *testing.T) {
	w := &ackWatch{stream: "GATE_IN", consumer: "gate"}
	ack := func(seq, body string) {
		w.onAck(&nats.Msg{Subject: "$JS.ACK.GATE_IN.gate.1." + seq + ".1.1700000000000000000.0", Data: []byte(body)})
	}
	reached := w.expect(3)
	ack("1", "")
	ack("1", "+ACK")               // the same sequence acked again
	ack("2", "-NAK")               // handed back: no outcome yet
	ack("2", "+WPI")               // in progress: no outcome
	ack("2", "+NXT {\"batch\":1}") // then acked
	w.onAck(&nats.Msg{Subject: "$JS.ACK.GATE_IN.other.1.3.1.1700000000000000000.0"})
	select {
	case <-reached:
		t.Fatal("reached after 2 distinct sequences, want 3")
	default:
	}
	ack("3", "+TERM bad")
	select {
	case <-reached:
	default:
		t.Fatal("not reached after 3 distinct sequences")
	}
	lat, outcomes, naks, repeats, _ := w.seen()
	if outcomes != 3 || len(lat) != 3 || naks != 1 || repeats != 1 {
		t.Errorf("got %d outcomes, %d latencies, %d naks, %d repeats; want 3, 3, 1, 1", outcomes, len(lat), naks, repeats)
	}

	w.expect(1)
	ack("3", "") // a late repeat of the last phase
	if _, outcomes, _, repeats, _ := w.seen(); outcomes != 0 || repeats != 1 {
		t.Errorf("next phase: got %d outcomes, %d repeats; want 0, 1", outcomes, repeats)
	}
}
