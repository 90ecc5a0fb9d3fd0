package gate

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The fields a scan captures: which top-level keys name them, as
// encoding/json matches keys to a struct's fields, and their values.

// scanField is one top-level field a scan captures.
type scanField struct {
	name   string // as the struct tag spells it: type errors name it so
	folded string // name folded as encoding/json folds keys (foldName)
	isBool bool   // a *bool field; every other one is a *string
}

// stringField is the *string field the tag name names.
func stringField(name string) scanField {
	return scanField{name: name, folded: string(foldName([]byte(name)))}
}

// boolField is the *bool field the tag name names.
func boolField(name string) scanField {
	f := stringField(name)
	f.isBool = true
	return f
}

// The envelope's fields as a scan (envScan) captures them, indexes into
// envelopeFields; json.Unmarshal into a struct of *string fields tagged
// with these names reads the same.
const (
	envID = iota
	envUUID
	envScene
	envReceiveIDType
	envReceiveID
	envPriority
	envTZ
)

var envelopeFields = []scanField{
	envID:            stringField("id"),
	envUUID:          stringField("uuid"),
	envScene:         stringField("scene"),
	envReceiveIDType: stringField("receive_id_type"),
	envReceiveID:     stringField("receive_id"),
	envPriority:      stringField("priority"),
	envTZ:            stringField("tz"),
}

// The fields of a check (an envelope's, without the uuid alias, and
// dry_run), indexes into checkFields; a json.Decoder into a struct of
// pointer fields tagged with these names, with DisallowUnknownFields,
// reads the same.
const (
	chkID = iota
	chkScene
	chkReceiveIDType
	chkReceiveID
	chkPriority
	chkTZ
	chkDryRun
)

var checkFields = []scanField{
	chkID:            stringField("id"),
	chkScene:         stringField("scene"),
	chkReceiveIDType: stringField("receive_id_type"),
	chkReceiveID:     stringField("receive_id"),
	chkPriority:      stringField("priority"),
	chkTZ:            stringField("tz"),
	chkDryRun:        boolField("dry_run"),
}

// scanValue is what a scan found for a field: the last occurrence wins, and
// null leaves it absent, as json.Unmarshal into a pointer field does.
type scanValue struct {
	kind       uint8
	escaped    bool // a string with a backslash: unquote it before use
	start, end int  // a string's bytes between its quotes
}

// Kinds of a scanValue.
const (
	valAbsent uint8 = iota
	valString
	valTrue
	valFalse
)

// maxScanFields bounds the fields of one scan, so that their values live
// in an array in the scan, not on the heap.
const maxScanFields = 8

// match returns the index of the field the key data[start:end] names, as
// encoding/json matches a key to a struct field: exactly or else folded
// (case-insensitively, with Unicode's simple folding), or -1. In stream
// mode an unknown key is a field error.
func (s *envScan) match(start, end int, escaped bool) int {
	key := s.data[start:end]
	if escaped {
		key = []byte(unquote(s.data[start-1 : end+1]))
	}
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
	if s.stream {
		s.fieldError(fmt.Sprintf("json: unknown field %q", key))
	}
	return -1
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

// capture scans the value of field f at s.i.
func (s *envScan) capture(f int) bool {
	fl, v := &s.fields[f], &s.vals[f]
	switch c := s.data[s.i]; {
	case c == 'n':
		if !s.literal("null") {
			return false
		}
		*v = scanValue{}
		return true
	case c == '"' && !fl.isBool:
		start := s.i + 1
		escaped, ok := s.str()
		*v = scanValue{kind: valString, escaped: escaped, start: start, end: s.i - 1}
		return ok
	case c == 't' && fl.isBool:
		*v = scanValue{kind: valTrue}
		return s.literal("true")
	case c == 'f' && fl.isBool:
		*v = scanValue{kind: valFalse}
		return s.literal("false")
	}
	want := "string"
	if fl.isBool {
		want = "bool"
	}
	s.fieldError(fmt.Sprintf("field %q must be a %s, not a %s", fl.name, want, kindName(s.data[s.i])))
	return s.value()
}

// unquote decodes a JSON string with escapes, quotes included, as
// encoding/json does (a lone surrogate becomes U+FFFD). The scan has
// validated it.
func unquote(q []byte) string {
	var v string
	if err := json.Unmarshal(q, &v); err != nil {
		panic("gate: unquote of a scanned string: " + err.Error())
	}
	return v
}

// raw is field f's string as the body holds it, nil when absent.
func (s *envScan) raw(f int) []byte {
	v := s.vals[f]
	if v.kind != valString {
		return nil
	}
	return s.data[v.start:v.end]
}

// envelope is the envelope a scan with envelopeFields found; withTZ says
// whether the tz field is read (a Gate-TZ header wins over it). The plain
// values the message keeps share one allocation; the id type and priority
// are their constants when known, as they nearly always are.
func (s *envScan) envelope(withTZ bool) envelope {
	kept := [...]int{envID, envUUID, envScene, envReceiveID, envTZ}
	if !withTZ {
		kept[len(kept)-1] = -1
	}
	n := 0
	for _, f := range kept {
		if f >= 0 && !s.vals[f].escaped {
			n += len(s.raw(f))
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, f := range kept {
		if f >= 0 && !s.vals[f].escaped {
			b.Write(s.raw(f))
		}
	}
	all := b.String()
	var vs [len(kept)]string
	for k, f := range kept {
		switch {
		case f < 0:
		case s.vals[f].escaped:
			vs[k] = s.text(f)
		default:
			n := len(s.raw(f))
			vs[k], all = all[:n], all[n:]
		}
	}
	return envelope{ID: vs[0], UUID: vs[1], Scene: vs[2], ReceiveID: vs[3], TZ: vs[4],
		ReceiveIDType: s.known(envReceiveIDType), Priority: s.known(envPriority)}
}

// knownText holds the receive_id_types and priorities (receiveIDTypes and
// the Priority constants), so that reading one a body names, as it nearly
// always does, shares the constant instead of allocating.
var knownText = func() map[string]string {
	m := make(map[string]string)
	for t := range receiveIDTypes {
		m[t] = t
	}
	for _, p := range []Priority{PriorityLow, PriorityNormal, PriorityHigh, PriorityUrgent} {
		m[string(p)] = string(p)
	}
	return m
}()

// known is field f's string, without an allocation when it is a known
// receive_id_type or priority.
func (s *envScan) known(f int) string {
	if v := s.vals[f]; v.kind != valString || v.escaped {
		return s.text(f)
	}
	b := s.raw(f)
	if k, ok := knownText[string(b)]; ok {
		return k
	}
	return string(b)
}

// text is field f's string, unescaped: "" when absent.
func (s *envScan) text(f int) string {
	v := s.vals[f]
	switch {
	case v.kind != valString:
		return ""
	case v.escaped:
		return unquote(s.data[v.start-1 : v.end+1])
	}
	return string(s.data[v.start:v.end])
}
