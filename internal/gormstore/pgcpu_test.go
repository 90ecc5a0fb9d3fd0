package gormstore

import (
	"time"

	"github.com/antifatigue/gate/internal/procstat"
)

// postgresCPU sums the CPU time of every postgres process on this host (the
// test database runs here), so benchmarks can report the server's cost per
// record next to the wall time. Other users of the server add to it, and a
// backend that exits meanwhile takes its time away: read it as a rough guide.
func postgresCPU() time.Duration { return procstat.CPUNamed("postgres") }
