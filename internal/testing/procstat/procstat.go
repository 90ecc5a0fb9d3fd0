// Package procstat reads CPU time from Linux's /proc, for benchmarks that
// report what each process of a run spent.
package procstat

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc times (USER_HZ, 100 on every Linux build
// that matters here).
const clockTick = 10 * time.Millisecond

// CPU is the user + system time of process pid, all its threads; 0 when it
// cannot be read (the process is gone, say).
func CPU(pid int) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	_, fields := splitStat(string(b))
	return cpuOf(fields)
}

// CPUNamed sums the CPU time of every process whose command name is name
// (every backend of a postgres cluster, for instance). A process that exits
// meanwhile takes its time away: read it as a rough guide.
func CPUNamed(name string) time.Duration {
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
		if comm, fields := splitStat(string(b)); comm == name {
			total += cpuOf(fields)
		}
	}
	return total
}

// Machine is the busy and total time of all cores since boot.
func Machine() (busy, total time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0
	}
	var v [8]int64
	for i := range v {
		v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
	}
	// user nice system idle iowait irq softirq steal
	idle := v[3] + v[4]
	for _, x := range v {
		total += time.Duration(x) * clockTick
	}
	return total - time.Duration(idle)*clockTick, total
}

// cpuOf is utime + stime from the fields of /proc/<pid>/stat after the
// command name.
func cpuOf(fields []string) time.Duration {
	if len(fields) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(ut+st) * clockTick
}

// splitStat splits /proc/<pid>/stat into the command name and the fields
// after it (state first); the name may hold spaces and parentheses.
func splitStat(s string) (comm string, fields []string) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", nil
	}
	return s[open+1 : end], strings.Fields(s[end+1:])
}
