package gate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// A digest's id depends on its recipient, queue, first and last message
// only, and tells each of them apart.
func TestDigestID(t *testing.T) {
	q := Queue{Recipient: "open_id:ou_1", Name: "digest:ci"}
	id := DigestID(q, "m1", "m3")
	if id != DigestID(q, "m1", "m3") {
		t.Fatal("the same digest got two ids")
	}
	if !strings.HasPrefix(id, "digest:") || len(id) > MaxIDBytes || CheckName("id", id, MaxIDBytes) != nil {
		t.Fatalf("id %q is not a valid message id", id)
	}
	others := []string{
		DigestID(Queue{Recipient: "open_id:ou_2", Name: "digest:ci"}, "m1", "m3"),
		DigestID(Queue{Recipient: "open_id:ou_1", Name: "digest:ops"}, "m1", "m3"),
		DigestID(q, "m2", "m3"),
		DigestID(q, "m1", "m4"), // one more message joined
		// The parts' boundaries count: these concatenate alike.
		DigestID(Queue{Recipient: "open_id:ou_1d", Name: "igest:ci"}, "m1", "m3"),
	}
	for _, o := range others {
		if o == id {
			t.Errorf("two different digests share the id %q", id)
		}
	}
}

// digestOf decodes a digest envelope as a downstream sender would.
type digestOf struct {
	ID            string `json:"id"`
	Scene         string `json:"scene"`
	ReceiveIDType string `json:"receive_id_type"`
	ReceiveID     string `json:"receive_id"`
	MsgType       string `json:"msg_type"`
	Content       struct {
		Post struct {
			EnUS struct {
				Title   string `json:"title"`
				Content [][]struct {
					Tag  string `json:"tag"`
					Text string `json:"text"`
				} `json:"content"`
			} `json:"en_us"`
		} `json:"post"`
	} `json:"content"`
}

func (d digestOf) lines() []string {
	var ls []string
	for _, l := range d.Content.Post.EnUS.Content {
		for _, e := range l {
			ls = append(ls, e.Text)
		}
	}
	return ls
}

// The envelope is a post to the queue's recipient that counts the messages
// of each scene and quotes the newest texts, newest first, whatever form
// their content took; odd payloads are counted, not quoted.
func TestDigestEnvelope(t *testing.T) {
	q := Queue{Recipient: "chat_id:oc_9", Name: "digest:ci"}
	held := []Held{
		{Scene: "ci.build_failed", Payload: []byte(`{"content":{"text":"build 1 failed"}}`)},
		{Scene: "ci.build_failed", Payload: []byte(`{"content":"{\"text\":\"build 2\\nfailed\"}"}`)},
		{Scene: "ci.deploy_failed", Payload: []byte(`not json at all`)},
		{Scene: "ci.build_failed", Payload: []byte(`{"content":42}`)},
		{Scene: "ci.deploy_failed", Payload: []byte(`{"msg_type":"post","content":{"post":{"zh_cn":{"title":"部署失败"}}}}`)},
		{Scene: "ci.build_failed", Payload: []byte(`{"content":{"text":"` + strings.Repeat("x", 500) + `"}}`)},
	}
	b := DigestEnvelope("digest:abc", q, held)
	var d digestOf
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("envelope %s is not JSON: %v", b, err)
	}
	if d.ID != "digest:abc" || d.Scene != "digest:ci" || d.ReceiveIDType != "chat_id" || d.ReceiveID != "oc_9" || d.MsgType != "post" {
		t.Fatalf("envelope %+v", d)
	}
	if got := d.Content.Post.EnUS.Title; got != "6 notifications held back" {
		t.Errorf("title %q", got)
	}
	long := "• " + strings.Repeat("x", DigestTextRunes-1) + "…"
	want := []string{"4 × ci.build_failed", "2 × ci.deploy_failed", "Latest:", long, "• 部署失败", "• build 2 failed", "• build 1 failed"}
	if got := d.lines(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lines\n got %q\nwant %q", got, want)
	}
	// The envelope parses as a message, so a downstream that re-reads it
	// (or a gate behind this one) can.
	m, err := ParseMessage(b, "", 0)
	if err != nil || m.ID != "digest:abc" || m.Recipient() != q.Recipient {
		t.Errorf("ParseMessage(digest) = %+v, %v", m, err)
	}
}

// Only the newest DigestTexts texts are quoted, and a single message is
// "1 notification".
func TestDigestEnvelopeBounds(t *testing.T) {
	var held []Held
	for i := range 3 * DigestTexts {
		held = append(held, Held{Scene: "s", Payload: fmt.Appendf(nil, `{"content":{"text":"t%d"}}`, i)})
	}
	var d digestOf
	if err := json.Unmarshal(DigestEnvelope("digest:x", Queue{"open_id:ou", "digest:s"}, held), &d); err != nil {
		t.Fatal(err)
	}
	ls := d.lines()
	if len(ls) != 2+DigestTexts || ls[2] != fmt.Sprintf("• t%d", 3*DigestTexts-1) {
		t.Errorf("lines %q, want the count, Latest: and the %d newest", ls, DigestTexts)
	}
	if err := json.Unmarshal(DigestEnvelope("digest:y", Queue{"open_id:ou", "digest:s"}, held[:1]), &d); err != nil {
		t.Fatal(err)
	}
	if got := d.Content.Post.EnUS.Title; got != "1 notification held back" {
		t.Errorf("title %q", got)
	}
	if got := clipText("über\n\tlong text", 8); !utf8.ValidString(got) || got != "über lo…" {
		t.Errorf("clipText = %q, want one line cut at 8 runes", got)
	}
}
