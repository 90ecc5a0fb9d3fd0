package rules

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// replaceFile writes content to dir/name the way editors and ConfigMaps do,
// by renaming a finished file over it, so a poll never reads half a file.
func replaceFile(t *testing.T, dir, name string, content []byte) {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds or a deadline passes, rather than
// sleeping for a guessed time.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// startWatch runs WatchPath until the test ends, and checks that it stops
// promptly when its context is cancelled.
func startWatch(t *testing.T, path string, live *Live) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		WatchPath(ctx, path, live, 5*time.Millisecond, slog.New(slog.NewTextHandler(t.Output(), nil)))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Error("WatchPath did not return after its context was cancelled")
		}
	})
}

func TestWatchPathFolder(t *testing.T) {
	dir := t.TempDir()
	replaceFile(t, dir, "alerts.yaml", docMax(1))
	rs, err := LoadPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	source := "file:" + dir
	live, m := newTestLive(t, source, 1)
	if live.Current().Version != rs.Version {
		t.Fatal("test setup: Parse and LoadPath disagree on the version")
	}
	startWatch(t, dir, live)

	replaceFile(t, dir, "alerts.yaml", docMax(2))
	eventually(t, "the change to be in force", func() bool { return maxOf(live.Current()) == 2 })

	replaceFile(t, dir, "alerts.yaml", []byte("scenes:\n  a:\n    limits: [{window: 0s, max: 3}]\n"))
	wantErr := filepath.Join(dir, "alerts.yaml") + ":3:23: scenes.a.limits[0].window: must be positive"
	eventually(t, "the broken file to be rejected", func() bool { return strings.HasPrefix(live.Status().LastError, wantErr) })
	if got := maxOf(live.Current()); got != 2 {
		t.Errorf("after a broken edit max = %d, want the last good 2", got)
	}

	replaceFile(t, dir, "alerts.yaml", docMax(3))
	eventually(t, "the fixed file to be in force", func() bool {
		st := live.Status()
		return maxOf(st.Rules) == 3 && st.LastError == ""
	})

	// A second file redefining the scene makes the whole folder invalid.
	replaceFile(t, dir, "more.yaml", docMax(4))
	eventually(t, "the conflict to be rejected", func() bool {
		return strings.Contains(live.Status().LastError, "a scene may be defined in one file only")
	})
	if err := os.Remove(filepath.Join(dir, "more.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the conflict to clear", func() bool { return live.Status().LastError == "" })

	// Emptying the folder must not wipe the rules.
	if err := os.Remove(filepath.Join(dir, "alerts.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the empty folder to be rejected", func() bool {
		return strings.Contains(live.Status().LastError, "no rules")
	})
	if got := maxOf(live.Current()); got != 3 {
		t.Errorf("after emptying the folder max = %d, want the last good 3", got)
	}

	// Each broken state was reported once, not once per poll.
	if got := value(t, m.RulesReloadErrs.WithLabelValues(source)); got != 3 {
		t.Errorf("reload errors = %v, want 3 (broken, conflict, empty)", got)
	}
}

func TestWatchPathFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	replaceFile(t, dir, "rules.yaml", docMax(1))
	live, _ := newTestLive(t, "file:"+file, 1)
	startWatch(t, file, live)

	// Written in place, same size, within the same coarse mtime tick: the
	// periodic full read still finds it.
	if err := os.WriteFile(file, docMax(7), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the in-place change to be in force", func() bool { return maxOf(live.Current()) == 7 })

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the missing file to be reported", func() bool {
		return strings.Contains(live.Status().LastError, "no such file")
	})
	replaceFile(t, dir, "rules.yaml", docMax(8))
	eventually(t, "the restored file to be in force", func() bool { return maxOf(live.Current()) == 8 })
}
