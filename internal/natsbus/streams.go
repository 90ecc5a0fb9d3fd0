package natsbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/antifatigue/gate/internal/ratelog"
)

// DefaultStreamWatch is how often gate serve looks for a lost stream
// (WatchStreams).
const DefaultStreamWatch = 5 * time.Second

// streams are the gate's streams as it creates them: GATE_IN, GATE_OUT,
// GATE_DEAD and GATE_REFUND, each limited.
func (b *Bus) streams() []jetstream.StreamConfig {
	return []jetstream.StreamConfig{b.limited(b.inStream()), b.limited(b.outStream()), b.limited(b.deadStream()), b.limited(b.refundStream())}
}

// inStream is GATE_IN: a work queue (a message leaves it once the gate
// acks it), so it holds only undecided work.
func (b *Bus) inStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: StreamIn, Subjects: []string{b.opts.InSubject}, Storage: jetstream.FileStorage, Replicas: b.newReplicas(),
		Retention: jetstream.WorkQueuePolicy, MaxAge: b.opts.InMaxAge,
		MaxMsgSize: b.opts.MaxMsgBytes, Duplicates: 2 * time.Minute,
		Description: "notifications waiting for the anti-fatigue gate",
	}
}

func (b *Bus) outStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: StreamOut, Subjects: []string{b.opts.OutSubject}, Storage: jetstream.FileStorage, Replicas: b.newReplicas(),
		Retention: jetstream.LimitsPolicy, MaxAge: b.opts.OutMaxAge, Duplicates: b.opts.OutDuplicates,
		Description: "notifications the gate forwarded",
	}
}

func (b *Bus) deadStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: StreamDead, Subjects: []string{b.opts.DeadSubject}, Storage: jetstream.FileStorage, Replicas: b.newReplicas(),
		Retention: jetstream.LimitsPolicy, MaxAge: b.opts.DeadMaxAge, Duplicates: 2 * time.Hour,
		Description: "messages the gate could not decide, with a Gate-Error header",
	}
}

// The byte limits of the gate's streams unless Options.MaxBytes
// (GATE_STREAM_MAX_BYTES) names them. nats-server counts each limit, used
// or not, against its JetStream storage (max_file_store: by default 75% of
// the free disk) when the stream is created, so their sum (6.25 GiB) is
// what the gate asks of it.
const (
	// DefaultInMaxBytes bounds GATE_IN (1 GiB): undecided work, empty
	// while the gate keeps up; about a million messages of 1 KiB, hours of
	// a busy producer's backlog while the gate or a store is down.
	DefaultInMaxBytes = 1 << 30
	// DefaultOutMaxBytes bounds GATE_OUT (4 GiB): every forward for
	// Options.OutMaxAge (72h), read or not; about 4 million of 1 KiB, 16 a
	// second on average over 72h.
	DefaultOutMaxBytes = 4 << 30
	// DefaultDeadMaxBytes bounds GATE_DEAD (1 GiB): dead letters for
	// Options.DeadMaxAge (30d).
	DefaultDeadMaxBytes = 1 << 30
	// DefaultRefundMaxBytes bounds GATE_REFUND (256 MiB): refunds are
	// small and handled at once.
	DefaultRefundMaxBytes = 256 << 20
)

// maxBytes is the byte limit of the gate's stream name: Options.MaxBytes's,
// else its default.
func (b *Bus) maxBytes(name string) int64 {
	if n, ok := b.opts.MaxBytes[name]; ok {
		return n
	}
	return defaultMaxBytes(name)
}

// defaultMaxBytes is the default byte limit of the gate's stream name.
func defaultMaxBytes(name string) int64 {
	switch name {
	case StreamIn:
		return DefaultInMaxBytes
	case StreamOut:
		return DefaultOutMaxBytes
	case StreamDead:
		return DefaultDeadMaxBytes
	case StreamRefund:
		return DefaultRefundMaxBytes
	}
	return 0
}

// limited is cfg, one of the gate's streams, with its byte limit and
// discard policy new: a full stream refuses a publish, in its ack, rather
// than make room by dropping what it holds, which for GATE_IN would be
// undecided work and for GATE_OUT forwards no sender may have read yet.
func (b *Bus) limited(cfg jetstream.StreamConfig) jetstream.StreamConfig {
	cfg.MaxBytes, cfg.Discard = b.maxBytes(cfg.Name), jetstream.DiscardNew
	return cfg
}

// reconcileBytes gives the existing stream named by want (limited) the
// byte limit and discard policy the gate asks for it, without ever making
// it refuse at once what it took before:
//   - a limit Options.MaxBytes names is set, unless the stream holds more
//     already, which is an error: with discard policy new it would refuse
//     every publish until it drained (GATE_OUT: until its messages age out);
//   - else a limit the stream has is the operator's, and stays;
//   - else (a stream of an earlier gate, or made by hand) it gets its
//     default, unless it holds half of it already, or the NATS server
//     cannot reserve it: then it stays unlimited, with a warning to name it
//     in GATE_STREAM_MAX_BYTES.
//
// A stream with a limit gets discard policy new, which never drops a
// message it holds (old would, to make room). A change is logged from/to.
func (b *Bus) reconcileBytes(ctx context.Context, want jetstream.StreamConfig) error {
	s, err := b.js.Stream(ctx, want.Name)
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	info := s.CachedInfo()
	cfg, held := info.Config, info.State.Bytes
	_, named := b.opts.MaxBytes[want.Name]
	limit := cfg.MaxBytes
	switch {
	case named && held > uint64(want.MaxBytes):
		return fmt.Errorf("stream %s holds %d bytes, more than its GATE_STREAM_MAX_BYTES (%d): it would refuse every publish until it held less; raise the limit, or lower it once the stream holds less",
			want.Name, held, want.MaxBytes)
	case named:
		limit = want.MaxBytes
	case limit > 0:
	case held > uint64(want.MaxBytes)/2:
		b.log.Warn("stream left without a byte limit: it holds over half its default; name it in GATE_STREAM_MAX_BYTES",
			"stream", want.Name, "bytes", held, "default_max_bytes", want.MaxBytes)
		return nil
	default:
		limit = want.MaxBytes
	}
	if limit == cfg.MaxBytes && cfg.Discard == jetstream.DiscardNew {
		return nil
	}
	was, wasDiscard := cfg.MaxBytes, cfg.Discard
	cfg.MaxBytes, cfg.Discard = limit, jetstream.DiscardNew
	_, err = b.js.UpdateStream(ctx, cfg)
	switch {
	case err != nil && !named && was <= 0 && isFull(err):
		b.log.Warn("stream left without a byte limit: the NATS server cannot reserve its default; name it in GATE_STREAM_MAX_BYTES",
			"stream", want.Name, "default_max_bytes", limit, "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("update stream %s (max bytes %d, discard new): %w", want.Name, limit, err)
	}
	b.log.Info("changed the byte limit of a stream", "stream", want.Name, "max_bytes_from", was, "max_bytes_to", limit,
		"discard_from", wasDiscard.String(), "discard_to", cfg.Discard.String())
	return nil
}

// streamNames are the names of the gate's streams.
var streamNames = []string{StreamIn, StreamOut, StreamDead, StreamRefund}

// MinMaxBytes is the smallest byte limit a stream may be given: a message
// of NATS's default max payload, with room to spare.
const MinMaxBytes = 2 << 20

// ParseMaxBytes reads GATE_STREAM_MAX_BYTES: the byte limits of streams
// named, comma-separated, as NAME=SIZE (GATE_OUT=20GiB,GATE_IN=2GiB), or
// one SIZE for every stream. A size is a whole number of bytes, or of KiB,
// MiB, GiB or TiB, at least MinMaxBytes. Empty names none. An unknown
// stream or size is an error, never ignored.
func ParseMaxBytes(v string) (map[string]int64, error) {
	out := map[string]int64{}
	if v = strings.TrimSpace(v); v == "" {
		return out, nil
	}
	if !strings.Contains(v, "=") {
		n, err := parseSize(v)
		if err != nil {
			return nil, err
		}
		for _, name := range streamNames {
			out[name] = n
		}
		return out, nil
	}
	for _, part := range strings.Split(v, ",") {
		name, size, ok := strings.Cut(strings.TrimSpace(part), "=")
		name = strings.TrimSpace(name)
		if !ok || !slices.Contains(streamNames, name) {
			return nil, fmt.Errorf("want NAME=SIZE with NAME one of GATE_IN, GATE_OUT, GATE_DEAD, GATE_REFUND (GATE_OUT=20GiB), got %q", part)
		}
		if _, twice := out[name]; twice {
			return nil, fmt.Errorf("stream %s given twice", name)
		}
		n, err := parseSize(size)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = n
	}
	return out, nil
}

// sizeUnits are the suffixes parseSize takes, longest first.
var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}, {"", 0}}

// parseSize reads a size of bytes: digits, then a binary unit or none.
func parseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	for _, u := range sizeUnits {
		digits, ok := strings.CutSuffix(v, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(digits), 10, 64)
		if err != nil || n < 0 || n > (1<<62)>>u.shift {
			break
		}
		if n <<= u.shift; n < MinMaxBytes {
			return 0, fmt.Errorf("a stream's byte limit must be at least %d (2MiB), got %q", MinMaxBytes, v)
		}
		return n, nil
	}
	return 0, fmt.Errorf("want a size such as 4GiB, 512MiB or a number of bytes, got %q", v)
}

// FullError is a publish that a stream refused for want of room: it holds
// its MaxBytes (discard policy new), or the NATS account or server has no
// storage left. Nothing was stored; the same publish stores it once the
// stream has room. It wraps the server's answer.
type FullError struct {
	Stream string
	Err    error
}

func (e *FullError) Error() string {
	return fmt.Sprintf("stream %s is full (its GATE_STREAM_MAX_BYTES, or the NATS server's storage): %v", e.Stream, e.Err)
}

func (e *FullError) Unwrap() error { return e.Err }

// JetStream API error codes of a publish refused for want of room: the
// stream's own limits with discard policy new ("maximum bytes exceeded";
// the gate's streams set no other limit it could meet), the account's or
// the server's storage.
const (
	jsAccountResourcesExceeded jetstream.ErrorCode = 10002
	jsStorageResourcesExceeded jetstream.ErrorCode = 10047
	jsStreamStoreFailed        jetstream.ErrorCode = 10077
)

// isFull reports whether err is a publish ack refused for want of room.
func isFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jsStreamStoreFailed, jsAccountResourcesExceeded, jsStorageResourcesExceeded, jsInsufficientResources:
		return true
	}
	return false
}

// full is err, the error of a publish to stream, as a *FullError when the
// stream had no room, counted (gate_stream_full_total) and logged, once a
// minute while the stream stays full: the caller retries the message, so
// nothing is dropped, but until someone makes room the gate stands still.
// Any other error is returned as it is.
func (b *Bus) full(stream string, err error) error {
	if err == nil || !isFull(err) {
		return err
	}
	if b.opts.Metrics != nil {
		b.opts.Metrics.StreamFull.WithLabelValues(stream).Inc()
	}
	if log, since := b.fullRun(stream).Failed(time.Now()); log {
		b.log.Error("stream full: publishes to it are refused and retried until it has room; raise its GATE_STREAM_MAX_BYTES, or wait for its messages to age out",
			"stream", stream, "since", since, "err", err)
	}
	return &FullError{Stream: stream, Err: err}
}

// roomAgain ends the run of refused publishes to stream, if one was under
// way, and logs its end.
func (b *Bus) roomAgain(stream string) {
	if since := b.fullRun(stream).Ended(); !since.IsZero() {
		b.log.Info("stream has room again", "stream", stream, "full_for", time.Since(since).Round(time.Second))
	}
}

// fullRun is the run of refused publishes to stream (StreamOut or
// StreamDead), for full's log line.
func (b *Bus) fullRun(stream string) *ratelog.Run {
	if stream == StreamOut {
		return &b.fullOut
	}
	return &b.fullDead
}

// createMissing creates the stream cfg, limited, if there is none of its
// name, and reports whether it did. One that exists must capture cfg's
// subject; its other settings are the operator's (but see reconcile).
func (b *Bus) createMissing(ctx context.Context, cfg jetstream.StreamConfig) (created bool, err error) {
	s, err := b.js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cfg = b.limited(cfg)
		if _, err := b.js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			if isFull(err) {
				return false, fmt.Errorf("create stream %s: the NATS server cannot reserve its byte limit, %d (GATE_STREAM_MAX_BYTES): free its JetStream storage, raise its max_file_store, or lower the limit: %w", cfg.Name, cfg.MaxBytes, err)
			}
			return false, fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up stream %s: %w", cfg.Name, err)
	}
	return false, captures(s, cfg)
}

// captures says whether the stream s captures cfg's subject.
func captures(s jetstream.Stream, cfg jetstream.StreamConfig) error {
	have := s.CachedInfo().Config.Subjects
	if slices.Contains(have, cfg.Subjects[0]) {
		return nil
	}
	return fmt.Errorf("stream %s exists but does not capture subject %s (it captures %v)", cfg.Name, cfg.Subjects[0], have)
}

// CheckStreams is a readiness check: it fails while one of the gate's
// streams is missing (WatchStreams recreates it) or no longer captures its
// subject, naming each.
func (b *Bus) CheckStreams(ctx context.Context) error {
	var problems []string
	for _, cfg := range b.streams() {
		s, err := b.js.Stream(ctx, cfg.Name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			problems = append(problems, cfg.Name+" is missing")
		case err != nil:
			return fmt.Errorf("look up stream %s: %w", cfg.Name, err)
		default:
			if err := captures(s, cfg); err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// WatchStreams recreates every one of the gate's streams that goes
// missing, every interval, until ctx ends, as the work loops recreate a
// lost consumer: a stream deleted by hand would otherwise fail each
// forward or dead letter to it for good. Meanwhile those fail and are
// retried, and CheckStreams fails. A stream that cannot be recreated is
// logged once, until it can.
func (b *Bus) WatchStreams(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := map[string]string{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, cfg := range b.streams() {
			created, err := b.createMissing(ctx, cfg)
			if ctx.Err() != nil {
				return
			}
			switch {
			case created:
				b.log.Warn("stream lost, recreated it", "stream", cfg.Name, "subjects", cfg.Subjects)
			case err != nil && failing[cfg.Name] != err.Error():
				b.log.Error("stream unusable, retrying", "stream", cfg.Name, "err", err)
			}
			if err != nil {
				failing[cfg.Name] = err.Error()
			} else {
				delete(failing, cfg.Name)
			}
		}
	}
}
