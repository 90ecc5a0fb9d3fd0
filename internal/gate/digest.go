package gate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds of a digest's content: the newest texts it quotes, and the length
// of each, so that a digest of a hundred long messages stays small.
const (
	DigestTexts     = 5
	DigestTextRunes = 200
)

// DigestID is the id of the digest that carries the held messages of queue
// q from the message firstID to lastID (a queue's messages are a sequence,
// so these two name the digest's content). It depends on nothing else: a
// digest settled again after a crash has the same id (its Nats-Msg-Id and
// its admission in the windows), and the outbound stream keeps one copy;
// one that carries more messages than the copy published before the crash
// has another id, and is published too, so no message is in none.
func DigestID(q Queue, firstID, lastID string) string {
	h := sha256.New()
	for _, s := range []string{q.Recipient, q.Name, firstID, lastID} {
		// Each part is prefixed by its length: no two tuples hash alike.
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	return "digest:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// DigestEnvelope is the message that summarises held, the messages of queue
// q in the order they arrived: a Feishu-style post to q's recipient, with
// id, and with scene the queue's name. It says how many messages of which
// scenes it carries, and quotes the newest DigestTexts of their texts.
// What a held message's bytes say is read at best effort: a payload that
// is not an envelope, or content with no text, is counted but not quoted.
func DigestEnvelope(id string, q Queue, held []Held) []byte {
	typ, rid, ok := strings.Cut(q.Recipient, ":")
	if !ok {
		typ, rid = "open_id", q.Recipient
	}
	var order []string
	count := map[string]int{}
	for _, h := range held {
		if count[h.Scene] == 0 {
			order = append(order, h.Scene)
		}
		count[h.Scene]++
	}
	line := func(s string) []postElement { return []postElement{{Tag: "text", Text: s}} }
	var content [][]postElement
	for _, scene := range order {
		content = append(content, line(fmt.Sprintf("%d × %s", count[scene], scene)))
	}
	var texts []string
	for i := len(held) - 1; i >= 0 && len(texts) < DigestTexts; i-- {
		if t := messageText(held[i].Payload); t != "" {
			texts = append(texts, t)
		}
	}
	if len(texts) > 0 {
		content = append(content, line("Latest:"))
		for _, t := range texts {
			content = append(content, line("• "+t))
		}
	}
	title := fmt.Sprintf("%d notifications held back", len(held))
	if len(held) == 1 {
		title = "1 notification held back"
	}
	env := digestEnvelope{ID: id, Scene: q.Name, ReceiveIDType: typ, ReceiveID: rid, MsgType: "post"}
	env.Content.Post.EnUS.Title = title
	env.Content.Post.EnUS.Content = content
	// Strings and slices of them only: Marshal cannot fail.
	b, _ := json.Marshal(env)
	return b
}

type postElement struct {
	Tag  string `json:"tag"`
	Text string `json:"text"`
}

type digestEnvelope struct {
	ID            string `json:"id"`
	Scene         string `json:"scene"`
	ReceiveIDType string `json:"receive_id_type"`
	ReceiveID     string `json:"receive_id"`
	MsgType       string `json:"msg_type"`
	Content       struct {
		Post struct {
			EnUS struct {
				Title   string          `json:"title"`
				Content [][]postElement `json:"content"`
			} `json:"en_us"`
		} `json:"post"`
	} `json:"content"`
}

// messageText is the text of an envelope, clipped to DigestTextRunes on one
// line: content.text, where content is an object or a JSON string holding
// one; else the title of a post; else "".
func messageText(payload []byte) string {
	var env struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(payload, &env) != nil || len(env.Content) == 0 {
		return ""
	}
	raw := []byte(env.Content)
	var s string
	if json.Unmarshal(raw, &s) == nil {
		raw = []byte(s)
	}
	var c struct {
		Text  string                     `json:"text"`
		Title string                     `json:"title"`
		Post  map[string]json.RawMessage `json:"post"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return ""
	}
	text := c.Text
	if text == "" {
		text = c.Title
	}
	if text == "" {
		// A post holds one body per language; the first title, in the
		// order of the language names, will do.
		for _, lang := range slices.Sorted(maps.Keys(c.Post)) {
			var b struct {
				Title string `json:"title"`
			}
			if json.Unmarshal(c.Post[lang], &b) == nil && b.Title != "" {
				text = b.Title
				break
			}
		}
	}
	return clipText(text, DigestTextRunes)
}

// clipText makes t one line of at most n runes, marking a cut with "…".
func clipText(t string, n int) string {
	t = strings.Join(strings.Fields(t), " ")
	if utf8.RuneCountInString(t) <= n {
		return t
	}
	r := []rune(t)
	return string(r[:n-1]) + "…"
}
