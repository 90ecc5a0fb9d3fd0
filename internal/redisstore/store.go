package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	DefaultKeyPrefix = "gate"
	DefaultTimeout   = 200 * time.Millisecond
)

// Options tunes a Store. The zero value means the defaults.
type Options struct {
	// KeyPrefix starts every key (default "gate"). It may not contain '{' or
	// '}', which would move the Cluster hash tag away from the recipient.
	KeyPrefix string
	// Timeout bounds one Admit or Ping call, script reload included (default
	// 200ms): a slow Redis must not stall the pipeline behind it.
	Timeout time.Duration
	// Now is the gate's clock (default time.Now), read only to compute the
	// calendar periods the script chooses from; decisions stay on Redis's
	// clock. It is set only where the gate's clock is shifted for tests
	// (GATE_TEST_CLOCK), together with Redis's.
	Now func() time.Time
	// LegacyKeys decides on the union of the recipient's key and the
	// keys of the layout before it (one per window and rate limit), and
	// writes both, in the same script call: gates of both layouts can then
	// share a Redis during a rolling upgrade (GATE_REDIS_LEGACY_KEYS; see
	// docs/operating.md). Off, only the recipient's key is read and written.
	LegacyKeys bool
}

// rediser is what the store calls on the client, so that *redis.Client,
// *redis.ClusterClient and *redis.Ring all fit.
type rediser interface {
	Pipeline() redis.Pipeliner
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Ping(ctx context.Context) *redis.StatusCmd
}

//go:embed admit.lua
var admitSource string

var admitScript = redis.NewScript(admitSource)

//go:embed forget.lua
var forgetSource string

// Store is a gate.WindowStore over Redis. It is safe for concurrent use, and
// any number of Stores (in any number of processes) may share one Redis.
type Store struct {
	client  rediser
	prefix  string
	timeout time.Duration
	perCall int // requests per EVALSHA: a run on one Redis, one on a cluster
	// script is admit.lua, source its text; a benchmark swaps in an
	// earlier version, to compare the two side by side on one Redis.
	script *redis.Script
	source string
	// now is the gate's clock, read only to compute the calendar periods
	// the script chooses from; decisions stay on the Redis clock.
	now func() time.Time
	// layout is the keys a call sends: the recipient's, with the old
	// layout's too (LegacyKeys), or, for the old script in tests and
	// benchmarks, the old layout's only.
	layout layout
}

// layout says which keys the script calls name.
type layout int

const (
	layoutOne    layout = iota // the recipient's key
	layoutLegacy               // the recipient's key, then the old layout's keys
	layoutOld                  // the old layout's keys only (testdata/admit_before.lua)
)

// perCallSingle is how many requests one EVALSHA decides on a single Redis
// (or a failover client's primary). A call blocks Redis while it runs, about
// 20 µs per request: 64 keep that near a millisecond and save most of the
// per-call cost. A cluster client, or a ring, takes one request per call,
// since the keys of one call must share a hash slot.
const perCallSingle = 64

var _ gate.WindowStore = (*Store)(nil)

// New returns a Store over client. The client must be created with
// ContextTimeoutEnabled: without it go-redis ignores context deadlines on
// the socket, and a hung Redis would hold every Admit for the client's
// ReadTimeout instead of Options.Timeout.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(opts.KeyPrefix, "{}") {
		return nil, fmt.Errorf("redisstore: key prefix %q contains '{' or '}'", opts.KeyPrefix)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("redisstore: negative timeout %v", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if !contextTimeoutEnabled(client) {
		return nil, errors.New("redisstore: the redis client must set ContextTimeoutEnabled (URL: context_timeout_enabled=true) so that Timeout bounds each call")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	perCall := 1
	if _, single := client.(*redis.Client); single {
		perCall = perCallSingle
	}
	lay := layoutOne
	if opts.LegacyKeys {
		lay = layoutLegacy
	}
	return &Store{client: client, prefix: opts.KeyPrefix, timeout: opts.Timeout, perCall: perCall, script: admitScript, source: admitSource, now: opts.Now, layout: lay}, nil
}

// contextTimeoutEnabled reports whether the client honours context
// deadlines; a client of an unknown type is trusted.
func contextTimeoutEnabled(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// Key returns the recipient's key: every window, cap, rate limit and scene
// tag of the recipient, in one sorted set (see admit.lua). It is the old
// layout's keys' hash tag with nothing after it, so it shares their Redis
// Cluster slot and is none of them.
func (s *Store) Key(recipient string) string { return s.prefix + ":{" + escape(recipient) + "}" }

// SceneKey returns the old layout's key of the scene window of (recipient,
// scene), which LegacyKeys reads and writes besides the recipient's key.
func (s *Store) SceneKey(recipient, scene string) string {
	return s.key(escape(recipient), kindScene, scene)
}

// CapKey returns the old layout's key of the recipient cap window.
func (s *Store) CapKey(recipient string) string { return s.key(escape(recipient), kindCap, "") }

// SceneRateKey returns the old layout's key of the theoretical arrival time of the
// rate limit of (recipient, scene).
func (s *Store) SceneRateKey(recipient, scene string) string {
	return s.key(escape(recipient), kindSceneRate, scene)
}

// CapRateKey returns the old layout's key of the theoretical arrival time of the
// recipient caps' rate limit.
func (s *Store) CapRateKey(recipient string) string {
	return s.key(escape(recipient), kindCapRate, "")
}

// The kinds of key of one recipient, each followed by the scene where it
// has one.
const (
	kindScene     = "s:"
	kindCap       = "c"
	kindSceneRate = "g:"
	kindCapRate   = "gc"
)

// key is the key of kind (and scene) of the recipient escaped: every key
// of one recipient shares its hash tag, so one script may touch them all.
// One concatenation, as Admit builds keys for every message.
func (s *Store) key(escaped, kind, scene string) string {
	return s.prefix + ":{" + escaped + "}:" + kind + scene
}

// escape keeps the first '}' after the prefix the end of the hash tag, and
// the mapping from recipient to key one-to-one.
func escape(recipient string) string {
	if strings.IndexByte(recipient, '}') < 0 && strings.IndexByte(recipient, '%') < 0 {
		return recipient
	}
	return escaper.Replace(recipient)
}

var escaper = strings.NewReplacer("%", "%25", "}", "%7D")

// Admit decides reqs in order in one round trip (two when the script must be
// loaded first). See gate.WindowStore. Every error but a malformed request
// wraps gate.ErrUnavailable. A malformed request (see
// gate.AdmitRequest.Validate) fails the whole batch before anything is
// sent: no rule document that validates can produce one.
//
// A calendar limit counts in the period of gate.Limit.Period, in the
// request's Zone, that holds the Redis clock. The periods come from this
// process's clock (Lua has no time zones); when the two clocks disagree by
// about a period (see storeLag), the request is not decided and Admit
// returns an error that wraps gate.ErrUnavailable, naming both clocks'
// times: the requests of the batch before it may have been recorded, as on
// any transient error.
func (s *Store) Admit(ctx context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	calls, clock, err := s.buildCalls(reqs, s.perCall)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	results := make([]gate.AdmitResult, len(reqs))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for loaded := false; ; loaded = true {
		noScript, err := s.run(ctx, reqs, calls, pending, results, clock)
		if err != nil {
			return nil, fmt.Errorf("admit: %w: %w", gate.ErrUnavailable, err)
		}
		if len(noScript) == 0 {
			return results, nil
		}
		if loaded {
			return nil, fmt.Errorf("admit: %w: script missing right after loading it", gate.ErrUnavailable)
		}
		if err := s.client.ScriptLoad(ctx, s.source).Err(); err != nil {
			return nil, fmt.Errorf("admit: load script: %w: %w", gate.ErrUnavailable, err)
		}
		// Only the calls that met NOSCRIPT run again. The others were
		// decided; running them again would turn their admissions into
		// Duplicates. On one connection NOSCRIPT hits a run of consecutive
		// calls, so each recipient's order holds but for a SCRIPT LOAD by
		// another client in the middle of the batch, which is no worse than
		// that client's own decisions interleaving with ours.
		pending = noScript
	}
}

// run sends the pending calls in one pipeline and decodes their replies into
// results; clock is the gate's time their calendar periods came from. It
// returns the calls that met NOSCRIPT.
func (s *Store) run(ctx context.Context, reqs []gate.AdmitRequest, calls []call, pending []int, results []gate.AdmitResult, clock time.Time) ([]int, error) {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(pending))
	for j, i := range pending {
		cmds[j] = pipe.EvalSha(ctx, s.script.Hash(), calls[i].keys, calls[i].args...)
	}
	// Exec's error is the first command's; each command carries its own.
	_, _ = pipe.Exec(ctx)
	var noScript []int
	for j, i := range pending {
		c := calls[i]
		replies, err := cmds[j].Slice()
		switch {
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			noScript = append(noScript, i)
			continue
		case err != nil:
			return nil, err
		case len(replies) != c.hi-c.lo:
			return nil, fmt.Errorf("script: %d replies for %d requests", len(replies), c.hi-c.lo)
		}
		for k, r := range replies {
			reply, ok := r.([]any)
			if !ok {
				return nil, fmt.Errorf("script reply %d: %T, not an array", k, r)
			}
			if results[c.lo+k], err = decode(reply, &reqs[c.lo+k], clock); err != nil {
				return nil, err
			}
		}
	}
	return noScript, nil
}

// errClockSkew is the error of a request whose calendar periods, computed
// from the gate's clock, do not hold the Redis clock.
var errClockSkew = errors.New("the clocks of Redis and the gate disagree by about a calendar period")

// decode turns the script's reply into a result; see admit.lua. gateNow is
// the gate's clock the call's calendar periods were computed from.
func decode(reply []any, req *gate.AdmitRequest, gateNow time.Time) (gate.AdmitResult, error) {
	var n [6]int64
	if len(reply) < 2 || len(reply) > len(n) {
		return gate.AdmitResult{}, fmt.Errorf("script reply %v: %d elements", reply, len(reply))
	}
	for i, v := range reply {
		x, ok := v.(int64)
		if !ok {
			return gate.AdmitResult{}, fmt.Errorf("script reply %v: element %d is %T, not an integer", reply, i, v)
		}
		n[i] = x
	}
	res := gate.AdmitResult{Now: time.UnixMilli(n[0]).UTC()}
	switch {
	case n[1] == 1 && len(reply) == 2:
		res.Admitted = true
		return res, nil
	case n[1] == 1 && len(reply) == 5:
		tight, err := exceeded(reply, req, n[2], n[3], n[4])
		if err != nil {
			return gate.AdmitResult{}, err
		}
		res.Admitted, res.Tightest = true, tight
		return res, nil
	case n[1] == 2:
		res.Admitted, res.Duplicate = true, true
		return res, nil
	case n[1] == 3:
		return gate.AdmitResult{}, fmt.Errorf("%w: Redis reads %s, outside the calendar periods computed from this gate's clock at %s",
			errClockSkew, res.Now.Format(time.RFC3339Nano), gateNow.UTC().Format(time.RFC3339Nano))
	case n[1] != 0 || len(reply) != len(n):
		return gate.AdmitResult{}, fmt.Errorf("script reply %v: unknown shape", reply)
	}
	e, err := exceeded(reply, req, n[2], n[3], n[4])
	if err != nil {
		return gate.AdmitResult{}, err
	}
	res.Exceeded, res.NextAllowedAt = e, time.UnixMilli(n[5]).UTC()
	return res, nil
}

// exceeded names the limit a reply points at: scope 1 (scene) or 2
// (recipient), its index among req's limits or caps, and a count.
func exceeded(reply []any, req *gate.AdmitRequest, scopeN, index, count int64) (*gate.Exceeded, error) {
	scope, limits := gate.ScopeScene, req.Limits
	if scopeN == 2 {
		scope, limits = gate.ScopeRecipient, req.Caps
	}
	if index < 0 || index >= int64(len(limits)) {
		return nil, fmt.Errorf("script reply %v: no %s limit %d", reply, scope, index)
	}
	return &gate.Exceeded{Scope: scope, Limit: limits[index], Count: int(count)}, nil
}

// Forget gives back what the admissions of reqs' ids took, in one pipeline
// of forget.lua calls; see gate.WindowStore. Their entries leave the scene
// and cap windows, and the rate limits get back what each admission moved
// their TATs, when the scene window still held the id; a forced admission's
// entry that holds the place of one it pushed out of a full window stays
// (admit.lua writes what such an admission took beside its entry). With
// LegacyKeys it does the same in the old layout's keys. The keys of a request share its recipient's hash slot, so
// this works on Redis Cluster too. forget.lua is sent whole (EVAL): refunds
// are rare, and NOSCRIPT handling would cost more code than the bytes it
// saves.
func (s *Store) Forget(ctx context.Context, reqs []gate.AdmitRequest) error {
	if len(reqs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	pipe := s.client.Pipeline()
	legacy := 0
	if s.layout == layoutLegacy {
		legacy = 1
	}
	for i := range reqs {
		r := &reqs[i]
		rt := ratesOf(r)
		keys := s.appendKeys(make([]string, 0, 5), r, rt)
		var se, ce int64
		if rt.si >= 0 {
			se = rt.scene.RateMillis()
		}
		if rt.ci >= 0 {
			ce = rt.caps.RateMillis()
		}
		pipe.Eval(ctx, forgetSource, keys, member(r.ID), sceneTag(r.Scene), se, ce, legacy)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("forget %d ids: %w: %w", len(reqs), gate.ErrUnavailable, err)
	}
	return nil
}

// Ping checks that Redis answers within the store's timeout.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w: %w", gate.ErrUnavailable, err)
	}
	return nil
}
