package redisstore

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/storetest"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/redis/go-redis/v9"
)

// newClient returns a client of the test Redis, closed when t ends.
func newClient(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatalf("parse GATE_TEST_REDIS_URL: %v", err)
	}
	opts.ContextTimeoutEnabled = true
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a Store over client with a generous timeout: the tests
// share two cores with -race.
func newStore(t testing.TB, client redis.UniversalClient, prefix string) *Store {
	t.Helper()
	s, err := New(client, Options{KeyPrefix: prefix, Timeout: time.Second})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// newPrefix returns a key prefix of this test alone, and deletes its keys
// when t ends.
func newPrefix(t testing.TB, raw *redis.Client) string {
	t.Helper()
	prefix := testenv.Unique("gatetest")
	t.Cleanup(func() {
		ctx := context.Background()
		if keys := scanKeys(t, raw, prefix+":*"); len(keys) > 0 {
			raw.Del(ctx, keys...)
		}
	})
	return prefix
}

func scanKeys(t testing.TB, raw *redis.Client, match string) []string {
	t.Helper()
	var keys []string
	iter := raw.Scan(context.Background(), 0, match, 1000).Iterator()
	for iter.Next(context.Background()) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan %s: %v", match, err)
	}
	return keys
}

var globSpecial = regexp.MustCompile(`[*?\[\]\\]`)

func TestConformance(t *testing.T) {
	conformance(t, Options{})
}

// TestConformanceLegacy runs the suite on a store that decides on both
// layouts and writes both (LegacyKeys), as gates do during an upgrade.
func TestConformanceLegacy(t *testing.T) {
	conformance(t, Options{LegacyKeys: true})
}

func conformance(t *testing.T, opts Options) {
	storetest.Run(t, harness(opts))
}

// harness opens stores with opts on the test Redis, each under a key prefix
// of its own.
func harness(opts Options) storetest.Harness {
	return storetest.Harness{
		Open: func(t *testing.T) storetest.Backend {
			raw := newClient(t)
			opts := opts
			opts.KeyPrefix, opts.Timeout = newPrefix(t, raw), time.Second
			open := func(t *testing.T, c redis.UniversalClient) *Store {
				s, err := New(c, opts)
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return s
			}
			s := open(t, raw)
			other := func(t *testing.T) gate.WindowStore { return open(t, newClient(t)) }
			return backend(s, raw, other)
		},
	}
}

// backend is what the conformance suite needs of s, whose client is raw:
// other opens a second client of the same store. Its windows are those of
// the recipient's key; a legacy store's old windows must hold as many
// entries.
func backend(s *Store, raw redis.UniversalClient, other func(t *testing.T) gate.WindowStore) storetest.Backend {
	ctx := context.Background()
	read := func(t *testing.T, recipient string) []redis.Z {
		// A read expires a key whose time has come.
		key, err := raw.ZRangeWithScores(ctx, s.Key(recipient), 0, -1).Result()
		if err != nil {
			t.Fatalf("ZRANGE %s: %v", s.Key(recipient), err)
		}
		return key
	}
	return storetest.Backend{
		Store:  s,
		Client: other,
		Sleep:  time.Sleep,
		Now: func(t *testing.T) time.Time {
			now, err := raw.Time(ctx).Result()
			if err != nil {
				t.Fatalf("TIME: %v", err)
			}
			return now
		},
		Keys: func(t *testing.T, recipient string) int {
			return Windows(read(t, recipient))
		},
		Members: func(t *testing.T, recipient, scene string) int {
			n := Entries(read(t, recipient), scene)
			if s.layout == layoutLegacy {
				key := s.CapKey(recipient)
				if scene != "" {
					key = s.SceneKey(recipient, scene)
				}
				if old := int(raw.ZCard(ctx, key).Val()); old != n {
					t.Errorf("%s: %d entries in the old layout, %d in the recipient's key", key, old, n)
				}
			}
			return n
		},
	}
}

// After SCRIPT FLUSH (as after a restart or failover) the next batch loads
// the script again and is decided once: no request comes back Duplicate.
func TestScriptReloadedAfterFlush(t *testing.T) {
	raw := newClient(t)
	s := newStore(t, raw, newPrefix(t, raw))
	ctx := context.Background()
	r := "open_id:" + testenv.Unique("r")
	q := func(id string) gate.AdmitRequest {
		return gate.AdmitRequest{ID: id, Recipient: r, Scene: "s", Limits: []gate.Limit{{Window: time.Hour, Max: 3}}}
	}
	if _, err := s.Admit(ctx, []gate.AdmitRequest{q("a")}); err != nil {
		t.Fatalf("first Admit: %v", err)
	}
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	res, err := s.Admit(ctx, []gate.AdmitRequest{q("b"), q("c"), q("d"), q("a")})
	if err != nil {
		t.Fatalf("Admit after SCRIPT FLUSH: %v", err)
	}
	got := make([]string, len(res))
	for i, r := range res {
		switch {
		case r.Duplicate:
			got[i] = "duplicate"
		case r.Admitted:
			got[i] = "admitted"
		default:
			got[i] = "rejected"
		}
	}
	if want := "admitted admitted rejected duplicate"; strings.Join(got, " ") != want {
		t.Fatalf("after SCRIPT FLUSH got %q, want %q", strings.Join(got, " "), want)
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	checkUnavailable(t, client, 200*time.Millisecond)
}

// A Redis that accepts connections and never answers (hung, or behind a
// dead link) costs a caller Timeout, not the client's ReadTimeout.
func TestHungRedisTimesOut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 100)
	t.Cleanup(func() {
		_ = ln.Close()
		for {
			select {
			case c := <-conns:
				_ = c.Close()
			default:
				return
			}
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c // held open, never answered
		}
	}()
	client := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ContextTimeoutEnabled: true, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = client.Close() })
	checkUnavailable(t, client, 200*time.Millisecond)
}

func checkUnavailable(t *testing.T, client *redis.Client, timeout time.Duration) {
	t.Helper()
	s, err := New(client, Options{Timeout: timeout})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	start := time.Now()
	_, err = s.Admit(ctx, []gate.AdmitRequest{{ID: "m", Recipient: "open_id:r", Scene: "s", Limits: []gate.Limit{{Window: time.Hour, Max: 1}}}})
	if took := time.Since(start); took > timeout+time.Second {
		t.Errorf("Admit took %v, want about the timeout %v", took, timeout)
	}
	if !errors.Is(err, gate.ErrUnavailable) {
		t.Errorf("Admit error = %v, want one that wraps gate.ErrUnavailable", err)
	}
	start = time.Now()
	err = s.Ping(ctx)
	if took := time.Since(start); took > timeout+time.Second {
		t.Errorf("Ping took %v, want about the timeout %v", took, timeout)
	}
	if !errors.Is(err, gate.ErrUnavailable) {
		t.Errorf("Ping error = %v, want one that wraps gate.ErrUnavailable", err)
	}
}

func TestNewRejects(t *testing.T) {
	ok := &redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   Options
	}{
		{"nil client", nil, Options{}},
		{"client ignoring context deadlines", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Options{}},
		{"cluster client ignoring context deadlines", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), Options{}},
		{"brace in prefix", redis.NewClient(ok), Options{KeyPrefix: "ga{te"}},
		{"negative timeout", redis.NewClient(ok), Options{Timeout: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.client != nil {
				t.Cleanup(func() { _ = tc.client.Close() })
			}
			if s, err := New(tc.client, tc.opts); err == nil {
				t.Fatalf("New = %+v, want an error", s)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	s, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ recipient, scene, wantScene, wantCap string }{
		{"open_id:ou_1", "alert.disk_full", "gate:{open_id:ou_1}:s:alert.disk_full", "gate:{open_id:ou_1}:c"},
		// A '}' would end the hash tag early; '%' is escaped so that the
		// escape itself cannot collide.
		{"email:a}b", "s", "gate:{email:a%7Db}:s:s", "gate:{email:a%7Db}:c"},
		{"email:a%7Db", "s", "gate:{email:a%257Db}:s:s", "gate:{email:a%257Db}:c"},
		{"email:{x}", "s}", "gate:{email:{x%7D}:s:s}", "gate:{email:{x%7D}:c"},
	} {
		if got := s.SceneKey(tc.recipient, tc.scene); got != tc.wantScene {
			t.Errorf("SceneKey(%q, %q) = %q, want %q", tc.recipient, tc.scene, got, tc.wantScene)
		}
		if got := s.CapKey(tc.recipient); got != tc.wantCap {
			t.Errorf("CapKey(%q) = %q, want %q", tc.recipient, got, tc.wantCap)
		}
	}
}

// TestMemoryPerWindow reports what one (recipient, scene) costs in Redis
// holding 3 entries with 36-character ids, in the recipient's key of one
// scene, the default prefix and a 43-byte recipient, as in production: for
// the rule {1/h, 3/24h}, and for {1/h, 3/day} in Asia/Shanghai, whose key
// must also live until the day ends.
func TestMemoryPerWindow(t *testing.T) {
	raw := newClient(t)
	prefix := newPrefix(t, raw)
	s := newStore(t, raw, DefaultKeyPrefix)
	ctx := context.Background()
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		scene  string
		limits []gate.Limit
	}{
		{"alert.disk_full", []gate.Limit{{Window: time.Hour, Max: 1}, {Window: 24 * time.Hour, Max: 3}}},
		{"alert.daily", []gate.Limit{{Window: time.Hour, Max: 1}, {Calendar: gate.CalendarDay, Max: 3}}},
	} {
		// The recipient carries the test's prefix, so that newPrefix's
		// cleanup finds it under the default one.
		r := "open_id:ou_" + prefix + strings.Repeat("7", max(0, 32-len(prefix)))
		key := s.Key(r)
		t.Cleanup(func() { raw.Del(context.Background(), key) })
		raw.Del(ctx, key)
		reqs := make([]gate.AdmitRequest, 3)
		for i := range reqs {
			id := testenv.Unique("m")
			id += strings.Repeat("0", 36-len(id))
			reqs[i] = gate.AdmitRequest{ID: id[:36], Recipient: r, Scene: tc.scene, Force: true, Limits: tc.limits, Zone: sh}
		}
		res, err := s.Admit(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		n, err := raw.MemoryUsage(ctx, key).Result()
		if err != nil {
			t.Fatalf("MEMORY USAGE: %v", err)
		}
		members, err := raw.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Entries(members, tc.scene); got != 3 {
			t.Fatalf("%d entries, want 3", got)
		}
		t.Logf("MEMORY USAGE %s = %d bytes (3 entries: ids of 36 bytes, kept as hashes of %d)", key, n, memberBytes)
		if n > 260 {
			t.Errorf("%s: the recipient's key takes %d bytes, want at most 260", tc.scene, n)
		}
		// The key outlives its longest limit by its margin: for the day, the
		// later of the rolling hour and the day's end (in the last hour of
		// a Shanghai day, the hour is the longer).
		keep := 24 * time.Hour
		if tc.limits[1].Calendar != "" {
			_, end := tc.limits[1].Period(res[2].Now, sh)
			keep = max(end.Sub(res[0].Now), tc.limits[0].Window)
		}
		margin := max(time.Second, min(keep/16, time.Hour))
		ttl, err := raw.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatalf("PTTL: %v", err)
		}
		if ttl > keep+margin+time.Second || ttl < keep-time.Second {
			t.Errorf("%s: PTTL = %v, want between %v and %v", tc.scene, ttl, keep, keep+margin)
		}
	}
}

// TestMemoryPerRate reports what a rate limit adds in Redis: a member of
// the recipient's key holding its TAT; a message without one adds none, nor
// a cap entry without caps.
func TestMemoryPerRate(t *testing.T) {
	raw := newClient(t)
	s := newStore(t, raw, newPrefix(t, raw))
	ctx := context.Background()
	r := "open_id:ou_" + strings.Repeat("7", 32)
	limits := []gate.Limit{{Window: 24 * time.Hour, Max: 3}, {Rate: 10 * time.Minute, Max: 3}}
	reqs := make([]gate.AdmitRequest, 4)
	for i := range reqs {
		id := testenv.Unique("m")
		id += strings.Repeat("0", 36-len(id))
		reqs[i] = gate.AdmitRequest{ID: id[:36], Recipient: r, Scene: "chat.mention", Force: true, Limits: limits}
	}
	res, err := s.Admit(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	key := s.Key(r)
	n, err := raw.MemoryUsage(ctx, key).Result()
	if err != nil {
		t.Fatalf("MEMORY USAGE %s: %v", key, err)
	}
	t.Logf("MEMORY USAGE %s = %d bytes, with a rate limit's TAT", key, n)
	if n > 300 {
		t.Errorf("the key takes %d bytes, want at most 300", n)
	}
	// Four forced admissions leave the TAT a burst (30m) ahead of the last,
	// not four intervals.
	all, err := raw.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", key, err)
	}
	tat, ok := TAT(all, "chat.mention")
	if !ok {
		t.Fatalf("no TAT in %s: %v", key, all)
	}
	if want := res[3].Now.Add(30 * time.Minute).UnixMilli(); tat != want {
		t.Errorf("TAT = %d, want %d (the last forced admission + burst × interval)", int64(tat), want)
	}
	plain := gate.AdmitRequest{ID: "m", Recipient: r, Scene: "plain", Limits: limits[:1]}
	if _, err := s.Admit(ctx, []gate.AdmitRequest{plain}); err != nil {
		t.Fatal(err)
	}
	members, err := raw.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	// chat.mention's entries and TAT, plain's entry.
	if got := Windows(members); got != 3 {
		t.Errorf("%d windows and TATs, want 3: %v", got, members)
	}
}
