package gormstore

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/testing/procstat"
)

// postgresCPU sums the CPU time of every postgres process on this host (the
// test database runs here), so benchmarks can report the server's cost per
// record next to the wall time. Other users of the server add to it, and a
// backend that exits meanwhile takes its time away: read it as a rough guide.
func postgresCPU() time.Duration { return procstat.CPUNamed("postgres") }

// postgresTotalCPU is postgresCPU plus what the postmaster has reaped of its
// children (cutime + cstime of a postgres process whose parent is not one):
// the autovacuum workers that vacuum and analyze the tables a benchmark
// fills come and go, and their time would be lost with them.
func postgresTotalCPU() time.Duration {
	total := postgresCPU()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, f := readStat(e.Name())
		if comm != "postgres" || len(f) < 15 {
			continue
		}
		if parent, _ := readStat(f[1]); parent == "postgres" {
			continue
		}
		cut, _ := strconv.ParseInt(f[13], 10, 64)
		cst, _ := strconv.ParseInt(f[14], 10, 64)
		total += time.Duration(cut+cst) * 10 * time.Millisecond // USER_HZ
	}
	return total
}

// readStat is the command name of process pid and the fields of its
// /proc/<pid>/stat after the name (state first).
func readStat(pid string) (string, []string) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "", nil
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", nil
	}
	return s[open+1 : end], strings.Fields(s[end+1:])
}

// pgMeter reads, before and after a benchmark, what PostgreSQL spent on it:
// the CPU of the whole server (postgresTotalCPU), of the benchmark's own
// backends (found by their application_name), and the WAL written.
type pgMeter struct {
	db  *sql.DB
	app string

	all, wal, fpi int64
	own           map[int]time.Duration
}

// start takes the readings the end's are compared with.
func (m *pgMeter) start(ctx context.Context) error {
	m.all = int64(postgresTotalCPU())
	if err := m.db.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
	(SELECT wal_fpi FROM pg_stat_wal)`).Scan(&m.wal, &m.fpi); err != nil {
		return err
	}
	var err error
	m.own, err = m.backends(ctx)
	return err
}

// backends is the CPU time of each backend whose application_name is m.app.
func (m *pgMeter) backends(ctx context.Context) (map[int]time.Duration, error) {
	rows, err := m.db.QueryContext(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, m.app)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cpu := make(map[int]time.Duration)
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return nil, err
		}
		cpu[pid] = procstat.CPU(pid)
	}
	return cpu, rows.Err()
}

// pgCost is what a benchmark cost PostgreSQL per record.
type pgCost struct {
	allMicros, ownMicros, walBytes, fpiPerK float64
}

// stop reads again and divides what was spent by n records.
func (m *pgMeter) stop(ctx context.Context, n int) (pgCost, error) {
	own, err := m.backends(ctx)
	if err != nil {
		return pgCost{}, err
	}
	all := int64(postgresTotalCPU())
	var wal, fpi int64
	if err := m.db.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
	(SELECT wal_fpi FROM pg_stat_wal)`).Scan(&wal, &fpi); err != nil {
		return pgCost{}, err
	}
	var spent time.Duration
	for pid, t := range own {
		spent += t - m.own[pid]
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(n) }
	return pgCost{
		allMicros: us(time.Duration(all - m.all)),
		ownMicros: us(spent),
		walBytes:  float64(wal-m.wal) / float64(n),
		fpiPerK:   float64(fpi-m.fpi) * 1000 / float64(n),
	}, nil
}
