package gate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The json-based parse the scan replaced, kept as the reference it must
// match: json.Unmarshal into pointer fields for a message, a json.Decoder
// with DisallowUnknownFields then a check for EOF for a check. Since keys
// match exactly, the reference refuses, before json decodes anything, a
// body whose top-level keys are ambiguous (refAmbiguity): json would read
// it case-insensitively and let the last of a repeated key win. Before
// that, it refuses a body with a lone surrogate escape (refLoneSurrogate),
// which json would read as U+FFFD.

// The keys the reference knows for each body, written out here rather than
// taken from the scan's field lists: an envelope's (with msg_type and
// content, never captured) and a check's.
var (
	envelopeKeys = []string{"id", "uuid", "scene", "receive_id_type", "receive_id", "priority", "tz", "msg_type", "content"}
	checkKeys    = []string{"id", "scene", "receive_id_type", "receive_id", "priority", "tz", "dry_run"}
)

// refAmbiguity is the reason a body's top-level keys are ambiguous, ""
// when they are not (or when json's reader stops before it can tell), found
// with a json.Decoder's tokens: the first key, in the body's order, that is
// given twice or is one of known in other letter case (bytes.EqualFold is
// how encoding/json folds keys). In stream mode, as for a check, keys not
// in known are refused as unknown already, so only known ones count twice.
func refAmbiguity(data []byte, known []string, stream bool) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		key := tok.(string)
		isKnown := slices.Contains(known, key)
		if seen[key] && (isKnown || !stream) {
			return fmt.Sprintf("key %q is given twice", clip(key))
		}
		seen[key] = true
		for _, k := range known {
			if key != k && bytes.EqualFold([]byte(key), []byte(k)) {
				return fmt.Sprintf("key %q is %q in other letter case: keys match exactly", clip(key), k)
			}
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return ""
		}
	}
	return ""
}

// The fields whose string values the gate reads, of an envelope and of a
// check: every key the reference knows but msg_type and content, which
// are forwarded as sent, and dry_run, a bool.
var (
	envelopeRead = []string{"id", "uuid", "scene", "receive_id_type", "receive_id", "priority", "tz"}
	checkRead    = []string{"id", "scene", "receive_id_type", "receive_id", "priority", "tz"}
)

// refLoneSurrogate is the reason data holds a lone surrogate escape where
// the gate reads text, "" when it holds none: in a top-level key, or in
// the string value of a key of read, the first in the body's order. It
// finds them with a json.Decoder's tokens and offsets, and judges each
// string's raw bytes with loneIn. Its answer means something only for a
// body whose first value json reads without a syntax error.
func refLoneSurrogate(data []byte, read []string) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return ""
	}
	for dec.More() {
		start := int(dec.InputOffset())
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		if r := loneIn(data, start, int(dec.InputOffset())); r != "" {
			return r
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return ""
		}
		end := int(dec.InputOffset())
		if slices.Contains(read, tok.(string)) && len(v) > 0 && v[0] == '"' {
			if r := loneIn(data, end-len(v), end); r != "" {
				return r
			}
		}
	}
	return ""
}

// loneIn is the reason data[from:to], JSON text from outside strings or
// whole strings, holds a lone surrogate escape, "" when it does not. In
// JSON a backslash appears only in a string, where it starts an escape,
// and a \u escape of a high surrogate (D800-DBFF) must be followed at once
// by one of a low surrogate (DC00-DFFF), which no other may be.
func loneIn(data []byte, from, to int) string {
	hex := func(i int) int {
		if i+4 > to {
			return -1
		}
		v, err := strconv.ParseUint(string(data[i:i+4]), 16, 16)
		if err != nil {
			return -1
		}
		return int(v)
	}
	for i := from; i < to; i++ {
		if data[i] != '\\' {
			continue
		}
		if i+1 == to || data[i+1] != 'u' {
			i++
			continue
		}
		switch r := hex(i + 2); {
		case r >= 0xd800 && r <= 0xdbff:
			if i+8 <= to && data[i+6] == '\\' && data[i+7] == 'u' {
				if lo := hex(i + 8); lo >= 0xdc00 && lo <= 0xdfff {
					i += 11
					continue
				}
			}
			return loneSurrogate(data[i:i+6], i)
		case r >= 0xdc00 && r <= 0xdfff:
			return loneSurrogate(data[i:i+6], i)
		}
		i += 5
	}
	return ""
}

// isSyntax reports whether err is json's word that the input is not JSON,
// which comes before any other.
func isSyntax(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF)
}

// jsonEnvelope is the envelope as json.Unmarshal decodes it.
type jsonEnvelope struct {
	ID            *string `json:"id"`
	UUID          *string `json:"uuid"`
	Scene         *string `json:"scene"`
	ReceiveIDType *string `json:"receive_id_type"`
	ReceiveID     *string `json:"receive_id"`
	Priority      *string `json:"priority"`
	TZ            *string `json:"tz"`
}

// jsonCheckEnvelope is a check as the json.Decoder decodes it.
type jsonCheckEnvelope struct {
	ID            *string `json:"id"`
	Scene         *string `json:"scene"`
	ReceiveIDType *string `json:"receive_id_type"`
	ReceiveID     *string `json:"receive_id"`
	Priority      *string `json:"priority"`
	TZ            *string `json:"tz"`
	DryRun        *bool   `json:"dry_run"`
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func jsonReason(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q must be a %s, not a %s", te.Field, te.Type.Kind(), te.Value)
	}
	return err.Error()
}

// parseMessageJSON is parseMessage as it was, on json.Unmarshal.
func parseMessageJSON(data []byte, headerID, headerTZ string, maxBytes int) (Message, error) {
	if err := checkBody(data, maxBytes, "UTF-8 JSON"); err != nil {
		return Message{}, err
	}
	var je jsonEnvelope
	err := json.Unmarshal(data, &je)
	if r := refLoneSurrogate(data, envelopeRead); r != "" && !isSyntax(err) {
		return Message{}, invalidf("message is not valid UTF-8 JSON: %s", r)
	}
	if r := refAmbiguity(data, envelopeKeys, false); r != "" && !isSyntax(err) {
		return Message{}, invalidf("message is ambiguous: %s", r)
	}
	if err != nil {
		return Message{}, invalidf("message is not a JSON object: %s", jsonReason(err))
	}
	env := envelope{ID: deref(je.ID), UUID: deref(je.UUID), Scene: deref(je.Scene), ReceiveIDType: deref(je.ReceiveIDType),
		ReceiveID: deref(je.ReceiveID), Priority: deref(je.Priority), TZ: deref(je.TZ)}
	return env.message(data, headerID, headerTZ)
}

// parseCheckJSON is ParseCheck as it was, on a json.Decoder.
func parseCheckJSON(data []byte) (CheckRequest, error) {
	if err := checkBody(data, MaxCheckBytes, "UTF-8 JSON"); err != nil {
		return CheckRequest{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var ce jsonCheckEnvelope
	err := dec.Decode(&ce)
	if r := refLoneSurrogate(data, checkRead); r != "" && !isSyntax(err) {
		return CheckRequest{}, invalidf("check is not valid UTF-8 JSON: %s", r)
	}
	if r := refAmbiguity(data, checkKeys, true); r != "" && !isSyntax(err) {
		return CheckRequest{}, invalidf("check is ambiguous: %s", r)
	}
	if err != nil {
		return CheckRequest{}, invalidf("check is not a JSON object of its fields: %s", jsonReason(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return CheckRequest{}, invalidf("check has data after its JSON object")
	}
	env := envelope{ID: deref(ce.ID), Scene: deref(ce.Scene), ReceiveIDType: deref(ce.ReceiveIDType),
		ReceiveID: deref(ce.ReceiveID), Priority: deref(ce.Priority), TZ: deref(ce.TZ)}
	m, err := env.message(nil, "", "")
	if err != nil {
		return CheckRequest{}, err
	}
	return CheckRequest{Message: m, DryRun: ce.DryRun != nil && *ce.DryRun}, nil
}

// scanMatchesJSON fails unless a scan captures what json decodes from data,
// field by field, or fails with json's reason word for word: with
// envelopeFields as json.Unmarshal does, with checkFields in stream mode as
// a json.Decoder with DisallowUnknownFields followed by a check for EOF.
// A body with a lone surrogate escape (refLoneSurrogate), or else with
// ambiguous keys (refAmbiguity), that json reads must be refused instead,
// with the reference's reason; one json cannot read gets json's syntax
// error. data must pass checkBody, as it does before every scan.
func scanMatchesJSON(t *testing.T, data []byte) {
	t.Helper()
	s := envScan{data: data, fields: envelopeFields}
	outcome, reason := s.run()
	var je jsonEnvelope
	err := json.Unmarshal(data, &je)
	if lone := refLoneSurrogate(data, envelopeRead); lone != "" && !isSyntax(err) {
		if outcome != scanBadText || reason != lone {
			t.Fatalf("scan of %q: outcome %d %q; want it refused as not text: %s", data, outcome, reason, lone)
		}
		return
	}
	if amb := refAmbiguity(data, envelopeKeys, false); amb != "" && !isSyntax(err) {
		if outcome != scanAmbiguous || reason != amb {
			t.Fatalf("scan of %q: outcome %d %q; want it refused as ambiguous: %s", data, outcome, reason, amb)
		}
		return
	}
	if (err == nil) != (outcome == scanOK) || (err != nil && (reason != jsonReason(err) || outcome == scanTrailing)) {
		t.Fatalf("scan of %q: outcome %d %q; json.Unmarshal: %v", data, outcome, reason, err)
	}
	if err == nil {
		for f, p := range []*string{envID: je.ID, envUUID: je.UUID, envScene: je.Scene, envReceiveIDType: je.ReceiveIDType,
			envReceiveID: je.ReceiveID, envPriority: je.Priority, envTZ: je.TZ} {
			if (p == nil) != (s.vals[f].kind == valAbsent) || deref(p) != s.text(f) {
				t.Fatalf("scan of %q: field %s is %+v %q; json.Unmarshal has %v", data, envelopeFields[f].name, s.vals[f], s.text(f), p)
			}
		}
	}

}

// streamScanMatchesJSON is scanMatchesJSON for checkFields in stream mode.
func streamScanMatchesJSON(t *testing.T, data []byte) {
	t.Helper()
	s := envScan{data: data, fields: checkFields, stream: true}
	outcome, reason := s.run()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var ce jsonCheckEnvelope
	want := scanOK
	err := dec.Decode(&ce)
	if lone := refLoneSurrogate(data, checkRead); lone != "" && !isSyntax(err) {
		if outcome != scanBadText || reason != lone {
			t.Fatalf("stream scan of %q: outcome %d %q; want it refused as not text: %s", data, outcome, reason, lone)
		}
		return
	}
	if amb := refAmbiguity(data, checkKeys, true); amb != "" && !isSyntax(err) {
		if outcome != scanAmbiguous || reason != amb {
			t.Fatalf("stream scan of %q: outcome %d %q; want it refused as ambiguous: %s", data, outcome, reason, amb)
		}
		return
	}
	if err != nil {
		want = scanSyntax
		if !isSyntax(err) {
			want = scanBadField
		}
	} else if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
		want = scanTrailing
	}
	if outcome != want || (err != nil && reason != jsonReason(err)) {
		t.Fatalf("stream scan of %q: outcome %d %q; json.Decoder: %d %v", data, outcome, reason, want, err)
	}
	if want == scanOK {
		for f, p := range []*string{chkID: ce.ID, chkScene: ce.Scene, chkReceiveIDType: ce.ReceiveIDType,
			chkReceiveID: ce.ReceiveID, chkPriority: ce.Priority, chkTZ: ce.TZ} {
			if (p == nil) != (s.vals[f].kind == valAbsent) || deref(p) != s.text(f) {
				t.Fatalf("stream scan of %q: field %s is %+v %q; json.Decoder has %v", data, checkFields[f].name, s.vals[f], s.text(f), p)
			}
		}
		dry := map[uint8]*bool{valAbsent: nil, valTrue: new(true), valFalse: new(false)}[s.vals[chkDryRun].kind]
		if !reflect.DeepEqual(dry, ce.DryRun) {
			t.Fatalf("stream scan of %q: dry_run %+v; json.Decoder has %v", data, s.vals[chkDryRun], ce.DryRun)
		}
	}
}

// matchesJSON fails unless the scan and the json-based parses give the
// same message and check, or the same error word for word, for data.
func matchesJSON(t *testing.T, data []byte, headerID, headerTZ string) {
	t.Helper()
	if checkBody(data, 0, "") == nil {
		scanMatchesJSON(t, data)
		streamScanMatchesJSON(t, data)
	}
	got, err := parseMessage(data, headerID, headerTZ, 0)
	if err == nil && refAmbiguity(data, envelopeKeys, false) != "" {
		t.Fatalf("parseMessage(%q) read a body whose keys are ambiguous: %+v", data, got)
	}
	want, werr := parseMessageJSON(data, headerID, headerTZ, 0)
	if fmt.Sprint(err) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
		t.Fatalf("parseMessage(%q, %q, %q)\n got %+v, %v\nwant %+v, %v", data, headerID, headerTZ, got, err, want, werr)
	}
	if err != nil && !IsInvalid(err) {
		t.Fatalf("parseMessage(%q): %v is not an InvalidError", data, err)
	}
	gotC, err := ParseCheck(data)
	if err == nil && refAmbiguity(data, checkKeys, true) != "" {
		t.Fatalf("ParseCheck(%q) read a body whose keys are ambiguous: %+v", data, gotC)
	}
	wantC, werr := parseCheckJSON(data)
	if fmt.Sprint(err) != fmt.Sprint(werr) || !reflect.DeepEqual(gotC, wantC) {
		t.Fatalf("ParseCheck(%q)\n got %+v, %v\nwant %+v, %v", data, gotC, err, wantC, werr)
	}
}

// envelopeCases are bodies where a JSON reader may go wrong: syntax at
// every state of json's scanner, input that ends in each, keys as json
// matches them, and values as it decodes them.
var envelopeCases = []string{
	`{"id":"m1","scene":"s","receive_id":"ou_1"}`,
	`{"id":"m1","scene":"s","receive_id":"ou_1","dry_run":true}`,
	`{"id":"m1","scene":"s","receive_id":"ou_1","dry_run":false}`,
	`{"id":"m1","scene":"s","receive_id":"ou_1","dry_run":null}`,
	`{"id":"m1","scene":"s","receive_id":"ou_1","dry_run":"yes"}`,
	`{"id":"m1","scene":"s","receive_id":"ou_1","dry_run":1}`,
	`{"id":"m1","scene":"s","receive_id":"ou_1","dry_run":{}}`,
	`{"uuid":"u","scene":"s","receive_id_type":"chat_id","receive_id":"oc_1","content":{"a":[1,2,{"b":null}]}}`,
	`{"id":"m","scene":"s","receive_id_type":"email","receive_id":"a@b.c","msg_type":"text","priority":"urgent","tz":"Asia/Shanghai"}`,
	// Duplicates and case: refused, whichever key, value or null comes
	// first; below the top level nothing is refused.
	`{"receive_id":"victim","Receive_Id":"decoy","id":"a","scene":"s"}`,
	`{"id":"a","scene":"s","receive_id":"r","dry_run":true,"dry_run":false}`,
	`{"id":"a","scene":"s","receive_id":"r","drY_run":true}`,
	`{"id":"a","scene":"s","receive_id":"r","\u0069d":"b"}`,
	`{"id":"a","scene":"s","receive_id":"r","content":"x","content":{}}`,
	`{"id":"a","scene":"s","receive_id":"r","Content":"x","MSG_TYPE":"text"}`,
	`{"id":"a","scene":"s","receive_id":"r","x":1,"y":2,"x":3}`,
	`{"id":"a","scene":"s","receive_id":"r","x":1,"x":2,"dry_run":true,"dry_run":true}`,
	`{"k1":0,"k2":0,"k3":0,"k4":0,"k5":0,"k6":0,"k7":0,"k8":0,"k9":0,"k10":0,"k9":1,"id":"a","scene":"s","receive_id":"r"}`,
	`{"k1":0,"k2":0,"k3":0,"k4":0,"k5":0,"k6":0,"k7":0,"k8":0,"k9":0,"k10":0,"k11":0,"id":"a","scene":"s","receive_id":"r"}`,
	`{"id":"a","scene":"s","receive_id":"r","content":{"a":1,"a":2,"A":3}}`,
	`{"id":"a","scene":"s","receive_id":"r","id":"a"} x`,
	`{"id":"a","scene":"s","receive_id":"r","id":"a"`,
	`{"id":"a","ID":"b"} {"id":"c"}`,
	`{"id":"a","id":"b","scene":"s","receive_id":"r","scene":"t"}`,
	`{"id":"a","ID":"b","Scene":"s","RECEIVE_ID":"r","sCeNe":"t"}`,
	`{"id":"a","id":null,"uuid":"u","scene":"s","receive_id":"r"}`,
	`{"id":null,"id":"a","scene":"s","receive_id":"r"}`,
	`{"id":5,"id":"a","scene":"s","receive_id":"r"}`,
	`{"id":"a","id":5,"scene":[],"receive_id":"r"}`,
	`{"scene":{},"id":true,"receive_id":"r"}`,
	`{"ſcene":"s","id":"a","receive_id":"r"}`,
	`{"\u0073cene":"s","id":"a","receive_id":"r","\u0064ry_run":true}`,
	`{"\u017Fcene":"s","id":"a","receive_id":"r"}`,
	`{"ıd":"x","id":"a","scene":"s","receive_id":"r"}`,
	`{"Id":"a","scene":"s","receive_id":"r","PRIORITY":"high","Receive_Id_Type":"email","Tz":"Europe/Berlin"}`,
	`{"id":"a","scene":"s","receive_id":"r","unknown":1,"uuid":"x"}`,
	`{"id":"a","scene":"s","receive_id":"r","dryrun":true,"dry_run":"x"}`,
	`{"id":"a","scene":"s","receive_id":"r","dry\u005frun":"x"}`,
	`{"id":"a","scene":"s","receive_id":"r","\u00e9":1}`,
	`{"id":"a","scene":"s","receive_id":"r","é":1}`,
	// Escapes.
	`{"id":"a\"b","scene":"s\\t","receive_id":"\u00e9\u4e2d\ud83d\ude00"}`,
	`{"id":"a\/b","scene":"\b\f\n\r\t","receive_id":"r"}`,
	`{"id":"\ud800","scene":"\udc00x","receive_id":"\ud800\u0041"}`,
	// Surrogates: a pair is one character; either half alone is refused
	// in a field the gate reads or a top-level key, and passed in content
	// and the other values, which are forwarded as sent.
	`{"id":"a\ud83d\ude00","scene":"s","receive_id":"r"}`,
	`{"id":"a","scene":"s","receive_id":"r\ud800"}`,
	`{"id":"a","scene":"s","receive_id":"r\ufffd"}`,
	`{"id":"a","scene":"s","receive_id":"r\uDFFF"}`,
	`{"id":"a","scene":"s","receive_id":"r\ud800\ud800\udc00"}`,
	`{"id":"a","scene":"s","receive_id":"r\udc00\ud800"}`,
	`{"id":"a","scene":"s","receive_id":"r\ud800\n"}`,
	`{"id":"a","scene":"s","receive_id":"r\ud800\u12"}`,
	`{"id":"a","scene":"s","receive_id":"r\ud800\u12g4"}`,
	`{"id":"a","scene":"s","receive_id":"r\ud800`,
	`{"id":"a","scene":"s","receive_id":"r\\ud800"}`,
	`{"id":"a","scene":"s","receive_id":"r","content":{"t":["\udbff"]}}`,
	`{"id":"a","scene":"s","receive_id":"r","\ud800":1}`,
	`{"id":"a","scene":"s","receive_id":"r","dry_run":true,"x":"\ud800"}`,
	`{"id":"a","scene":"s","receive_id":"r","receive_id":"\ud800"}`,
	`{"id":"a","scene":"s","receive_id":"r"} "\ud800"`,
	`{"id":5,"scene":"s","receive_id":"\ud800"}`,
	`{"id":"a","scene":"s","receive_id":"r","content":"\u0000"}`,
	`{"id":"\u0000","scene":"s","receive_id":"r"}`,
	`{"id":"a","scene":"s","receive_id":"\u202e"}`,
	`{"id":"a","scene":"s","receive_id":"r","priority":"\u0068igh","receive_id_type":"\u0065mail"}`,
	`{"id":"a","scene":"s","receive_id":"r","priority":"HIGH"}`,
	// Numbers and literals.
	`{"id":"a","scene":"s","receive_id":"r","n":[0,-0,1e999,-1.5E+3,0.0e-0,123456789012345678901234567890]}`,
	`{"id":"a","scene":"s","receive_id":"r","n":01}`, `{"id":"a","n":-}`, `{"id":"a","n":-x}`, `{"id":"a","n":1.}`,
	`{"id":"a","n":1.e5}`, `{"id":"a","n":1e}`, `{"id":"a","n":1e+}`, `{"id":"a","n":1E-x}`, `{"id":"a","n":.5}`,
	`{"id":"a","n":+1}`, `{"id":"a","n":1x}`, `[1x]`, `[01]`, `{"id":"a","n":[tru]}`, `{"id":"a","n":nul}`,
	`{"id":"a","n":falsy}`, `{"id":"a","n":True}`, `{"id":1e999,"scene":"s"}`, `{"id":-0}`,
	// Top level: not an object, more than one value, whitespace, BOM.
	`null`, `true`, `false`, `5`, `-0`, `"s"`, `[]`, `[1,2]`, `{}`, `hello`, `nullx`, `5x`, `5 x`, `"s" x`,
	`{} {}`, `{}x`, `{} `, " \t\r\n{\"id\":\"a\",\"scene\":\"s\",\"receive_id\":\"r\"} \n", `{}}`, `{}]`,
	"\ufeff{}", "{}\ufeff", "\u00a0{}", "{\u00a0}", `é`, `'x'`, `{'id':1}`, `{"id":"a"}]`,
	// Every place input may end.
	`{`, `{"`, `{"id`, `{"id"`, `{"id":`, `{"id":"`, `{"id":"a`, `{"id":"a"`, `{"id":"a",`, `{"id":"a\`,
	`{"id":"a\u`, `{"id":"a\u12`, `{"id":5`, `{"id":5.`, `{"id":5e`, `{"id":t`, `{"id":[`, `{"id":[1`, `{"id":[1,`,
	`[`, `-`, `1.`, `1e`, `1e-`, `tru`, `fals`, `nu`, `"abc`, `"\`, `"\u00`, `5`, `[1.`, `[1e`,
	// Bad syntax inside.
	`{"id" "a"}`, `{"id":"a" "scene":"s"}`, `{"id":"a",}`, `{,}`, `{"id":"a",,"x":1}`, `[1,]`, `[,1]`, `[1 2]`,
	`{"id":"a\x"}`, `{"id":"a\u12g4"}`, "{\"id\":\"a\tb\"}", "{\"id\":\"a\nb\"}", "{\"id\":\"a\x1fb\"}", "{\"id\":\"a\x7fb\"}",
	`{"id":"a"]`, `[1}`, `{"a":{"b":[}]}}`, `{1:2}`, `{"id":"a":"b"}`, `{"id"::"a"}`,
}

func TestEnvelopeScanMatchesJSON(t *testing.T) {
	for _, c := range envelopeCases {
		for _, h := range [][2]string{{"", ""}, {"h1", ""}, {"", "Asia/Shanghai"}} {
			matchesJSON(t, []byte(c), h[0], h[1])
		}
	}
	deep := func(n int, open, close string) []byte {
		return []byte(`{"id":"a","scene":"s","receive_id":"r","content":` + strings.Repeat(open, n) + strings.Repeat(close, n) + `}`)
	}
	// json refuses a value nested deeper than 10000, the top object counted.
	for _, n := range []int{maxNestingDepth - 1, maxNestingDepth, maxNestingDepth + 5} {
		matchesJSON(t, deep(n, "[", "]"), "", "")
		matchesJSON(t, deep(n, `{"a":`, "}"), "", "")
		matchesJSON(t, bytes.Repeat([]byte("["), n), "", "")
	}
	matchesJSON(t, benchEnvelope(), "", "")
	// Every escape a \u may spell, in a key and in a value.
	for r := rune(0); r < 0x10000; r += 7 {
		matchesJSON(t, fmt.Appendf(nil, `{"id":"a\u%04x","scene":"s","receive_id":"r","\u%04x":1}`, r, r), "", "")
	}
}

// TestEnvelopeScanKeepsNoBody: a message's fields do not share memory
// with the body, which the transport owns.
func TestEnvelopeScanKeepsNoBody(t *testing.T) {
	data := []byte(`{"id":"m1","scene":"s","receive_id":"ou_1","tz":"Asia/Shanghai"}`)
	m, err := ParseMessage(data, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		if data[i] != '"' && data[i] != ':' && data[i] != ',' && data[i] != '{' && data[i] != '}' {
			data[i] = 'z'
		}
	}
	if m.ID != "m1" || m.Scene != "s" || m.ReceiveID != "ou_1" || m.TZ != "Asia/Shanghai" {
		t.Fatalf("the message changed with the body: %+v", m)
	}
}

// FuzzEnvelopeMatchesJSON holds the scan to the json-based parse it
// replaced: the same message or the same error, word for word, for any
// body, for ParseMessage (with a Nats-Msg-Id and a Gate-TZ header) and for
// ParseCheck. It starts from FuzzParseMessage's corpus.
func FuzzEnvelopeMatchesJSON(f *testing.F) {
	for _, c := range envelopeCases {
		f.Add([]byte(c), "", "")
	}
	f.Add(benchEnvelope(), "", "")
	f.Add([]byte(`{"scene":"s","receive_id":"r"}`), "h1", "Europe/Berlin")
	files, err := filepath.Glob("testdata/fuzz/FuzzParseMessage/*")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, hdr, err := readCorpusEntry(name)
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		f.Add(data, hdr, "")
	}
	f.Fuzz(func(t *testing.T, data []byte, headerID, headerTZ string) {
		matchesJSON(t, data, headerID, headerTZ)
	})
}

// readCorpusEntry reads a FuzzParseMessage corpus file: a []byte and a
// string, each Go-quoted on a line of its own.
func readCorpusEntry(name string) ([]byte, string, error) {
	text, err := os.ReadFile(name)
	if err != nil {
		return nil, "", err
	}
	lines := strings.Split(strings.TrimSpace(string(text)), "\n")
	if len(lines) != 3 || lines[0] != "go test fuzz v1" {
		return nil, "", fmt.Errorf("not a corpus entry of a []byte and a string")
	}
	var vals [2]string
	for i, prefix := range []string{"[]byte(", "string("} {
		l := lines[i+1]
		if !strings.HasPrefix(l, prefix) || !strings.HasSuffix(l, ")") {
			return nil, "", fmt.Errorf("line %d is not %s...)", i+2, prefix)
		}
		if vals[i], err = strconv.Unquote(l[len(prefix) : len(l)-1]); err != nil {
			return nil, "", fmt.Errorf("line %d: %w", i+2, err)
		}
	}
	return []byte(vals[0]), vals[1], nil
}
