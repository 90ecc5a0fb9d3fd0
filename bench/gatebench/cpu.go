package main

import (
	"time"

	"github.com/antifatigue/gate/internal/testing/procstat"
)

// cpuMeter reads the CPU time of the processes a phase involves, from /proc.
type cpuMeter struct {
	cpu map[string]func() time.Duration // component -> its processes' CPU time
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
	for name, cpu := range m.cpu {
		s.used[name] = cpu()
	}
	s.busy, s.total = procstat.Machine()
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
