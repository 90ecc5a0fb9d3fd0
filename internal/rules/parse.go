package rules

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

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
