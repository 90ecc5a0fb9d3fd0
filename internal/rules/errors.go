package rules

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoRules marks input that holds no rules at all: an empty document, an
// empty folder, or a merged document without "scenes". It is always an error,
// never "no limits", because an empty Nacos config means the config was
// deleted and an empty file is more often an accident than an intent.
var ErrNoRules = errors.New("no rules")

// ErrStale is returned by Live when a document arrives with a sequence number
// no newer than one it has already seen. The document is ignored: a newer one
// has already decided what is in force.
var ErrStale = errors.New("stale rule document")

// maxProblems bounds how many problems one Error lists: enough to fix a
// document in one pass, few enough that a pasted binary does not produce a
// megabyte of log.
const maxProblems = 20

// Problem is one reason a rule document was rejected, at the place where a
// person editing the file would fix it.
type Problem struct {
	// File names the document: a path, or a source such as
	// nacos:GATE/gate-rules.yaml. Empty for problems of a whole merged set.
	File string
	// Line and Column are 1-based; 0 when the problem has no single place.
	Line, Column int
	// Path says where in the document, e.g. scenes.alert.disk_full.limits[1].window;
	// empty at the document's root.
	Path string
	// Err is the reason, wrapping ErrNoRules or a gate.ParseDuration error
	// where one applies.
	Err error
}

// Error formats the problem as file:line:col: path: reason, the form
// editors and CI logs turn into links.
func (p *Problem) Error() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
			if p.Column > 0 {
				fmt.Fprintf(&b, ":%d", p.Column)
			}
		}
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Err.Error())
	return b.String()
}

// Unwrap lets errors.Is find ErrNoRules behind a problem.
func (p *Problem) Unwrap() error { return p.Err }

// Error is what Parse, Merge and LoadPath return for a document that does not
// parse or validate. It lists every problem found (up to a bound) so that one
// `gate rules check` run shows all there is to fix; errors.As gives callers
// the places, e.g. to annotate a diff.
type Error struct {
	Problems []*Problem
	// Omitted counts problems found beyond the bound and not listed.
	Omitted int
}

// Error writes one problem per line.
func (e *Error) Error() string {
	lines := make([]string, 0, len(e.Problems)+1)
	for _, p := range e.Problems {
		lines = append(lines, p.Error())
	}
	if e.Omitted > 0 {
		lines = append(lines, fmt.Sprintf("too many problems: %d more not shown; fix these and check again", e.Omitted))
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, so errors.Is(err, ErrNoRules) works on the
// whole list.
func (e *Error) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}

// problems collects what is wrong while a document is walked; the walk goes
// on after a problem so that all of them are reported together.
type problems struct{ e Error }

func (ps *problems) add(p *Problem) {
	if len(ps.e.Problems) >= maxProblems {
		ps.e.Omitted++
		return
	}
	ps.e.Problems = append(ps.e.Problems, p)
}

func (ps *problems) any() bool { return len(ps.e.Problems) > 0 }

func (ps *problems) err() error {
	if !ps.any() {
		return nil
	}
	e := ps.e
	return &e
}
