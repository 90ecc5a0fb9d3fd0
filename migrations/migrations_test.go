package migrations

import (
	"regexp"
	"slices"
	"testing"
)

func TestLoadBothDialectsAgree(t *testing.T) {
	pg, err := Load(Postgres)
	if err != nil {
		t.Fatalf("Load(postgres): %v", err)
	}
	lite, err := Load(SQLite)
	if err != nil {
		t.Fatalf("Load(sqlite): %v", err)
	}
	if len(pg) == 0 {
		t.Fatal("Load(postgres): got no migrations, want at least 0001_init")
	}
	if len(pg) != len(lite) {
		t.Fatalf("got %d postgres and %d sqlite migrations, want the same number", len(pg), len(lite))
	}
	for i := range pg {
		if pg[i].Version != lite[i].Version || pg[i].Name != lite[i].Name {
			t.Errorf("migration %d: postgres %d_%s, sqlite %d_%s: want the same version and name",
				i, pg[i].Version, pg[i].Name, lite[i].Version, lite[i].Name)
		}
		if got, want := objects(lite[i].SQL), objects(pg[i].SQL); !slices.Equal(got, want) {
			t.Errorf("migration %d_%s: sqlite creates %v, postgres creates %v: want the same tables and indexes",
				pg[i].Version, pg[i].Name, got, want)
		}
	}
}

var createRE = regexp.MustCompile(`(?i)CREATE\s+(?:UNIQUE\s+)?(TABLE|INDEX)\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)`)

// objects lists the tables and indexes a script creates, in order.
func objects(sql string) []string {
	var out []string
	for _, m := range createRE.FindAllStringSubmatch(sql, -1) {
		out = append(out, m[1]+" "+m[2])
	}
	return out
}

func TestFSUnknownDialect(t *testing.T) {
	if _, err := FS("mysql"); err == nil {
		t.Error("FS(mysql): got nil error, want one naming the known dialects")
	}
	if _, err := Load("mysql"); err == nil {
		t.Error("Load(mysql): got nil error, want one")
	}
}

func TestParseName(t *testing.T) {
	tests := []struct {
		file    string
		version int
		name    string
		bad     bool
	}{
		{file: "0001_init.sql", version: 1, name: "init"},
		{file: "0012_add_index.sql", version: 12, name: "add_index"},
		{file: "init.sql", bad: true},
		{file: "0001.sql", bad: true},
		{file: "0000_zero.sql", bad: true},
		{file: "x1_init.sql", bad: true},
	}
	for _, tt := range tests {
		m, err := parseName(tt.file)
		if tt.bad {
			if err == nil {
				t.Errorf("parseName(%q): got %+v, want an error", tt.file, m)
			}
			continue
		}
		if err != nil || m.Version != tt.version || m.Name != tt.name {
			t.Errorf("parseName(%q) = %d, %q, %v; want %d, %q, nil", tt.file, m.Version, m.Name, err, tt.version, tt.name)
		}
	}
}
