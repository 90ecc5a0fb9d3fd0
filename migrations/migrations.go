package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// The dialects with a folder of migrations.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Migration is one numbered schema change.
type Migration struct {
	Version int    // from the file name's leading number; applies in this order
	Name    string // the rest of the file name, without ".sql"
	SQL     string // one or more statements
}

// FS returns the migration files of dialect, at the root of the returned
// file system.
func FS(dialect string) (fs.FS, error) {
	switch dialect {
	case Postgres, SQLite:
		return fs.Sub(files, dialect)
	}
	return nil, fmt.Errorf("migrations: unknown dialect %q (want %q or %q)", dialect, Postgres, SQLite)
}

// Load returns the migrations of dialect in the order they apply. Versions
// must run 1, 2, 3, … without gaps, so a file lost in a merge fails loudly
// instead of being skipped.
func Load(dialect string) ([]Migration, error) {
	fsys, err := FS(dialect)
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: list %s: %w", dialect, err)
	}
	ms := make([]Migration, 0, len(names))
	for _, file := range names {
		m, err := parseName(file)
		if err != nil {
			return nil, fmt.Errorf("migrations: %s/%s: %w", dialect, file, err)
		}
		b, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s/%s: %w", dialect, file, err)
		}
		m.SQL = string(b)
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: %s: version %d found where %d was expected", dialect, m.Version, i+1)
		}
	}
	return ms, nil
}

// parseName reads "0001_init.sql" as version 1, name "init".
func parseName(file string) (Migration, error) {
	base := strings.TrimSuffix(path.Base(file), ".sql")
	num, name, ok := strings.Cut(base, "_")
	if !ok || name == "" {
		return Migration{}, fmt.Errorf("name must look like 0001_name.sql")
	}
	v, err := strconv.Atoi(num)
	if err != nil || v <= 0 {
		return Migration{}, fmt.Errorf("name must start with a positive version number, as in 0001_name.sql")
	}
	return Migration{Version: v, Name: name}, nil
}
