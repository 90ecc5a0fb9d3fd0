package preview

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/rules"
)

// DefaultMaxDecisions is how many ledger rows a preview replays at most,
// by default: about a second of work and a few hundred megabytes of
// windows at worst (see BenchmarkReplay).
const DefaultMaxDecisions = 2_000_000

// DocumentName is the name a proposed document's problems are reported
// under.
const DocumentName = "proposed document"

// Ledger reads the decision ledger: fn gets the entries decided in [since,
// until), oldest first, a page at a time; an error from fn stops the walk
// and is returned. (*gormstore.Store).LedgerRange implements it.
type Ledger interface {
	LedgerRange(ctx context.Context, since, until time.Time, fn func([]gate.LedgerEntry) error) error
}

// Options tunes a Replayer. The zero value means the defaults.
type Options struct {
	// MaxDecisions bounds the ledger rows one preview reads (default
	// DefaultMaxDecisions); a preview that reaches it says so.
	MaxDecisions int64
}

// Replayer is a gate.Previewer over a ledger. It is safe for concurrent
// use, and runs one preview at a time: each holds windows of its own (tens
// of megabytes for a busy week) and a core while it runs, so concurrent
// requests wait their turn, or their context's end, rather than add up.
type Replayer struct {
	ledger Ledger
	max    int64
	turn   chan struct{}
}

var _ gate.Previewer = (*Replayer)(nil)

// New returns a Replayer reading ledger.
func New(ledger Ledger, opts Options) *Replayer {
	if opts.MaxDecisions <= 0 {
		opts.MaxDecisions = DefaultMaxDecisions
	}
	return &Replayer{ledger: ledger, max: opts.MaxDecisions, turn: make(chan struct{}, 1)}
}

// Preview parses doc as a rule document (rules.Parse, as Nacos documents
// are read) and replays the decisions of [since, until) against it; see
// gate.Previewer.
func (r *Replayer) Preview(ctx context.Context, doc []byte, since, until time.Time) (*gate.RulePreview, error) {
	rs, err := rules.Parse(DocumentName, doc)
	if err != nil {
		return nil, &badRequest{err}
	}
	return r.Replay(ctx, rs, since, until)
}

// Replay replays the decisions of [since, until) against rs.
func (r *Replayer) Replay(ctx context.Context, rs *gate.RuleSet, since, until time.Time) (*gate.RulePreview, error) {
	select {
	case r.turn <- struct{}{}:
		defer func() { <-r.turn }()
	case <-ctx.Done():
		return nil, fmt.Errorf("preview: wait for the preview before: %w", ctx.Err())
	}
	rp := newReplay(rs, r.max, since)
	err := r.ledger.LedgerRange(ctx, since.Add(-warmup(rs)), until, func(page []gate.LedgerEntry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return rp.page(ctx, page)
	})
	if err != nil && !errors.Is(err, errEnough) {
		var bad *badRequest
		if errors.As(err, &bad) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		return nil, fmt.Errorf("preview: read the ledger: %w", err)
	}
	return rp.result(since, until), nil
}

// errEnough stops the ledger walk at the bound of decisions.
var errEnough = errors.New("preview: enough decisions")

// badRequest is a document the caller must correct: its text is the
// parser's (or the replay's) reason, and it is a gate.ErrBadRequest.
type badRequest struct{ err error }

func (e *badRequest) Error() string        { return e.err.Error() }
func (e *badRequest) Unwrap() error        { return e.err }
func (e *badRequest) Is(target error) bool { return target == gate.ErrBadRequest }
