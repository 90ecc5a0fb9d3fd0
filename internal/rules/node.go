package rules

// The generic walk over a document's yaml.Node tree: decoding one document,
// reporting syntax errors at their line, and reading mappings, scalars and
// lists while rejecting what the walk must not interpret.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// errEmpty rejects a document without content: whitespace, comments or a
// lone "---" only.
var errEmpty = fmt.Errorf("%w: the document is empty", ErrNoRules)

// decode returns the root node of the document's one non-empty YAML
// document, or nil after reporting why there is none.
func (p *docParser) decode(data []byte) *yaml.Node {
	if len(data) > MaxDocumentBytes {
		p.failf(nil, "", "document is over the limit of %d bytes", MaxDocumentBytes)
		return nil
	}
	if len(bytes.TrimSpace(data)) == 0 {
		p.fail(nil, "", errEmpty)
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root *yaml.Node
	for {
		var doc yaml.Node
		err := decodeNode(dec, &doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			p.syntax(err)
			return nil
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue // a lone "---": nothing to merge or to reject
		}
		if root != nil {
			p.failf(&doc, "", "a second YAML document starts here: a file holds one document (split the rules into files instead)")
			return nil
		}
		root = doc.Content[0]
	}
	if root == nil {
		p.fail(nil, "", errEmpty)
	}
	return root
}

// decodeNode decodes the next document. yaml.v3 is not known to panic, but a
// rule document arrives from the network and reaches every gate process at
// once: a decoder bug must cost one rejected document, not the fleet.
func decodeNode(dec *yaml.Decoder, n *yaml.Node) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: decoder failed: %v", r)
		}
	}()
	return dec.Decode(n)
}

// syntax reports a yaml.v3 syntax error at its line. yaml.v3 puts the line
// only in the text ("yaml: line 3: ..."), so it is taken from there.
func (p *docParser) syntax(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	pr := &Problem{File: p.file}
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, reason, ok := strings.Cut(rest, ": "); ok {
			if line, convErr := strconv.Atoi(num); convErr == nil {
				pr.Line, msg = line, reason
			}
		}
	}
	if slices.Contains(parserProblems, msg) {
		// yaml.v3 gives these the zero-based line of the enclosing block, or of
		// the problem when that block starts on the first line; say so rather
		// than point at a line that may look fine.
		pr.Line++
		msg += ", on this line or in the block it starts"
	}
	pr.Err = fmt.Errorf("invalid YAML: %s", msg)
	p.ps.add(pr)
}

// parserProblems are the problems yaml.v3 (v3.0.1, parserc.go) raises from
// its parser rather than its scanner; their reported line is zero-based and
// names the enclosing block. Scanner problems (scannerc.go) use other texts
// and report the problem's own line.
var parserProblems = []string{
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"did not find expected '-' indicator",
	"did not find expected <document start>",
	"did not find expected <stream-start>",
	"did not find expected key",
	"did not find expected node content",
	"found duplicate %TAG directive",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found undefined tag handle",
}

// field is one entry of a mapping node.
type field struct {
	name     string
	key, val *yaml.Node
}

// mapping returns the entries of a mapping node, reporting duplicate keys
// and, when allowed is not nil, keys outside it. Entries with a problem are
// left out, so callers only see keys worth validating.
func (p *docParser) mapping(n *yaml.Node, path string, allowed []string) ([]field, bool) {
	if !p.usable(n, path) {
		return nil, false
	}
	if n.Kind != yaml.MappingNode {
		p.failf(n, path, "must be a mapping, got %s", describe(n))
		return nil, false
	}
	seen := map[string]*yaml.Node{}
	var out []field
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case !p.usable(k, path):
			continue
		case k.Kind != yaml.ScalarNode:
			p.failf(k, path, "keys must be plain text, got %s", describe(k))
			continue
		case k.ShortTag() == "!!merge":
			p.failf(k, path, "merge keys (<<) are not supported: write the keys out")
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.failf(k, path, "duplicate key %q, first at line %d", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			p.failf(k, path, "unknown key %q%s; allowed keys: %s", clip(k.Value), suggest(k.Value, allowed), strings.Join(allowed, ", "))
			continue
		}
		out = append(out, field{name: k.Value, key: k, val: v})
	}
	return out, true
}

// knownTags are the YAML core tags a node may carry. Anything else is either
// a custom tag this package would silently misread or !!binary, which no
// rule value can be.
var knownTags = []string{"!!str", "!!int", "!!float", "!!bool", "!!null", "!!map", "!!seq", "!!merge", "!!timestamp"}

// usable reports nodes the walk must not interpret: aliases and unknown tags.
func (p *docParser) usable(n *yaml.Node, path string) bool {
	if n.Kind == yaml.AliasNode {
		p.failf(n, path, "aliases (*%s) are not supported: write the value out", n.Value)
		return false
	}
	if t := n.ShortTag(); !slices.Contains(knownTags, t) {
		p.failf(n, path, "tag %s is not supported", t)
		return false
	}
	return true
}

// scalar reports whether n is a non-null scalar, reporting it otherwise as
// "must be <want>".
func (p *docParser) scalar(n *yaml.Node, path, want string) bool {
	if !p.usable(n, path) {
		return false
	}
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.failf(n, path, "must be %s, got %s", want, describe(n))
		return false
	}
	return true
}

// sequence returns the items of a list node, or nil after reporting it.
func (p *docParser) sequence(n *yaml.Node, path, example string) []*yaml.Node {
	if !p.usable(n, path) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.failf(n, path, "must be a list such as %s, got %s", example, describe(n))
		return nil
	}
	return n.Content
}

// require reports the keys of names that fields lacks, and whether none was
// missing.
func (p *docParser) require(n *yaml.Node, path string, fields []field, names ...string) bool {
	ok := true
	for _, name := range names {
		if !slices.ContainsFunc(fields, func(f field) bool { return f.name == name }) {
			p.failf(n, path, "missing key %q", name)
			ok = false
		}
	}
	return ok
}
