package main

import (
	"bytes"
	"strconv"
	"strings"
)

// Reading an acknowledgement from its subject and body, as nats-server
// writes them: what ackWatch (natsio.go) counts.

// ackSubject is what the subject of an acknowledgement says.
type ackSubject struct {
	stream, consumer string
	seq              uint64 // the message's stream sequence
	stored           int64  // when the stream stored it, Unix ns
}

// parseAckSubject reads
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or
// the v2 form with domain and account hash after ACK (and a token at the
// end).
func parseAckSubject(subject string) (ackSubject, bool) {
	var tok [14]string
	n, rest := 0, subject
	for n < len(tok) {
		t, r, more := strings.Cut(rest, ".")
		tok[n], rest = t, r
		n++
		if !more {
			break
		}
	}
	if n < 2 || tok[0] != "$JS" || tok[1] != "ACK" {
		return ackSubject{}, false
	}
	var a ackSubject
	var seq, ts string
	switch {
	case n == 9:
		a.stream, a.consumer, seq, ts = tok[2], tok[3], tok[5], tok[7]
	case n >= 11:
		a.stream, a.consumer, seq, ts = tok[4], tok[5], tok[7], tok[9]
	default:
		return ackSubject{}, false
	}
	var err1, err2 error
	a.seq, err1 = strconv.ParseUint(seq, 10, 64)
	a.stored, err2 = strconv.ParseInt(ts, 10, 64)
	return a, err1 == nil && err2 == nil
}

// ackKind is what an acknowledgement's body does to its message.
type ackKind int

const (
	ackOther   ackKind = iota // +WPI (in progress) and anything unknown
	ackOutcome                // +ACK (or empty), +NXT, +TERM: the message is done
	ackNak                    // -NAK: handed back for redelivery
)

func kindOfAck(body []byte) ackKind {
	switch {
	case len(body) == 0 || bytes.HasPrefix(body, []byte("+ACK")) || bytes.HasPrefix(body, []byte("+TERM")) || bytes.HasPrefix(body, []byte("+NXT")):
		return ackOutcome
	case bytes.HasPrefix(body, []byte("-NAK")):
		return ackNak
	}
	return ackOther
}
