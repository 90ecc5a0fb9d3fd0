package procstat

import (
	"math"
	"time"

	"github.com/prometheus/procfs"
)

// clockTick is the unit of /proc times (USER_HZ, 100 on every Linux build
// that matters here, and the value procfs assumes too).
const clockTick = 10 * time.Millisecond

// CPU is the user + system time of process pid, all its threads; 0 when it
// cannot be read (the process is gone, say).
func CPU(pid int) time.Duration {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0
	}
	s, err := p.Stat()
	if err != nil {
		return 0
	}
	return cpuOf(s)
}

// CPUNamed sums the CPU time of every process whose command name is name
// (every backend of a postgres cluster, for instance). A process that exits
// meanwhile takes its time away: read it as a rough guide.
func CPUNamed(name string) time.Duration {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, p := range procs {
		s, err := p.Stat()
		if err != nil {
			continue // gone since the listing
		}
		if s.Comm == name {
			total += cpuOf(s)
		}
	}
	return total
}

// Machine is the busy and total time of all cores since boot: busy is
// everything but idle and iowait, total the sum of user, nice, system,
// idle, iowait, irq, softirq and steal (guest time is inside user already).
func Machine() (busy, total time.Duration) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, 0
	}
	c := st.CPUTotal
	idle := ticks(c.Idle) + ticks(c.Iowait)
	total = ticks(c.User) + ticks(c.Nice) + ticks(c.System) + idle + ticks(c.IRQ) + ticks(c.SoftIRQ) + ticks(c.Steal)
	return total - idle, total
}

// cpuOf is utime + stime, counted in whole ticks as /proc keeps them.
func cpuOf(s procfs.ProcStat) time.Duration {
	return time.Duration(s.UTime+s.STime) * clockTick
}

// ticks turns procfs's seconds (ticks / USER_HZ, a float) back into whole
// ticks, so that busy and total add up exactly as /proc/stat's counters do.
func ticks(seconds float64) time.Duration {
	return time.Duration(math.Round(seconds*float64(time.Second/clockTick))) * clockTick
}
