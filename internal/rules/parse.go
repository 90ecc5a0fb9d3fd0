package rules

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/antifatigue/gate/internal/gate"
)

// Bounds on what a rule document may say. Values outside them are almost
// always mistakes (a unit typo, a pasted file) and are rejected with the
// bound in the message.
const (
	// MaxDocumentBytes bounds one document. Rule files are a few kilobytes;
	// the bound keeps a bad Nacos publish or a stray file from costing memory
	// in every gate process.
	MaxDocumentBytes = 1 << 20
	// MinWindow is the shortest window: a shorter one limits nothing a
	// person would notice.
	MinWindow = time.Millisecond
	// MaxWindow is the longest window, a leap year: a longer one is most
	// likely a unit mistake and would keep window entries for years.
	MaxWindow = 366 * 24 * time.Hour
	// MaxLimit bounds a limit's max: a window store keeps one entry per
	// admitted message in a window, and a larger max limits nothing.
	MaxLimit = 1_000_000
)

// The keys each mapping of a rule document may hold, in the order
// error messages list them.
var (
	topKeys   = []string{"unknown_scene", "recipient_caps", "scenes"}
	sceneKeys = []string{"limits", "on_exceed", "bypass_priorities", "shadow", "on_store_error",
		"max_defer", "defer_fallback", "digest_group", "tz", "quiet_hours"}
	limitKeys = []string{"window", "calendar", "rate", "max", "burst"}
)

// priorityOrder is the order bypass_priorities are normalized to: by rank,
// as people read them, rather than alphabetically.
var priorityOrder = []gate.Priority{gate.PriorityLow, gate.PriorityNormal, gate.PriorityHigh, gate.PriorityUrgent}

// Doc is one named rule document. Name appears in every error about it, so
// make it what a person would open: a path, or a source such as
// nacos:GATE/gate-rules.yaml.
type Doc struct {
	Name string
	Data []byte
}

// Parse reads one rule document: it is Merge of a single Doc. Every error is
// an *Error whose problems name the place and the reason.
func Parse(name string, data []byte) (*gate.RuleSet, error) {
	return Merge(Doc{Name: name, Data: data})
}

// Merge reads several documents as one, as a rules folder is read. Each
// document may define scenes; each top-level key other than scenes may be set
// in one document only, and a scene may be defined in one document only:
// otherwise which definition wins would depend on file names, so the whole
// set is rejected instead. The result is normalized (rolling limits sorted by
// window, then calendar limits, day before week; bypass priorities by rank;
// defaults filled in) and carries its Version.
// Every error is an *Error.
func Merge(docs ...Doc) (*gate.RuleSet, error) {
	m := &merger{
		set: gate.RuleSet{
			UnknownScene: gate.ActionForward,
			Scenes:       map[string]gate.SceneRule{},
		},
		keys:   map[string]place{},
		scenes: map[string]place{},
	}
	if len(docs) == 0 {
		m.ps.add(&Problem{Err: fmt.Errorf("%w: no documents", ErrNoRules)})
		return nil, m.ps.err()
	}
	for _, d := range docs {
		m.doc(d)
	}
	if !m.ps.any() && !m.sawScenes {
		m.ps.add(missingScenes(docs))
	}
	if err := m.ps.err(); err != nil {
		return nil, err
	}
	rs := &m.set
	normalize(rs)
	v, err := version(rs)
	if err != nil {
		return nil, err
	}
	rs.Version = v
	return rs, nil
}

func missingScenes(docs []Doc) *Problem {
	const hint = `(write "scenes: {}" to run with no scene rules on purpose)`
	if len(docs) == 1 {
		return &Problem{File: docs[0].Name, Err: fmt.Errorf(`%w: the document has no "scenes" %s`, ErrNoRules, hint)}
	}
	names := make([]string, len(docs))
	for i, d := range docs {
		names[i] = d.Name
	}
	return &Problem{Err: fmt.Errorf(`%w: none of %s has "scenes" %s`, ErrNoRules, strings.Join(names, ", "), hint)}
}

// normalize puts equal rules in equal form, so they hash to the same
// version and format to the same text.
func normalize(rs *gate.RuleSet) {
	if len(rs.RecipientCaps) == 0 {
		rs.RecipientCaps = nil
	}
	slices.SortFunc(rs.RecipientCaps, limitOrder)
	for name, r := range rs.Scenes {
		slices.SortFunc(r.Limits, limitOrder)
		if len(r.BypassPriorities) == 0 {
			r.BypassPriorities = nil
		}
		slices.SortFunc(r.BypassPriorities, func(a, b gate.Priority) int {
			return slices.Index(priorityOrder, a) - slices.Index(priorityOrder, b)
		})
		rs.Scenes[name] = r
	}
}

// version hashes the canonical JSON of every field of rs but Version itself.
// Hashing a copy of the whole struct, rather than a hand-picked list, means a
// field added to gate.RuleSet later changes the version without anyone
// remembering to update this function.
func version(rs *gate.RuleSet) (string, error) {
	c := *rs
	c.Version = ""
	b, err := json.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("hash rules: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// place is where something was defined, for "also defined at" messages.
type place struct {
	file         string
	line, column int
}

func (p place) String() string { return fmt.Sprintf("%s:%d:%d", p.file, p.line, p.column) }

// merger accumulates documents into one rule set and remembers where each
// top-level key and scene was first defined.
type merger struct {
	ps        problems
	set       gate.RuleSet
	keys      map[string]place // top-level keys other than scenes
	scenes    map[string]place
	sawScenes bool
}

// docParser walks one document's tree into the merger.
type docParser struct {
	*merger
	file string
}

func (p *docParser) at(n *yaml.Node) place {
	return place{file: p.file, line: n.Line, column: n.Column}
}

func (p *docParser) failf(n *yaml.Node, path, format string, args ...any) {
	p.fail(n, path, fmt.Errorf(format, args...))
}

func (p *docParser) fail(n *yaml.Node, path string, err error) {
	pr := &Problem{File: p.file, Path: path, Err: err}
	if n != nil {
		pr.Line, pr.Column = n.Line, n.Column
	}
	p.ps.add(pr)
}

func (m *merger) doc(d Doc) {
	p := &docParser{merger: m, file: d.Name}
	if p.file == "" {
		p.file = "<rules>"
	}
	// Keys are checked before their values, so problems are found out of
	// order; list them as a person reads the file.
	start := len(m.ps.e.Problems)
	defer func() {
		slices.SortStableFunc(m.ps.e.Problems[start:], func(a, b *Problem) int {
			return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
		})
	}()
	root := p.decode(d.Data)
	if root == nil {
		return
	}
	fields, ok := p.mapping(root, "", topKeys)
	if !ok {
		return
	}
	for _, f := range fields {
		switch f.name {
		case "unknown_scene":
			p.claim(f)
			m.set.UnknownScene = p.action(f.val, f.name, gate.ActionForward, gate.ActionSuppress, gate.ActionDrop)
		case "recipient_caps":
			p.claim(f)
			m.set.RecipientCaps = p.limits(f.val, f.name)
		case "scenes":
			m.sawScenes = true
			p.sceneMap(f.val)
		}
	}
}

// claim records that this document sets a top-level key, and reports the
// key if another document set it first.
func (p *docParser) claim(f field) {
	if first, ok := p.keys[f.name]; ok {
		p.failf(f.key, f.name, "also set at %s; a top-level key may be set in one file only", first)
		return
	}
	p.keys[f.name] = p.at(f.key)
}

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

func (p *docParser) sceneMap(n *yaml.Node) {
	if isNull(n) {
		p.failf(n, "scenes", "must be a mapping of scene names to rules, got null (write scenes: {} for none)")
		return
	}
	fields, _ := p.mapping(n, "scenes", nil)
	for _, f := range fields {
		if !p.sceneName(f.key) {
			continue
		}
		path := scenePath(f.name)
		if first, ok := p.scenes[f.name]; ok {
			p.failf(f.key, path, "also defined at %s; a scene may be defined in one file only", first)
			continue
		}
		p.scenes[f.name] = p.at(f.key)
		p.set.Scenes[f.name] = p.scene(f.val, path)
	}
}

// sceneName checks a scene name as a message would carry it: gate.CheckName,
// the check every message's scene passes, so that a rule never names a
// scene no message can carry; and no whitespace at all, which a message may
// carry inside a scene but which a person reading or editing the rule could
// not tell apart.
func (p *docParser) sceneName(k *yaml.Node) bool {
	name := k.Value
	if isNull(k) {
		name = ""
	}
	if reason := nameProblem("scene name", name); reason != "" {
		p.failf(k, "scenes", "%s", reason)
		return false
	}
	return true
}

// nameProblem is why name, called what, cannot name a scene (or a group of
// scenes), or "" when it can.
func nameProblem(what, name string) string {
	field := what // quoted when that helps find it: not empty, not huge
	if name != "" && len(name) <= gate.MaxSceneBytes {
		field = fmt.Sprintf("%s %q", what, name)
	}
	reason := gate.InvalidReason(gate.CheckName(field, name, gate.MaxSceneBytes))
	if reason == "" && strings.IndexFunc(name, unicode.IsSpace) >= 0 {
		reason = field + " contains whitespace"
	}
	return reason
}

func (p *docParser) scene(n *yaml.Node, path string) gate.SceneRule {
	rule := gate.SceneRule{OnExceed: gate.ActionSuppress, OnStoreError: gate.ActionRetry}
	fields, ok := p.mapping(n, path, sceneKeys)
	if !ok {
		return rule
	}
	p.require(n, path, fields, "limits")
	for _, f := range fields {
		fp := path + "." + f.name
		switch f.name {
		case "limits":
			rule.Limits = p.limits(f.val, fp)
			if f.val.Kind == yaml.SequenceNode && len(f.val.Content) == 0 {
				p.failf(f.val, fp, "a scene needs at least one limit, such as [{window: 1h, max: 1}]")
			}
		case "on_exceed":
			rule.OnExceed = p.action(f.val, fp, gate.ActionSuppress, gate.ActionDrop, gate.ActionDefer, gate.ActionDigest)
		case "bypass_priorities":
			rule.BypassPriorities = p.priorities(f.val, fp)
		case "shadow":
			rule.Shadow = p.boolean(f.val, fp)
		case "on_store_error":
			rule.OnStoreError = p.action(f.val, fp, gate.ActionRetry, gate.ActionForward)
		default:
			p.holdKey(f, fp, &rule)
		}
	}
	p.holdDefaults(path, fields, &rule)
	return rule
}
