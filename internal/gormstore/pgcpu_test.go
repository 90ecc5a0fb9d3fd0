package gormstore

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// postgresCPU sums the CPU time of every postgres process on this host (the
// test database runs here), so benchmarks can report the server's cost per
// record next to the wall time. Other users of the server add to it, and a
// backend that exits meanwhile takes its time away: read it as a rough guide.
func postgresCPU() time.Duration {
	ents, _ := os.ReadDir("/proc")
	var total time.Duration
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100
	}
	return total
}
