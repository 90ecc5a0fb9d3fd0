package gate

import (
	"strings"
	"testing"
)

func TestParseCancel(t *testing.T) {
	long := strings.Repeat("k", MaxCancelKeyBytes+1)
	for _, tt := range []struct {
		body string
		want *CancelRequest // nil: refused
	}{
		{`{"cancel_key":"order-1"}`, &CancelRequest{Key: "order-1"}},
		{` {"cancel_key": "order-1"} ` + "\n", &CancelRequest{Key: "order-1"}},
		{`{"cancel_key":"o","receive_id_type":"open_id","receive_id":"ou_1"}`, &CancelRequest{Key: "o", Recipient: "open_id:ou_1"}},
		// An email recipient as every window keys it.
		{`{"cancel_key":"o","receive_id_type":"email","receive_id":" Alice@Example.com"}`, &CancelRequest{Key: "o", Recipient: "email:alice@example.com"}},
		{`{"cancel_key":"o","receive_id_type":null,"receive_id":null}`, &CancelRequest{Key: "o"}},
		{`{"cancel_key":"o\u002d1"}`, &CancelRequest{Key: "o-1"}},
		{`{"cancel_key":"` + long[1:] + `"}`, &CancelRequest{Key: long[1:]}},
		{``, nil},
		{`null`, nil},
		{`[]`, nil},
		{`{}`, nil},
		{`{"cancel_key":null}`, nil},
		{`{"cancel_key":""}`, nil},
		{`{"cancel_key":" "}`, nil},
		{`{"cancel_key":1}`, nil},
		{`{"cancel_key":"a\nb"}`, nil},
		{`{"cancel_key":"a\u202eb"}`, nil},
		{`{"cancel_key":"` + long + `"}`, nil},
		{`{"cancel_key":"o","receive_id":"ou_1"}`, nil},
		{`{"cancel_key":"o","receive_id_type":"open_id"}`, nil},
		{`{"cancel_key":"o","receive_id_type":"open_id","receive_id":""}`, nil},
		{`{"cancel_key":"o","receive_id_type":"phone","receive_id":"1"}`, nil},
		{`{"cancel_key":"o","receive_id_type":"open_id","receive_id":"` + strings.Repeat("r", MaxReceiveIDBytes+1) + `"}`, nil},
		{`{"cancel_key":"o","scene":"s"}`, nil},
		{`{"cancel_key":"o","cancel_key":"p"}`, nil},
		{`{"Cancel_Key":"o"}`, nil},
		{`{"cancel_key":"o","RECEIVE_ID":"x"}`, nil},
		{`{"cancel_key":"o"} {}`, nil},
		{"{\"cancel_key\":\"\xff\"}", nil},
		{"{\"cancel_key\":\"o\x00\"}", nil},
		{`{"cancel_key":"o-\ud800"}`, nil},
	} {
		got, err := ParseCancel([]byte(tt.body))
		switch {
		case tt.want == nil && !IsInvalid(err):
			t.Errorf("ParseCancel(%.50q) = %+v, %v; want an *InvalidError", tt.body, got, err)
		case tt.want != nil && (err != nil || got != *tt.want):
			t.Errorf("ParseCancel(%.50q) = %+v, %v; want %+v", tt.body, got, err, *tt.want)
		}
	}
	for body, want := range map[string]string{
		`{"cancel_key":"o","receive_id":"x"}`: "receive_id_type and receive_id together",
		`{"cancel_key":"o","cancel_key":"p"}`: `key "cancel_key" is given twice`,
		`{"cancel_key":"o","extra":true}`:     `unknown field "extra"`,
		`{"cancel_key":""}`:                   "cancel_key is missing or empty",
		`{"cancel_key":"` + long + `"}`:       "cancel_key is 257 bytes, over the limit of 256",
	} {
		if _, err := ParseCancel([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCancel(%.50q): %v; want it to say %q", body, err, want)
		}
	}
}

// TestMessageCancelKeys: cancel_key and resolves are read from the body,
// or from their headers, which win; each is optional, and held to the
// checks of an id when given.
func TestMessageCancelKeys(t *testing.T) {
	body := func(extra string) []byte {
		return []byte(`{"id":"m1","scene":"s","receive_id":"ou_1"` + extra + `}`)
	}
	for _, tt := range []struct {
		name                string
		d                   Delivery
		cancelKey, resolves string
		bad                 string // in the error when refused
	}{
		{name: "none", d: Delivery{Data: body("")}},
		{name: "body", d: Delivery{Data: body(`,"cancel_key":"k","resolves":"r"`)}, cancelKey: "k", resolves: "r"},
		{name: "body nulls", d: Delivery{Data: body(`,"cancel_key":null,"resolves":null`)}},
		{name: "headers win", d: Delivery{Data: body(`,"cancel_key":"k","resolves":"r"`), HeaderCancelKey: "hk", HeaderResolves: "hr"}, cancelKey: "hk", resolves: "hr"},
		{name: "one header", d: Delivery{Data: body(`,"cancel_key":"k","resolves":"r"`), HeaderResolves: "hr"}, cancelKey: "k", resolves: "hr"},
		{name: "fast path", d: Delivery{Data: []byte("x"), HeaderID: "m1", HeaderScene: "s", HeaderRecipient: "open_id:ou_1", HeaderCancelKey: "hk", HeaderResolves: "hr"}, cancelKey: "hk", resolves: "hr"},
		{name: "empty key", d: Delivery{Data: body(`,"cancel_key":""`)}},
		{name: "blank key", d: Delivery{Data: body(`,"cancel_key":" "`)}, bad: "cancel_key is missing or empty"},
		{name: "long resolves", d: Delivery{Data: body(`,"resolves":"` + strings.Repeat("r", 257) + `"`)}, bad: "resolves is 257 bytes"},
		{name: "number", d: Delivery{Data: body(`,"cancel_key":1`)}, bad: "must be a string"},
		{name: "twice", d: Delivery{Data: body(`,"cancel_key":"a","cancel_key":"b"`)}, bad: "given twice"},
		{name: "other case", d: Delivery{Data: body(`,"Resolves":"a"`)}, bad: "other letter case"},
		{name: "bad header", d: Delivery{Data: body(""), HeaderCancelKey: "a\x01"}, bad: "Gate-Cancel-Key header contains"},
		{name: "bad fast-path header", d: Delivery{Data: []byte("x"), HeaderID: "m1", HeaderScene: "s", HeaderRecipient: "open_id:ou_1", HeaderResolves: "\xff"}, bad: "Gate-Resolves header is not valid UTF-8"},
	} {
		m, err := ParseDelivery(tt.d, 0)
		switch {
		case tt.bad != "" && (!IsInvalid(err) || !strings.Contains(err.Error(), tt.bad)):
			t.Errorf("%s: ParseDelivery = %+v, %v; want an *InvalidError saying %q", tt.name, m, err, tt.bad)
		case tt.bad == "" && (err != nil || m.CancelKey != tt.cancelKey || m.Resolves != tt.resolves):
			t.Errorf("%s: ParseDelivery = cancel_key %q, resolves %q, %v; want %q, %q", tt.name, m.CancelKey, m.Resolves, err, tt.cancelKey, tt.resolves)
		}
	}
	// A held message carries its cancel_key into the hold store.
	m, err := ParseMessage(body(`,"cancel_key":"k"`), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := RecordOf("m1", m, Decision{Outcome: OutcomeDefer, Queue: Queue{Recipient: m.Recipient(), Name: "s"}}, 7, "v")
	if rec.Hold == nil || rec.Hold.CancelKey != "k" {
		t.Errorf("RecordOf a deferred message: hold %+v, want cancel_key k", rec.Hold)
	}
}
