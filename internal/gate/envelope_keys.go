package gate

import (
	"bytes"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Keys match exactly. encoding/json matches a key to a field
// case-insensitively and lets the last of two equal keys win; a reader
// downstream may do neither. A body that two readers could read apart
// (`{"receive_id":"victim","Receive_Id":"decoy"}`: counted against one
// recipient, delivered to the other) is refused instead of read one way:
// a top-level key given twice, or one that is a known field's name in
// other letter case, makes the body ambiguous. Every body the gate parses
// from outside (envelopes, checks, refunds, preferences) is held to this
// one check, in the scan that reads it (match) or through CheckJSONBody.
//
// Only the top-level object is checked: the gate reads nothing below it
// for a decision. content is forwarded as sent, and what a downstream
// reader makes of it is between the producer and that reader.

// match returns the index of the field the key data[start:end] names,
// exactly, or -1. A top-level key given twice, or one that differs from a
// field's name only in case (as encoding/json folds keys, so that "ſcene"
// is "scene" in other case) makes the body ambiguous; in stream mode an
// unknown key is a field error.
func (s *envScan) match(start, end int, escaped bool) int {
	key := s.data[start:end]
	if escaped {
		key = []byte(unquote(s.data[start-1 : end+1]))
	}
	for f := range s.fields {
		if string(key) == s.fields[f].name {
			if s.seen&(1<<f) != 0 {
				s.ambiguity(fmt.Sprintf("key %q is given twice", clip(string(key))))
			}
			s.seen |= 1 << f
			return f
		}
	}
	if f := s.variant(key); f >= 0 {
		s.ambiguity(fmt.Sprintf("key %q is %q in other letter case: keys match exactly", clip(string(key)), s.fields[f].name))
		return -1
	}
	if s.stream {
		s.fieldError(fmt.Sprintf("json: unknown field %q", key))
		return -1
	}
	if s.others.add(key) {
		s.ambiguity(fmt.Sprintf("key %q is given twice", clip(string(key))))
	}
	return -1
}

// variant returns the index of the field whose name key folds to, as
// encoding/json folds keys, or -1.
func (s *envScan) variant(key []byte) int {
	folded := key
	for _, c := range key {
		if c >= utf8.RuneSelf {
			folded = foldName(key)
			break
		}
	}
	for f := range s.fields {
		if foldedEqual(folded, s.fields[f].folded) {
			return f
		}
	}
	return -1
}

// ambiguity records why the body is ambiguous, the first reason only.
func (s *envScan) ambiguity(reason string) {
	if s.ambiguous == "" {
		s.ambiguous = reason
	}
}

// keySet holds the top-level keys a scan met that name none of its
// fields, to find one given twice. An envelope has few such keys, if any:
// the first ones are kept as slices and compared one by one, without an
// allocation; past them, a map keeps the scan linear in the body.
type keySet struct {
	n    int
	few  [8][]byte
	many map[string]struct{}
}

// add adds key and reports whether it was there already. key must stay
// unchanged while the set is used.
func (k *keySet) add(key []byte) (dup bool) {
	if k.many == nil {
		for _, o := range k.few[:k.n] {
			if bytes.Equal(o, key) {
				return true
			}
		}
		if k.n < len(k.few) {
			k.few[k.n] = key
			k.n++
			return false
		}
		k.many = make(map[string]struct{}, 4*len(k.few))
		for _, o := range k.few {
			k.many[string(o)] = struct{}{}
		}
	}
	if _, ok := k.many[string(key)]; ok {
		return true
	}
	k.many[string(key)] = struct{}{}
	return false
}

// CheckJSONBody holds a JSON body from outside that is decoded with
// encoding/json to what an envelope's scan holds an envelope: within
// maxBytes (0 means DefaultMaxMessageBytes), not empty, valid UTF-8
// without NUL bytes (json would read a bad byte as U+FFFD, a name nobody
// sent), no string with a lone surrogate escape ("\ud800", which json
// reads as U+FFFD too: json reads every string of such a body, so each
// is held to it), and its top-level keys unambiguous: none given
// twice, none one of known in other letter case, which json cannot tell.
// A body that is not JSON passes these checks: its decoder says why it is
// not. Every error is an *InvalidError. known holds at most maxScanFields
// names.
func CheckJSONBody(data []byte, maxBytes int, known ...string) error {
	if err := checkBody(data, maxBytes, "UTF-8 JSON"); err != nil {
		return err
	}
	if len(known) > maxScanFields {
		panic("gate: CheckJSONBody of more than maxScanFields keys")
	}
	var fields [maxScanFields]scanField
	for i, k := range known {
		fields[i] = anyField(k)
	}
	s := envScan{data: data, fields: fields[:len(known)], allText: true}
	switch outcome, reason := s.run(); outcome {
	case scanBadText:
		return invalidf("body is not valid UTF-8 JSON: %s", reason)
	case scanAmbiguous:
		return invalidf("body is ambiguous: %s", reason)
	}
	return nil
}

// foldedEqual reports whether key, ASCII or folded already, folds to folded
// (which is upper case ASCII).
func foldedEqual(key []byte, folded string) bool {
	if len(key) != len(folded) {
		return false
	}
	for i, c := range key {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != folded[i] {
			return false
		}
	}
	return true
}

// foldName folds a key as encoding/json does before it looks the key up
// among a struct's fields: ASCII letters to upper case, every other rune to
// the smallest rune of its simple folding orbit (so that "ſ" matches "s").
func foldName(in []byte) []byte {
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

// foldRune is the smallest rune of r's simple folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}
