package rules

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// LoadPath reads the rules at path: one file (whatever its name), or a
// folder whose *.yaml and *.yml files are merged as Merge does. A folder is
// read non-recursively, in name order, skipping hidden files (editor swap
// files, Kubernetes ConfigMap internals such as ..data) and anything that is
// not a regular file after following links (ConfigMap files are links).
// A folder without rule files is ErrNoRules. Validation errors are *Error;
// I/O errors are returned wrapped as they are.
func LoadPath(path string) (*gate.RuleSet, error) {
	files, err := scanPath(path)
	if err != nil {
		return nil, err
	}
	docs, err := readDocs(files)
	if err != nil {
		return nil, err
	}
	return Merge(docs...)
}

// ruleFile is one file of a rule path, with what its fingerprint needs.
type ruleFile struct {
	name    string
	size    int64
	modTime time.Time
}

// scanPath lists the files that make up the rules at path.
func scanPath(path string) ([]ruleFile, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	if !info.IsDir() {
		return []ruleFile{{name: path, size: info.Size(), modTime: info.ModTime()}}, nil
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	var files []ruleFile
	for _, e := range entries {
		if !isRuleFileName(e.Name()) {
			continue
		}
		name := filepath.Join(path, e.Name())
		info, err := os.Stat(name) // follows links, unlike e.Info
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since ReadDir, or a dangling link
		}
		if err != nil {
			return nil, fmt.Errorf("read rules: %w", err)
		}
		if info.Mode().IsRegular() {
			files = append(files, ruleFile{name: name, size: info.Size(), modTime: info.ModTime()})
		}
	}
	if len(files) == 0 {
		return nil, &Error{Problems: []*Problem{{
			File: path,
			Err:  fmt.Errorf("%w: the folder has no *.yaml or *.yml files", ErrNoRules),
		}}}
	}
	return files, nil
}

// isRuleFileName keeps *.yaml and *.yml files that are not hidden. Editor
// temporary files are either hidden (.x.yaml.swp, .#x.yaml) or end in
// something else (x.yaml~, #x.yaml#, x.yaml.tmp), so this also skips them.
func isRuleFileName(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// readDocs reads each file, at most one byte over MaxDocumentBytes so that
// Merge reports an oversized file instead of this reading all of it.
func readDocs(files []ruleFile) ([]Doc, error) {
	docs := make([]Doc, 0, len(files))
	for _, f := range files {
		data, err := readLimited(f.name)
		if err != nil {
			return nil, fmt.Errorf("read rules: %w", err)
		}
		docs = append(docs, Doc{Name: f.name, Data: data})
	}
	return docs, nil
}

func readLimited(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, MaxDocumentBytes+1))
}
