package main

import "runtime/debug"

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev := ""
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
		return "gate " + bi.Main.Version + rev + " (" + bi.GoVersion + ")"
	}
	return "gate (unknown version)"
}
