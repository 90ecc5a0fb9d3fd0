package rules

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// DefaultWatchInterval is how often WatchPath looks at the files when given
// no interval: quick enough that an edit is in force before the editor's
// user looks at the logs, and cheap (a stat per file).
const DefaultWatchInterval = time.Second

// fullReadEvery makes every Nth poll read and hash the files even when their
// names, sizes and modification times look unchanged: two same-size saves
// within one tick of the file system's coarse clock leave the same mtime.
const fullReadEvery = 10

// WatchPath keeps live in step with the rules at path (a file or a folder, as
// LoadPath reads it) until ctx ends, polling every interval
// (DefaultWatchInterval when interval <= 0). Polling rather than inotify works
// with editors that save by rename, with Kubernetes ConfigMaps (whose files
// are links swapped under a hidden folder) and on network file systems.
//
// Each poll compares the names, sizes and modification times of the files;
// when they change (and every few polls regardless) it reads them and
// compares a hash of their content, and only a content change is offered to
// live, under "file:"+path. An invalid change is rejected by live (logged,
// counted, shown in Status) and the last good rules stay; because only a
// change is offered, the same broken file is reported once, and fixing it is
// picked up at the next poll. The first poll offers the files as they are, so
// an edit made between loading the initial rules and starting the watch is
// not lost. WatchPath returns when ctx is done.
func WatchPath(ctx context.Context, path string, live *Live, interval time.Duration, log *slog.Logger) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &pathWatcher{path: path, source: "file:" + path, live: live, log: log}
	log.Info("watching rules", "source", w.source, "interval", interval)
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 0; ; n++ {
		w.poll(n%fullReadEvery == 0)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pathWatcher remembers what the last poll saw.
type pathWatcher struct {
	path, source string
	live         *Live
	log          *slog.Logger
	stamp        string // names, sizes and mtimes, or the scan error
	content      string // hash of names and contents, or the read error
}

func (w *pathWatcher) poll(full bool) {
	files, err := scanPath(w.path)
	stamp := stampOf(files, err)
	if stamp == w.stamp && !full {
		return
	}
	w.stamp = stamp
	var docs []Doc
	if err == nil {
		docs, err = readDocs(files)
	}
	content := contentOf(docs, err)
	if content == w.content {
		return
	}
	w.content = content
	w.log.Debug("rule files changed", "source", w.source, "files", len(docs))
	var rs *gate.RuleSet
	if err == nil {
		rs, err = Merge(docs...)
	}
	// The returned error was logged and counted by live; nothing else to do.
	_ = w.live.settle(w.source, w.live.NextSeq(), rs, err)
}

func stampOf(files []ruleFile, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "%s\x00%d\x00%d\n", f.name, f.size, f.modTime.UnixNano())
	}
	return b.String()
}

func contentOf(docs []Doc, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	h := sha256.New()
	for _, d := range docs {
		fmt.Fprintf(h, "%s\x00%d\x00", d.Name, len(d.Data))
		h.Write(d.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}
