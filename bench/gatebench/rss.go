package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// A process's resident memory, read from /proc: what the duplicate
// window's memory figure (forward_mem.go) compares.

// settledRSS reads a process's resident memory once it stopped changing
// much: the file store drops its caches some seconds after the writes.
func settledRSS(pid int) (int64, error) {
	var last int64
	for range 20 {
		time.Sleep(time.Second)
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return 0, fmt.Errorf("read RSS: %w", err)
		}
		rss, err := vmRSS(string(b))
		if err != nil {
			return 0, err
		}
		if last != 0 && abs64(rss-last) < 1<<20 {
			return rss, nil
		}
		last = rss
	}
	return last, nil
}

// vmRSS returns the VmRSS line of /proc/PID/status, in bytes.
func vmRSS(status string) (int64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		v, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS: unexpected %q", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS: %w", err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("no VmRSS in the process status")
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
