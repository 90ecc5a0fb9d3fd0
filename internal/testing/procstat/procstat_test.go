package procstat

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// spin burns CPU in this process for about d, so that its CPU time moves.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// rusage is this process's user + system time as the kernel reports it to
// getrusage, the reference CPU must agree with.
func rusage(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CPU agrees with getrusage to within the tick /proc counts in (and a
// tick of rounding on each side), on a machine however busy.
func TestCPUOfThisProcessMatchesRusage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procstat reads Linux's /proc")
	}
	spin(100 * time.Millisecond)
	lo := rusage(t)
	got := CPU(os.Getpid())
	hi := rusage(t)
	if got < lo-2*clockTick || got > hi+2*clockTick {
		t.Fatalf("CPU = %s, want between %s and %s (getrusage before and after, +-2 ticks)", got, lo, hi)
	}
	if got == 0 {
		t.Fatalf("CPU = 0 after spinning, want this process's time")
	}
}

func TestCPUOfMissingProcessIsZero(t *testing.T) {
	if got := CPU(-1); got != 0 {
		t.Fatalf("CPU(-1) = %s, want 0", got)
	}
}

func TestCPUNamedFindsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procstat reads Linux's /proc")
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	spin(50 * time.Millisecond)
	name := string(comm[:len(comm)-1])
	// own is read first: this process's time only grows, so the sum read
	// after it can only be larger.
	own := CPU(os.Getpid())
	if got := CPUNamed(name); got < own {
		t.Fatalf("CPUNamed(%q) = %s, want at least this process's %s", name, got, own)
	}
}

func TestMachineBusyWithinTotal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("procstat reads Linux's /proc")
	}
	busy, total := Machine()
	if total <= 0 || busy <= 0 || busy > total {
		t.Fatalf("Machine() = busy %s, total %s; want 0 < busy <= total", busy, total)
	}
	if total%clockTick != 0 || busy%clockTick != 0 {
		t.Fatalf("Machine() = busy %s, total %s; want whole ticks of %s", busy, total, clockTick)
	}
}
