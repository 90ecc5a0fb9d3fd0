package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
)

// soakMonitor reads, once a minute, what the soak watches besides
// latency: the RSS of each process and of the gate's PostgreSQL backends
// (summed), each table's size and live rows, and the held rows.
type soakMonitor struct {
	conn    *pgx.Conn // the monitor's own connection: not one of the gate's backends
	schema  string
	appName string         // the gate's backends' application_name
	pids    map[string]int // process -> pid
}

func newSoakMonitor(ctx context.Context, dbURL, appName string, pids map[string]int) (*soakMonitor, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	return &soakMonitor{conn: conn, schema: u.Query().Get("search_path"), appName: appName, pids: pids}, nil
}

func (m *soakMonitor) close() { _ = m.conn.Close(context.Background()) }

// withQuery returns rawURL with one query parameter set.
func withQuery(rawURL, key, value string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("postgres url: %w", err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// sample fills in m's state at the minute's end.
func (m *soakMonitor) sample(ctx context.Context, s *soakMinute) error {
	s.rss = map[string]int64{}
	for name, pid := range m.pids {
		s.rss[name] = rssOf(pid)
	}
	pids := m.backends(ctx)
	// A backend's RSS counts the shared buffers it has touched, which
	// every backend shares: summed, only their private memory means
	// anything.
	for _, pid := range pids {
		s.rss["postgres"] += privateRSSOf(pid)
	}
	s.pgBackends = len(pids)
	// Every table of the schema that is not a partition, with its
	// partitions (pg_partition_tree lists nothing for a plain table).
	rows, err := m.conn.Query(ctx, `
		SELECT c.relname,
		       coalesce(sum(pg_total_relation_size(t.relid)), 0)::bigint,
		       coalesce(sum(st.n_live_tup), 0)::bigint
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		CROSS JOIN LATERAL (SELECT c.oid::regclass AS relid UNION SELECT relid FROM pg_partition_tree(c.oid)) t
		LEFT JOIN pg_stat_user_tables st ON st.relid = t.relid
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		GROUP BY c.relname`, m.schema)
	if err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	s.tables = map[string]tableStat{}
	var name string
	var st tableStat
	if _, err := pgx.ForEachRow(rows, []any{&name, &st.bytes, &st.rows}, func() error {
		s.tables[name] = st
		return nil
	}); err != nil {
		return fmt.Errorf("table sizes: %w", err)
	}
	if err := m.conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{m.schema, "held"}.Sanitize()).Scan(&s.held); err != nil {
		return fmt.Errorf("held rows: %w", err)
	}
	return nil
}

// backends are the process ids of the gate's PostgreSQL backends (none
// when they cannot be read).
func (m *soakMonitor) backends(ctx context.Context) []int {
	rows, err := m.conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, m.appName)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out
}

// counters sums the gate's hourly counters over the run.
func (m *soakMonitor) counters(ctx context.Context) (string, error) {
	var fwd, sup, drop, def, dig, rel, fell int64
	err := m.conn.QueryRow(ctx, `SELECT coalesce(sum(forwarded),0), coalesce(sum(suppressed),0), coalesce(sum(dropped),0),
		coalesce(sum(deferred),0), coalesce(sum(digested),0), coalesce(sum(released),0), coalesce(sum(fell_back),0)
		FROM `+pgx.Identifier{m.schema, "scene_counters"}.Sanitize()).Scan(&fwd, &sup, &drop, &def, &dig, &rel, &fell)
	if err != nil {
		return "", fmt.Errorf("counters: %w", err)
	}
	total := fwd + sup + drop + def + dig
	share := func(n int64) float64 { return 100 * float64(n) / float64(max(total, 1)) }
	return fmt.Sprintf("%d decided: forwarded %d, suppressed %d, dropped %d, deferred %d (%.0f %%), digested %d (%.0f %%); later released %d, fell back %d",
		total, fwd, sup, drop, def, share(def), dig, share(dig), rel, fell), nil
}

// rssOf is a process's resident memory, 0 when it cannot be read.
func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	n, err := vmRSS(string(b))
	if err != nil {
		return 0
	}
	return n
}

// privateRSSOf is a process's anonymous resident memory (RssAnon): what
// it holds for itself, without the shared memory it maps. 0 when it cannot
// be read.
func privateRSSOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// The processes in the order the table prints them.
var soakProcs = []string{"gate", "nats-server", "redis-server", "postgres"}

func printSoakHeader(w io.Writer) {
	fmt.Fprintln(w, "per minute: messages and checks decided, p50/p99 ms; RSS MiB (postgres: the gate's backends' private memory, RssAnon, summed); held rows; then each table's size and live rows")
}

func printSoakMinute(w io.Writer, minute int, m soakMinute, failedPublishes int64) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "min %2d\tmsgs %6d p50 %6.1f p99 %7.1f\tchecks %5d p50 %6.1f p99 %7.1f err %d\t| RSS",
		minute, len(m.msgLat), ms2(percentile(m.msgLat, 0.5)), ms2(percentile(m.msgLat, 0.99)),
		len(m.checkLat), ms2(percentile(m.checkLat, 0.5)), ms2(percentile(m.checkLat, 0.99)), m.checkErrors)
	for _, p := range soakProcs {
		fmt.Fprintf(tw, " %s %.0f", p, mib(m.rss[p]))
	}
	fmt.Fprintf(tw, " (%d backends)", m.pgBackends)
	fmt.Fprintf(tw, "\t| held %d", m.held)
	if failedPublishes > 0 {
		fmt.Fprintf(tw, "\t| failed publishes so far %d", failedPublishes)
	}
	fmt.Fprintln(tw)
	tw.Flush()
	parts := make([]string, 0, len(m.tables))
	for _, t := range sortedKeys(m.tables) {
		st := m.tables[t]
		parts = append(parts, fmt.Sprintf("%s %.1f MiB/%d", t, mib(st.bytes), st.rows))
	}
	fmt.Fprintf(w, "       tables: %s\n", strings.Join(parts, ", "))
}
