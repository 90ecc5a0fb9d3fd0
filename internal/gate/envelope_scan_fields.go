package gate

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The fields a scan captures: which top-level keys name them (exactly, as
// a case-sensitive reader matches them), and their values.

// scanField is one top-level field a scan knows.
type scanField struct {
	name   string // as the struct tag spells it: type errors name it so
	folded string // name folded as encoding/json folds keys (foldName)
	kind   uint8  // what its value may be, and whether it is captured
}

// Kinds of a scanField.
const (
	fieldString uint8 = iota // a *string field, captured
	fieldBool                // a *bool field, captured
	fieldAny                 // any value, not captured: a key the scan only knows
)

// stringField is the *string field the tag name names.
func stringField(name string) scanField {
	return scanField{name: name, folded: string(foldName([]byte(name)))}
}

// boolField is the *bool field the tag name names.
func boolField(name string) scanField {
	f := stringField(name)
	f.kind = fieldBool
	return f
}

// anyField is a key a body may hold with any value, which the scan does
// not capture but holds to exact matching: a key in another case is
// refused, as for a captured field.
func anyField(name string) scanField {
	f := stringField(name)
	f.kind = fieldAny
	return f
}

// The envelope's fields as a scan (envScan) captures them, indexes into
// envelopeFields; json.Unmarshal into a struct of *string fields tagged
// with these names reads the same, for a body whose keys are unambiguous.
// msg_type and content are the envelope's two other fields (see
// docs/CONTRACT.md): not captured, since the gate decides nothing on them,
// but known, so that "Content" beside "content" is refused as "Scene" is.
const (
	envID = iota
	envUUID
	envScene
	envReceiveIDType
	envReceiveID
	envPriority
	envTZ
	envMsgType
	envContent
	envCancelKey
	envResolves
)

var envelopeFields = []scanField{
	envID:            stringField("id"),
	envUUID:          stringField("uuid"),
	envScene:         stringField("scene"),
	envReceiveIDType: stringField("receive_id_type"),
	envReceiveID:     stringField("receive_id"),
	envPriority:      stringField("priority"),
	envTZ:            stringField("tz"),
	envMsgType:       anyField("msg_type"),
	envContent:       anyField("content"),
	envCancelKey:     stringField("cancel_key"),
	envResolves:      stringField("resolves"),
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

// scanValue is what a scan found for a field: null leaves it absent, as
// json.Unmarshal into a pointer field does. A field given twice is refused
// (see match), so there is no last occurrence to win.
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
// in an array in the scan, not on the heap; envScan.seen has a bit for
// each.
const maxScanFields = 12

// envScan.seen must hold a bit for every field.
var _ [16 - maxScanFields]struct{}

// capture scans the value of field f at s.i.
func (s *envScan) capture(f int) bool {
	fl, v := &s.fields[f], &s.vals[f]
	if fl.kind == fieldAny {
		return s.value()
	}
	isBool := fl.kind == fieldBool
	switch c := s.data[s.i]; {
	case c == 'n':
		if !s.literal("null") {
			return false
		}
		*v = scanValue{}
		return true
	case c == '"' && !isBool:
		start := s.i + 1
		escaped, ok := s.str(true)
		*v = scanValue{kind: valString, escaped: escaped, start: start, end: s.i - 1}
		return ok
	case c == 't' && isBool:
		*v = scanValue{kind: valTrue}
		return s.literal("true")
	case c == 'f' && isBool:
		*v = scanValue{kind: valFalse}
		return s.literal("false")
	}
	want := "string"
	if isBool {
		want = "bool"
	}
	s.fieldError(fmt.Sprintf("field %q must be a %s, not a %s", fl.name, want, kindName(s.data[s.i])))
	return s.value()
}

// unquote decodes a JSON string with escapes, quotes included, as
// encoding/json does (a lone surrogate becomes U+FFFD, but a scan that
// meets one refuses the body: scanBadText). The scan has validated it.
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
		ReceiveIDType: s.known(envReceiveIDType), Priority: s.known(envPriority),
		CancelKey: s.text(envCancelKey), Resolves: s.text(envResolves)}
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
