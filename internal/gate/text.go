package gate

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckName checks an identifier that the gate keys, stores, labels and
// matches on: a message id, a scene, a receive_id, and the same values as
// report filters. It must be non-blank, at most max bytes, valid UTF-8, and
// hold no control character (C0, DEL, C1) and no bidirectional formatting
// character (the overrides, embeddings, isolates and marks that make text
// display in another order than it is stored). Such a value could not be
// stored in a PostgreSQL text column, could not be matched by a person
// reading a report, or could crash a library that requires UTF-8 (a
// Prometheus label). field names the value in the reason; the error is an
// *InvalidError.
func CheckName(field, v string, max int) error {
	if strings.TrimSpace(v) == "" {
		return invalidf("%s is missing or empty", field)
	}
	if len(v) > max {
		return invalidf("%s is %d bytes, over the limit of %d", field, len(v), max)
	}
	if !utf8.ValidString(v) {
		return invalidf("%s is not valid UTF-8", field)
	}
	if i := strings.IndexFunc(v, forbiddenInName); i >= 0 {
		r, _ := utf8.DecodeRuneInString(v[i:])
		return invalidf("%s contains %s (U+%04X at byte %d)", field, runeKind(r), r, i)
	}
	return nil
}

// forbiddenInName reports the runes CheckName refuses.
func forbiddenInName(r rune) bool { return unicode.IsControl(r) || isBidiControl(r) }

// isBidiControl reports the Unicode bidirectional formatting characters:
// ALM, LRM, RLM, the embeddings and overrides (LRE..RLO) and the isolates
// (LRI..PDI).
func isBidiControl(r rune) bool {
	switch {
	case r == 0x061C, r == 0x200E, r == 0x200F:
		return true
	case r >= 0x202A && r <= 0x202E:
		return true
	case r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

func runeKind(r rune) string {
	if isBidiControl(r) {
		return "a bidirectional control character"
	}
	return "a control character"
}

// OneLine makes text that quotes what the gate does not control (a store's
// or a library's words, a message's bytes) fit one header line or log
// value: bytes that are not UTF-8 become U+FFFD, control characters (line
// breaks among them) a space, and text over max bytes is cut at a rune
// boundary and ends in "…".
func OneLine(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) > max {
		s = strings.ToValidUTF8(s[:max], "") + "…"
	}
	return s
}
