package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/redis/go-redis/v9"
)

// The DST days of Europe/Berlin are proved end to end on a gate whose clock
// is set on them (GATE_TEST_CLOCK) and, on the Redis stack, on a Redis of
// the test's own whose clock libfaketime sets alike: Redis decides on its
// own TIME, and refuses (as clock skew) calendar periods computed on a
// gate clock a period away from it. Nothing else in the test process or on
// the shared services runs on the shifted clocks.

const dstRules = `
scenes:
  dst.day:
    limits: [{calendar: day, max: 1}]
    tz: Europe/Berlin
  dst.quiet:
    limits: [{window: 1m, max: 10}]
    tz: Europe/Berlin
    quiet_hours: {from: "23:00", to: "04:00", action: defer}
`

// dstDay is one DST change of Europe/Berlin, its instants written out in
// UTC rather than computed with the zone database the gate also uses.
type dstDay struct {
	name string
	// start and next are the local midnights that begin the DST day and
	// the day after it.
	start, next time.Time
	length      time.Duration
	// quietEnd is 04:00 local time on the DST day: the end of dst.quiet's
	// quiet hours, after the change.
	quietEnd time.Time
}

var dstDays = []dstDay{
	{
		// 02:00 CET becomes 03:00 CEST on 28 March 2027.
		name:     "spring forward",
		start:    time.Date(2027, 3, 27, 23, 0, 0, 0, time.UTC), // 00:00 CET
		next:     time.Date(2027, 3, 28, 22, 0, 0, 0, time.UTC), // 00:00 CEST
		length:   23 * time.Hour,
		quietEnd: time.Date(2027, 3, 28, 2, 0, 0, 0, time.UTC), // 04:00 CEST
	},
	{
		// 03:00 CEST becomes 02:00 CET on 31 October 2027.
		name:     "fall back",
		start:    time.Date(2027, 10, 30, 22, 0, 0, 0, time.UTC), // 00:00 CEST
		next:     time.Date(2027, 10, 31, 23, 0, 0, 0, time.UTC), // 00:00 CET
		length:   25 * time.Hour,
		quietEnd: time.Date(2027, 10, 31, 3, 0, 0, 0, time.UTC), // 04:00 CET
	},
}

// TestDSTCalendarDay: on the DST days of Europe/Berlin, a {calendar: day,
// max: 1} limit counts in the local day that holds the gate's clock, 23
// hours long in spring and 25 in autumn, and the suppressed message's
// next_allowed_at is the next local midnight; quiet hours that span the
// change end at their local wall-clock time. On both stacks, through NATS.
func TestDSTCalendarDay(t *testing.T) {
	t.Parallel()
	for _, day := range dstDays {
		if got := day.next.Sub(day.start); got != day.length {
			t.Fatalf("%s: the test's own instants are %s apart, want %s", day.name, got, day.length)
		}
		t.Run(day.name, func(t *testing.T) {
			t.Parallel()
			forEachStack(t, func(t *testing.T, kind stack) { testDSTDay(t, kind, day) })
		})
	}
}

func testDSTDay(t *testing.T, kind stack, day dstDay) {
	e := newEnv(t, kind, dstRules)
	// A few minutes into the DST day, so that its period is the DST day
	// and the test has the rest of the night to run in.
	clock := day.start.Add(5 * time.Minute)
	extra := map[string]string{}
	if kind == stackReal {
		url, redisNow := fakeTimeRedis(t, clock)
		extra["GATE_REDIS_URL"] = url
		// The gate's clock starts where Redis's is now, so that the two agree
		// to within the time it takes to start the gate.
		clock = redisNow
	}
	extra["GATE_TEST_CLOCK"] = clock.Format(time.RFC3339Nano)
	g := e.start(extra)
	if !strings.Contains(g.log.String(), "the gate's clock is shifted") {
		t.Errorf("a gate with GATE_TEST_CLOCK did not warn that its clock is shifted; log:\n%s", g.log.String())
	}
	c := e.client()

	to := testenv.Unique("dst")
	ms := series(to, "dst.day", 2)
	c.sendHeld(ms...)
	if got := msgIDs(c.outFor(to)); len(got) != 1 || got[0] != ms[0].ID {
		t.Errorf("dst.day forwarded %v, want only %s", got, ms[0].ID)
	}
	rows := g.rows(to)
	r, ok := rows[ms[1].ID]
	if !ok {
		t.Fatalf("%s, over {calendar: day, max: 1}, has no suppression row; rows: %+v", ms[1].ID, rows)
	}
	t.Logf("%s: decided_at %s, next_allowed_at %s (%s after the day began at %s)",
		day.name, r.DecidedAt.UTC().Format(time.RFC3339Nano), r.NextAllowedAt.UTC().Format(time.RFC3339Nano),
		r.NextAllowedAt.Sub(day.start), day.start.Format(time.RFC3339))
	if r.DecidedAt.Before(clock) || !r.DecidedAt.Before(day.start.Add(time.Hour)) {
		t.Errorf("%s decided at %s, want on the gate's clock, between %s and an hour into the day", ms[1].ID, r.DecidedAt, clock)
	}
	if !r.NextAllowedAt.Equal(day.next) {
		t.Errorf("%s: next_allowed_at %s, want the next Berlin midnight %s", ms[1].ID, r.NextAllowedAt.UTC(), day.next)
	}
	if got := r.NextAllowedAt.Sub(day.start); got != day.length {
		t.Errorf("%s: the calendar day holding the clock is %s long (next_allowed_at - %s), want %s", ms[1].ID, got, day.start, day.length)
	}
	if r.Scope != gate.ScopeScene || r.Reason != gate.ReasonLimit || r.LimitMax != 1 || r.CountSeen != 1 || r.HeldAs != "" {
		t.Errorf("row of %s = %+v, want suppressed by the scene limit 1 with 1 seen", ms[1].ID, r)
	}

	// dst.quiet is quiet from 23:00 to 04:00 Berlin time: at 00:05 on the
	// DST day a message is held until 04:00 on the wall clock, which is 3 h
	// (spring) or 5 h (autumn) after midnight, not 4.
	qm := holdMsg{ID: to + "-quiet", Scene: "dst.quiet", To: to}
	c.sendHeld(qm)
	q, ok := g.rows(to)[qm.ID]
	switch {
	case !ok:
		t.Errorf("%s, in quiet hours, has no audit row", qm.ID)
	case q.HeldAs != gate.HoldDefer || q.Reason != gate.ReasonQuietHours:
		t.Errorf("row of %s = %+v, want held as defer by quiet_hours", qm.ID, q)
	case !q.NextAllowedAt.Equal(day.quietEnd):
		t.Errorf("%s held until %s, want 04:00 in Berlin, %s (%s after midnight)", qm.ID, q.NextAllowedAt.UTC(), day.quietEnd, day.quietEnd.Sub(day.start))
	}

	sum := g.summary()
	if s := sum["dst.day"]; s.Received != 2 || s.Forwarded != 1 || s.Suppressed != 1 || s.Deferred != 0 {
		t.Errorf("dst.day summary = %+v, want received 2, forwarded 1, suppressed 1", s)
	}
	if s := sum["dst.quiet"]; s.Received != 1 || s.Deferred != 1 || s.Forwarded != 0 || s.Released != 0 {
		t.Errorf("dst.quiet summary = %+v, want received 1, deferred 1, not yet released", s)
	}
}

// TestDSTClockSetting: GATE_TEST_CLOCK is an RFC 3339 instant the gate's
// clock starts at and runs on from; anything else is a configuration
// error that names it.
func TestDSTClockSetting(t *testing.T) {
	t.Parallel()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GATE_TEST_CLOCK" {
				return v
			}
			return ""
		}
	}
	for _, bad := range []string{"tomorrow", "2027-03-28 00:05:00", "2027-03-28"} {
		_, err := parseConfig(nil, env(bad), &strings.Builder{})
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "GATE_TEST_CLOCK") || !strings.Contains(err.Error(), "RFC 3339") {
			t.Errorf("GATE_TEST_CLOCK=%q: error %v, want a configuration error naming GATE_TEST_CLOCK and RFC 3339", bad, err)
		}
	}
	c, err := parseConfig(nil, env(""), &strings.Builder{})
	if err != nil || !c.TestClock.IsZero() {
		t.Fatalf("GATE_TEST_CLOCK unset: config %+v, error %v; want the real clock", c, err)
	}
	c, err = parseConfig(nil, env("2027-03-28T00:05:00+01:00"), &strings.Builder{})
	want := time.Date(2027, 3, 27, 23, 5, 0, 0, time.UTC)
	if err != nil || !c.TestClock.Equal(want) {
		t.Fatalf("GATE_TEST_CLOCK=2027-03-28T00:05:00+01:00: clock %s, error %v; want %s", c.TestClock, err, want)
	}
	var log strings.Builder
	now := gateClock(c, newLogger(c, &log, newScrubber(c)))
	first := now()
	time.Sleep(20 * time.Millisecond)
	second := now()
	if first.Before(want) || first.After(want.Add(time.Minute)) || !second.After(first) {
		t.Errorf("the shifted clock read %s then %s, want from %s on, running", first, second, want)
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "GATE_TEST_CLOCK") {
		t.Errorf("no warning that the clock is shifted; log: %s", log.String())
	}
}

// libfaketime returns the path of the faketime package's preload library.
// It is missing only where scripts/services.sh has not run; a test that
// needs it fails then under GATE_TEST_REQUIRE_SERVICES=1, as for a service.
func libfaketime(t *testing.T) string {
	t.Helper()
	for _, pattern := range []string{
		"/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1",
	} {
		if found, _ := filepath.Glob(pattern); len(found) > 0 {
			return found[0]
		}
	}
	msg := "faketime (libfaketime) is not installed: the DST tests run a redis-server on a fake clock (scripts/services.sh installs it: apt-get install faketime)"
	if testenv.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// fakeTimeRedis starts a redis-server of the test's own, on a free port,
// whose clock libfaketime starts at at (whole seconds) and runs on from
// there; it is killed at cleanup. It returns the server's URL and its TIME
// once it answers.
func fakeTimeRedis(t *testing.T, at time.Time) (string, time.Time) {
	t.Helper()
	lib := libfaketime(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testenv.Required() {
			t.Fatalf("redis-server not found: %v", err)
		}
		t.Skipf("redis-server not found: %v", err)
	}
	dir := t.TempDir()
	port := strconv.Itoa(testenv.FreePort(t))
	logPath := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", logPath)
	// Debian's redis-server allocates with jemalloc, which reads the clock
	// while libfaketime sets itself up and loops with it; preloading the C
	// library after libfaketime makes malloc glibc's, so jemalloc never
	// starts. FAKETIME's "@" form starts the clock at a local time that then
	// runs on: TZ=UTC makes the local time UTC.
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "TZ=UTC",
		"LD_PRELOAD=" + lib + ":libc.so.6",
		"FAKETIME=@" + at.UTC().Format(time.DateTime),
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server under libfaketime: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("fake-clock redis-server log:\n%s", b)
		}
	})

	url := "redis://127.0.0.1:" + port + "/0"
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	defer rdb.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		now, err := rdb.Time(ctx).Result()
		cancel()
		if err == nil {
			if now.Before(at.Truncate(time.Second)) || now.After(at.Add(time.Minute)) {
				t.Fatalf("redis-server under libfaketime reports TIME %s, want about %s: the fake clock did not take", now.UTC(), at)
			}
			return url, now
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("redis-server under libfaketime exited: %v\n%s", cmd.ProcessState, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server under libfaketime not answering on port %s after 20s: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
