package rules

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// Live is the rule set in force, shared by every goroutine that decides
// messages. Readers call Current once per message (or batch) and get an
// immutable snapshot without locking; writers (the file watcher, the Nacos
// adapter) offer new documents with Apply, Reject, ApplyDoc or Reload.
//
// Ordering: every offered document carries a sequence number, and Live
// ignores (ErrStale) any document whose number is not greater than the
// highest it has already seen, applied or rejected. So whatever order
// concurrent writers reach Live in, the newest document decides: an older
// one arriving late can never replace it, and an invalid newest document
// keeps the last good rules in force rather than letting an older, already
// superseded one in. Writers that read their documents in order take numbers
// from NextSeq; writers whose reads can overlap (Nacos runs each change
// callback in its own goroutine, possibly out of order, and its callback
// carries no revision) use Reload, which serialises "read the document, take
// a number, apply" so that the last read is the newest.
type Live struct {
	cur atomic.Pointer[gate.RuleSet]

	reload sync.Mutex // held across a Reload's fetch and apply

	mu     sync.Mutex // guards the fields below and every store to cur
	status gate.RuleStatus
	seen   uint64 // highest sequence number applied or rejected
	issued uint64 // highest sequence number handed out by NextSeq

	metrics *metrics.Metrics
	log     *slog.Logger
}

var _ gate.RuleSource = (*Live)(nil)

// NewLive returns a Live holding initial, loaded from source (e.g.
// "file:./rules" or "nacos:GATE/gate-rules.yaml"). There is no empty Live:
// a gate without valid rules at start must not start, so initial is
// required. m and log may be nil.
func NewLive(source string, initial *gate.RuleSet, m *metrics.Metrics, log *slog.Logger) (*Live, error) {
	if initial == nil {
		return nil, errors.New("new live rules: no initial rule set")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &Live{metrics: m, log: log}
	l.cur.Store(initial)
	l.status = gate.RuleStatus{Version: initial.Version, Source: source, LoadedAt: time.Now()}
	if m != nil {
		m.RulesReloads.WithLabelValues(source).Inc()
		m.RulesInfo.WithLabelValues(initial.Version, source).Set(1)
	}
	log.Info("rules in force", "source", source, "version", initial.Version, "scenes", len(initial.Scenes))
	return l, nil
}

// Current returns the rules in force. It never blocks and never returns nil.
func (l *Live) Current() *gate.RuleSet { return l.cur.Load() }

// Status describes the rules in force and the last rejected document.
// LastError is cleared once a later document is put in force, so a set
// LastError always means "the newest document was rejected".
func (l *Live) Status() gate.RuleStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.status
	st.Rules = l.cur.Load()
	return st
}

// NextSeq hands out a sequence number greater than any seen or handed out so
// far, for writers that have no ordering of their own.
func (l *Live) NextSeq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.issued = max(l.issued, l.seen) + 1
	return l.issued
}

// Apply puts rs in force unless seq is stale (ErrStale). rs must come from
// Parse, Merge or LoadPath: Live trusts its Version. A set equal to the one in
// force (same Version) changes nothing but clears LastError: someone reverted
// a broken edit.
func (l *Live) Apply(source string, seq uint64, rs *gate.RuleSet) error {
	if rs == nil {
		return errors.New("apply rules: nil rule set")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.advance(source, seq); err != nil {
		return err
	}
	old := l.cur.Load()
	oldSource := l.status.Source
	l.status.LastError, l.status.LastErrorAt = "", time.Time{}
	l.status.Source = source
	if old.Version == rs.Version {
		l.log.Debug("rules unchanged", "source", source, "version", rs.Version, "seq", seq)
	} else {
		l.cur.Store(rs)
		l.status.Version, l.status.LoadedAt = rs.Version, time.Now()
		l.log.Info("rules in force", "source", source, "old_version", old.Version, "version", rs.Version,
			"scenes", len(rs.Scenes), "seq", seq)
		if l.metrics != nil {
			l.metrics.RulesReloads.WithLabelValues(source).Inc()
		}
	}
	if l.metrics != nil && (old.Version != rs.Version || oldSource != source) {
		l.metrics.RulesInfo.DeleteLabelValues(old.Version, oldSource)
		l.metrics.RulesInfo.WithLabelValues(rs.Version, source).Set(1)
	}
	return nil
}

// Reject records that the document numbered seq from source was invalid or
// could not be read: it is logged at ERROR and counted, Status shows it, and
// the rules in force stay. A stale seq is ignored (ErrStale), so a late
// failure of an old document never hides that a newer one was applied.
// Reject returns err itself otherwise, so callers can pass the error on
// without logging it again.
func (l *Live) Reject(source string, seq uint64, err error) error {
	if err == nil {
		err = errors.New("rejected without a reason")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if staleErr := l.advance(source, seq); staleErr != nil {
		return staleErr
	}
	l.status.LastError, l.status.LastErrorAt = err.Error(), time.Now()
	if l.metrics != nil {
		l.metrics.RulesReloadErrs.WithLabelValues(source).Inc()
	}
	l.log.Error("rules rejected; the last good rules stay in force", "source", source,
		"version", l.cur.Load().Version, "seq", seq, "err", err)
	return err
}

// advance moves the high-water mark to seq, or reports seq as stale.
// The caller holds mu.
func (l *Live) advance(source string, seq uint64) error {
	if seq <= l.seen {
		l.log.Debug("stale rule document ignored", "source", source, "seq", seq, "seen", l.seen)
		return fmt.Errorf("%w: %s document %d is not newer than %d", ErrStale, source, seq, l.seen)
	}
	l.seen = seq
	return nil
}

// ApplyDoc parses one document named source and applies or rejects it under
// seq. Parsing happens outside the lock, so a large document never delays
// Status; the sequence check happens at apply time, so concurrent calls end
// with the highest seq's document decided, whatever order they finish in.
// The returned error has already been logged and counted.
func (l *Live) ApplyDoc(source string, seq uint64, data []byte) error {
	rs, err := Parse(source, data)
	return l.settle(source, seq, rs, err)
}

// Reload serialises fetch and apply: it fetches the document named source,
// numbers it, and applies or rejects it, all under one lock, so when several
// Reloads race the last one to fetch is the one that stays. The Nacos adapter
// calls it from each change callback with a fetch that asks the server for
// the current content, rather than trusting the callback's possibly stale
// copy. A slow fetch delays only other Reloads: Current and Status never
// wait for it. The returned error has already been logged and counted.
func (l *Live) Reload(source string, fetch func() ([]byte, error)) error {
	l.reload.Lock()
	defer l.reload.Unlock()
	data, err := fetch()
	seq := l.NextSeq()
	if err != nil {
		return l.Reject(source, seq, fmt.Errorf("fetch %s: %w", source, err))
	}
	return l.ApplyDoc(source, seq, data)
}

// TryReload is Reload for a source that may fail to answer for a moment
// (a rate limit, a dropped connection): a failed fetch is returned as is,
// neither numbered nor counted as a rejected document, so the caller can
// retry. A document that was fetched is applied or rejected as by Reload.
func (l *Live) TryReload(source string, fetch func() ([]byte, error)) error {
	l.reload.Lock()
	defer l.reload.Unlock()
	data, err := fetch()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrFetch, err)
	}
	return l.ApplyDoc(source, l.NextSeq(), data)
}

// ErrFetch marks a TryReload whose source could not be read.
var ErrFetch = errors.New("rule source unreadable")

// settle applies rs, or rejects err, under seq.
func (l *Live) settle(source string, seq uint64, rs *gate.RuleSet, err error) error {
	if err != nil {
		return l.Reject(source, seq, err)
	}
	return l.Apply(source, seq, rs)
}
