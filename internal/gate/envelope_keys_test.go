package gate

import (
	"strings"
	"testing"
)

// TestAmbiguousEnvelopeRefused: an envelope a case-insensitive reader and a
// case-sensitive one would read apart is invalid, with a reason naming the
// key; one whose keys are exact and distinct is read as before.
func TestAmbiguousEnvelopeRefused(t *testing.T) {
	const base = `"id":"m1","scene":"s",`
	for _, tt := range []struct{ body, want string }{
		{`{` + base + `"receive_id":"victim","Receive_Id":"decoy"}`,
			`message is ambiguous: key "Receive_Id" is "receive_id" in other letter case: keys match exactly`},
		{`{` + base + `"Receive_Id":"decoy"}`, `key "Receive_Id" is "receive_id" in other letter case`},
		{`{` + base + `"receive_id":"a","receive_id":"b"}`, `message is ambiguous: key "receive_id" is given twice`},
		{`{` + base + `"receive_id":"a","receive_id":null}`, `key "receive_id" is given twice`},
		{`{` + base + `"receive_id":"a","receive_\u0069d":"b"}`, `key "receive_id" is given twice`},
		{`{` + base + `"receive_id":"a","ſcene":"t"}`, `key "ſcene" is "scene" in other letter case`},
		{`{` + base + `"receive_id":"a","Content":"{}"}`, `key "Content" is "content" in other letter case`},
		{`{` + base + `"receive_id":"a","content":"x","content":"y"}`, `key "content" is given twice`},
		{`{` + base + `"receive_id":"a","extra":1,"extra":2}`, `key "extra" is given twice`},
		{`{` + base + `"receive_id":"a","Extra":1,"extra":2}`, ""}, // neither is a field of the envelope
		{`{` + base + `"receive_id":"a","content":{"text":"x","text":"y","Text":"z"}}`, ""},
	} {
		m, err := ParseMessage([]byte(tt.body), "", 0)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("ParseMessage(%s): %v; want it read", tt.body, err)
		case tt.want != "" && (!IsInvalid(err) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("ParseMessage(%s) = %+v, %v; want an *InvalidError saying %q", tt.body, m, err, tt.want)
		}
	}
	// Past the eight other keys a scan compares one by one, a map finds
	// the repeat.
	var b strings.Builder
	b.WriteString(`{` + base + `"receive_id":"a"`)
	for i := range 40 {
		b.WriteString(`,"k` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":0`)
	}
	if _, err := ParseMessage([]byte(b.String()+`}`), "", 0); err != nil {
		t.Errorf("40 distinct keys: %v", err)
	}
	if _, err := ParseMessage([]byte(b.String()+`,"kzz":0,"kab":1}`), "", 0); !IsInvalid(err) || !strings.Contains(err.Error(), `key "kab" is given twice`) {
		t.Errorf("a repeat of the 27th key, after 42 others: %v; want it refused", err)
	}
}

// TestAmbiguousCheckRefused: a check's dry_run in other case, or given
// twice, is refused rather than read as a real check.
func TestAmbiguousCheckRefused(t *testing.T) {
	const base = `{"id":"m1","scene":"s","receive_id":"r",`
	for _, tt := range []struct{ body, want string }{
		{base + `"drY_run":true}`, `check is ambiguous: key "drY_run" is "dry_run" in other letter case: keys match exactly`},
		{base + `"dry_run":true,"dry_run":false}`, `check is ambiguous: key "dry_run" is given twice`},
		{base + `"dry_run":false,"dry_run":true}`, `key "dry_run" is given twice`},
		{base + `"ID":"m2"}`, `key "ID" is "id" in other letter case`},
		{base + `"dryrun":true}`, `json: unknown field "dryrun"`},
	} {
		c, err := ParseCheck([]byte(tt.body))
		if !IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseCheck(%s) = %+v, %v; want an *InvalidError saying %q", tt.body, c, err, tt.want)
		}
	}
}

func TestCheckJSONBody(t *testing.T) {
	known := []string{"muted_scenes", "digest_only"}
	for _, tt := range []struct{ body, want string }{
		{`{"muted_scenes":["a"],"digest_only":[]}`, ""},
		{`{"muted_scenes":["a"],"Muted_Scenes":[]}`, `body is ambiguous: key "Muted_Scenes" is "muted_scenes" in other letter case`},
		{`{"muted_scenes":["a"],"muted_scenes":[]}`, `key "muted_scenes" is given twice`},
		{`{"other":1,"other":2}`, `key "other" is given twice`},
		{`{"muted_scenes":{"a":1,"a":2}}`, ""},          // below the top level: the decoder's to judge
		{`{"muted_scenes":["a"],"muted_scenes":[]`, ""}, // not JSON: the decoder says why
		{`[1,2]`, ""},
		{"{\"muted_scenes\":[\"\xff\"]}", "message is not valid UTF-8 JSON"},
		// json reads every string of such a body: a lone surrogate escape
		// anywhere in it would be read as U+FFFD.
		{`{"muted_scenes":["a\ud800"]}`, `body is not valid UTF-8 JSON: \ud800 at byte 19 is a lone surrogate escape`},
		{`{"muted_scenes":[{"x":{"\uDC00":1}}]}`, `\uDC00 at byte 24 is a lone surrogate escape`},
		{`{"muted_scenes":["a\ud83d\ude00"]}`, ""},
		{`{"muted_scenes":["a"]}` + strings.Repeat(" ", 100), "over the limit of 100"},
	} {
		err := CheckJSONBody([]byte(tt.body), 100, known...)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckJSONBody(%s) = %v; want nil", tt.body, err)
		case tt.want != "" && (!IsInvalid(err) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("CheckJSONBody(%s) = %v; want an *InvalidError saying %q", tt.body, err, tt.want)
		}
	}
}
