package rules

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// This file holds how documents' text and names go into messages and back
// into documents.

// describe says what a node is, for "got ..." in messages.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.AliasNode:
		return "an alias"
	case isNull(n):
		return "null"
	}
	return strconv.Quote(clip(n.Value))
}

// clip shortens document text before it goes into a message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// orList writes "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// suggest returns ` (did you mean "x"?)` when key is a likely typo of an
// allowed key; misspelled keys are the commonest mistake in rule files.
func suggest(key string, allowed []string) string {
	best, bestDist := "", 3
	for _, a := range allowed {
		if d := editDistance(key, a); d < bestDist {
			best, bestDist = a, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between short keys.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// plainName reports whether a scene name can be written unquoted, both in a
// YAML key and in an error path: letters, digits and _ . - / only, starting
// with a letter, digit or _, and not a word YAML reads as null.
func plainName(name string) bool {
	if name == "" || strings.EqualFold(name, "null") {
		return false
	}
	for i, r := range name {
		switch {
		case r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_'):
		case i > 0 && (r == '.' || r == '-' || r == '/'):
		default:
			return false
		}
	}
	return true
}

// scenePath is the error path of a scene: scenes.alert.disk_full, or
// scenes["odd name"] when the name would be ambiguous written plainly.
func scenePath(name string) string {
	if plainName(name) {
		return "scenes." + name
	}
	return "scenes[" + strconv.Quote(name) + "]"
}
