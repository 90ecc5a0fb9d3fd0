package gate

import (
	"errors"
	"strings"
	"testing"
)

// TestReadHeaders: each header the gate reads is taken from a NATS header
// map, names matched case-sensitively; one given twice, with the same
// value or not, is named in RepeatedHeader and makes ParseDelivery refuse
// the message on either path, naming it.
func TestReadHeaders(t *testing.T) {
	once := map[string][]string{
		MsgIDHeader: {"h1"}, SceneHeader: {"s"}, RecipientHeader: {"open_id:ou_1"},
		PriorityHeader: {"urgent"}, TZHeader: {"Asia/Shanghai"}, "gate-scene": {"other"}, "X-Other": {"a", "b"},
	}
	var d Delivery
	d.ReadHeaders(once)
	want := Delivery{HeaderID: "h1", HeaderScene: "s", HeaderRecipient: "open_id:ou_1", HeaderPriority: "urgent", HeaderTZ: "Asia/Shanghai"}
	if d.HeaderID != want.HeaderID || d.HeaderScene != want.HeaderScene || d.HeaderRecipient != want.HeaderRecipient ||
		d.HeaderPriority != want.HeaderPriority || d.HeaderTZ != want.HeaderTZ || d.RepeatedHeader != "" {
		t.Fatalf("ReadHeaders(%v) = %+v, want %+v", once, d, want)
	}
	if _, err := ParseDelivery(d, 0); err == nil {
		t.Fatalf("ParseDelivery(%+v): no body, want an error", d)
	}
	for _, name := range InboundHeaders {
		for _, values := range [][]string{{"a", "b"}, {"a", "a"}} {
			h := map[string][]string{}
			for k, v := range once {
				h[k] = v
			}
			h[name] = values
			var d Delivery
			d.Data = []byte(`{"id":"b1","scene":"s","receive_id":"ou_1"}`)
			d.ReadHeaders(h)
			if d.RepeatedHeader != name {
				t.Errorf("%s given as %q: RepeatedHeader %q, want %q", name, values, d.RepeatedHeader, name)
			}
			wantErr := name + " header is given more than once"
			for _, path := range []string{"headers", "body"} {
				if path == "body" {
					d.HeaderScene = "" // the body path: the fast path needs all three
				}
				m, err := ParseDelivery(d, 0)
				if !IsInvalid(err) || !strings.Contains(err.Error(), wantErr) {
					t.Errorf("%s given as %q, %s path: ParseDelivery = %+v, %v; want an *InvalidError saying %q", name, values, path, m, err, wantErr)
				}
			}
		}
	}
}

// TestRecipientID: an email receive_id is kept trimmed, its ASCII letters
// in lower case; Feishu's own ids are kept byte-exact. A preferences key
// must be as kept, or no message would ever meet it.
func TestRecipientID(t *testing.T) {
	for _, tt := range []struct{ typ, id, want string }{
		{"email", "Alice@Example.com ", "alice@example.com"},
		{"email", "  a@b.c", "a@b.c"},
		{"email", "a@b.c", "a@b.c"},
		{"email", "ÄLICE@Example.COM", "Älice@example.com"},
		{"open_id", "Ou_AB ", "Ou_AB "},
		{"union_id", "On_X", "On_X"},
		{"user_id", " U1", " U1"},
		{"chat_id", "Oc_1", "Oc_1"},
	} {
		if got := RecipientID(tt.typ, tt.id); got != tt.want {
			t.Errorf("RecipientID(%q, %q) = %q, want %q", tt.typ, tt.id, got, tt.want)
		}
	}
	if err := CheckRecipient("email:alice@example.com"); err != nil {
		t.Errorf("CheckRecipient of a kept email key: %v", err)
	}
	if err := CheckRecipient("open_id:Ou_AB"); err != nil {
		t.Errorf("CheckRecipient of an open_id in upper case: %v", err)
	}
	err := CheckRecipient("email:Alice@Example.com")
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `write "email:alice@example.com"`) {
		t.Errorf("CheckRecipient(email:Alice@Example.com) = %v; want ErrBadRequest naming the key as kept", err)
	}
}
