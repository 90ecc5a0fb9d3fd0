package main

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

// cpuMeter reads the CPU time of the processes a phase involves, from /proc.
type cpuMeter struct {
	pids map[string]func() []int // component -> its processes
}

// components, in the order tables print them.
var components = []string{"gate", "nats", "redis", "postgres", "bench", "other"}

// cpuSnap is one reading: CPU time per component, and the machine's busy
// and total time over all cores.
type cpuSnap struct {
	at          time.Time
	used        map[string]time.Duration
	busy, total time.Duration
}

// cpuUse is the CPU spent between two readings.
type cpuUse struct {
	wall time.Duration
	used map[string]time.Duration // "other" is the machine's busy time no component accounts for
	busy time.Duration
	all  time.Duration // every core's time: wall × cores
}

func (m *cpuMeter) read() cpuSnap {
	s := cpuSnap{at: time.Now(), used: map[string]time.Duration{}}
	for name, pids := range m.pids {
		for _, pid := range pids() {
			s.used[name] += procCPU(strconv.Itoa(pid))
		}
	}
	s.busy, s.total = machineCPU()
	return s
}

func (a cpuSnap) to(b cpuSnap) cpuUse {
	u := cpuUse{wall: b.at.Sub(a.at), used: map[string]time.Duration{}, busy: b.busy - a.busy, all: b.total - a.total}
	var known time.Duration
	for name, v := range b.used {
		d := max(v-a.used[name], 0)
		u.used[name] = d
		known += d
	}
	u.used["other"] = max(u.busy-known, 0)
	return u
}

// procCPU is the user + system time of one process, all its threads.
func procCPU(pid string) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0
	}
	_, fields := splitStat(string(b))
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

// pidsNamed lists the processes whose command name is name (every backend
// of the postgres cluster, for instance).
func pidsNamed(name string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if comm, _ := splitStat(string(b)); comm == name {
			out = append(out, pid)
		}
	}
	return out
}

// machineCPU is the busy and total time of all cores since boot.
func machineCPU() (busy, total time.Duration) {
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
