package faulttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/procfs"

	"github.com/antifatigue/gate/internal/testing/testenv"
)

// checkModel has one scene of two checks an hour: of the three checks a
// recipient gets, one after the other, the first two are admitted and the
// third is not, whatever crashes in between.
var checkModel = model{Scenes: []sceneSpec{{Name: "k.check", Limits: []limit{{"1h", 2}}}}}

// TestChecksSurviveKills sends checks over POST /v1/check and gate.check,
// each asked again with its id until answered, while the gate and then
// PostgreSQL are killed with SIGKILL, twice each, on one Redis and on a
// Redis Cluster. The contract's promise for a crash at any moment
// (docs/CONTRACT.md, "Durable before it is answered") must hold:
//   - no answer given and then forgotten: every id asked again afterwards
//     gets its first answer back, marked duplicate;
//   - no slot taken twice, nor kept by an id that was refused: each
//     recipient got exactly two admitted answers, and its window holds
//     exactly two slots (a dry run is refused at a count of 2).
func TestChecksSurviveKills(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis func(t *testing.T) (url string, env map[string]string, cleanup func(prefix string))
	}{
		{"redis", func(t *testing.T) (string, map[string]string, func(string)) {
			return startRedis(t).url(), nil, func(string) {}
		}},
		{"redis cluster", func(t *testing.T) (string, map[string]string, func(string)) {
			url := testenv.RedisClusterURL(t)
			return url, map[string]string{"GATE_REDIS_CLUSTER": "true"}, func(prefix string) { deleteClusterKeys(t, url, "gate:{open_id:"+prefix) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redisURL, env, cleanup := tc.redis(t)
			pg := startPostgres(t)
			s := newStack(t, stackOptions{RedisURL: redisURL, DatabaseURL: pg.url(), Rules: checkModel, Env: env})
			g := s.startGate(nil)
			run := fmt.Sprintf("kc%x", time.Now().UnixNano()&0xffffff)
			t.Cleanup(func() { cleanup(run) })
			ck := newChecker(t, g, s.env["GATE_NATS_URL"], run, 1500)
			done := ck.start(300)
			var tm timing
			for _, k := range []struct {
				at   float64
				what string
				kill func()
			}{
				{0.15, "gate", func() { g.Kill(); time.Sleep(300 * time.Millisecond); g.start() }},
				{0.35, "postgres", func() { pg.kill(); time.Sleep(time.Second); pg.start() }},
				{0.55, "gate", func() { g.Kill(); time.Sleep(300 * time.Millisecond); g.start() }},
				{0.75, "postgres", func() { pg.kill(); time.Sleep(time.Second); pg.start() }},
			} {
				at := int64(k.at * float64(ck.total()))
				waitUntil(t, 3*time.Minute, fmt.Sprintf("%d checks answered before the %s's kill", at, k.what), func() bool { return ck.answered.Load() >= at })
				t0 := time.Now()
				k.kill()
				base := ck.answered.Load()
				waitUntil(t, 2*time.Minute, "answering again after "+k.what+"'s kill", func() bool { return ck.answered.Load() > base })
				tm.add(fmt.Sprintf("%s killed at %d answered: answering again in", k.what, at), time.Since(t0))
			}
			waitUntil(t, 3*time.Minute, "every check answered", func() bool {
				select {
				case <-done:
					return true
				default:
					return false
				}
			})
			ck.verify()
			t.Logf("%d checks over %d recipients, %d asks in all (%d failed and asked again); %s", ck.total(), ck.recipients, ck.asks.Load(), ck.retries.Load(), tm)
		})
	}
}

// kill kills the cluster's postmaster and every process it started with
// SIGKILL, as a machine's OOM killer or a crash would: nothing is flushed,
// the next start recovers from the WAL.
func (p *pgCluster) kill() {
	p.t.Helper()
	b, err := os.ReadFile(filepath.Join(p.data(), "postmaster.pid"))
	if err != nil {
		p.t.Fatalf("postmaster.pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		p.t.Fatalf("postmaster.pid: %v", err)
	}
	children := childrenOf(pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	waitUntil(p.t, 10*time.Second, "the killed postgres processes gone", func() bool {
		for _, q := range append(children, pid) {
			if pr, err := procfs.NewProc(q); err == nil {
				if st, err := pr.Stat(); err == nil && st.State != "Z" {
					return false
				}
			}
		}
		return true
	})
	// A killed postmaster whose parent does not reap it stays a zombie, which
	// the next start would take for a live postmaster in its lock files.
	for _, lock := range []string{filepath.Join(p.data(), "postmaster.pid"), filepath.Join(p.dir, fmt.Sprintf(".s.PGSQL.%d.lock", p.port))} {
		if err := os.Remove(lock); err != nil {
			p.t.Fatal(err)
		}
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	var out []int
	for _, pr := range procs {
		if st, err := pr.Stat(); err == nil && st.PPID == pid {
			out = append(out, pr.PID)
		}
	}
	return out
}

// checker asks three checks of each of its recipients, in order, over the
// two transports in turn, each until it is answered, and keeps the first
// answer of each id.
type checker struct {
	t          *testing.T
	g          *gateProc
	nc         *nats.Conn
	http       *http.Client
	run        string
	recipients int

	answered, asks, retries atomic.Int64
	mu                      sync.Mutex
	first                   map[string]checkReply
}

// checkReply is what the test reads of an answer.
type checkReply struct {
	Decision  string `json:"decision"`
	Admitted  bool   `json:"admitted"`
	Count     int    `json:"count"`
	Duplicate bool   `json:"duplicate"`
}

func newChecker(t *testing.T, g *gateProc, natsURL, run string, recipients int) *checker {
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &checker{t: t, g: g, nc: nc, run: run, recipients: recipients, first: map[string]checkReply{},
		http: &http.Client{Timeout: 3 * time.Second}}
}

func (c *checker) total() int { return 3 * c.recipients }

func (c *checker) recipient(r int) string { return fmt.Sprintf("ou_%s_%d", c.run, r) }

func (c *checker) id(r, k int) string { return fmt.Sprintf("%s-%d-%d", c.run, r, k) }

// start runs eight askers at about rate checks a second in all; done closes
// when every check has its answer.
func (c *checker) start(rate float64) (done <-chan struct{}) {
	const askers = 8
	ch := make(chan struct{})
	var wg sync.WaitGroup
	gap := time.Duration(float64(askers) / rate * float64(time.Second))
	for w := range askers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := w; r < c.recipients; r += askers {
				for k := range 3 {
					t0 := time.Now()
					a := c.askUntilAnswered(c.id(r, k), c.recipient(r), false, r+k)
					c.mu.Lock()
					c.first[c.id(r, k)] = a
					c.mu.Unlock()
					c.answered.Add(1)
					time.Sleep(gap - time.Since(t0))
				}
			}
		}()
	}
	go func() { wg.Wait(); close(ch) }()
	return ch
}

// askUntilAnswered asks the check of id until an answer comes, over HTTP or
// NATS as turn says, then the other way at each retry.
func (c *checker) askUntilAnswered(id, recipient string, dry bool, turn int) checkReply {
	body := fmt.Appendf(nil, `{"id":%q,"scene":"k.check","receive_id":%q,"dry_run":%t}`, id, recipient, dry)
	deadline := time.Now().Add(2 * time.Minute)
	for try := turn; ; try++ {
		c.asks.Add(1)
		a, err := c.ask(body, try%2 == 0)
		if err == nil {
			return a
		}
		if time.Now().After(deadline) {
			c.t.Errorf("check %s: no answer for 2 minutes: %v", id, err)
			return checkReply{}
		}
		c.retries.Add(1)
		time.Sleep(50 * time.Millisecond)
	}
}

// ask sends one check and reads its answer; any failure (refused, 503, a
// timeout, no responders) is an error, to be asked again.
func (c *checker) ask(body []byte, overHTTP bool) (checkReply, error) {
	var data []byte
	if overHTTP {
		resp, err := c.http.Post(c.g.base+"/v1/check", "application/json", bytes.NewReader(body))
		if err != nil {
			return checkReply{}, err
		}
		data, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return checkReply{}, err
		}
		if resp.StatusCode != http.StatusOK {
			return checkReply{}, fmt.Errorf("POST /v1/check: %d %s", resp.StatusCode, data)
		}
	} else {
		m, err := c.nc.Request("gate.check", body, 3*time.Second)
		if err != nil {
			return checkReply{}, err
		}
		if m.Header.Get("Nats-Service-Error-Code") != "" || bytes.Contains(m.Data, []byte(`"error"`)) {
			return checkReply{}, fmt.Errorf("gate.check: %s", m.Data)
		}
		data = m.Data
	}
	var a checkReply
	if err := json.Unmarshal(data, &a); err != nil || a.Decision == "" {
		return checkReply{}, fmt.Errorf("answer %s: %v", data, err)
	}
	return a, nil
}

// verify asks every id again, and a dry run of each recipient, and checks
// the contract's promise (see TestChecksSurviveKills).
func (c *checker) verify() {
	c.t.Helper()
	var lost, wrong, slots []string
	for r := range c.recipients {
		for k := range 3 {
			id := c.id(r, k)
			first := c.first[id]
			if first.Admitted != (k < 2) {
				wrong = append(wrong, fmt.Sprintf("%s: %+v", id, first))
			}
			again := c.askUntilAnswered(id, c.recipient(r), false, k)
			if again.Admitted != first.Admitted || again.Decision != first.Decision || !again.Duplicate {
				lost = append(lost, fmt.Sprintf("%s: first %+v, again %+v", id, first, again))
			}
		}
		if dry := c.askUntilAnswered(c.id(r, 9), c.recipient(r), true, r); dry.Admitted || dry.Count != 2 {
			slots = append(slots, fmt.Sprintf("%s: dry run %+v", c.recipient(r), dry))
		}
	}
	for what, bad := range map[string][]string{
		"answers given and then forgotten (asked again, another answer)": lost,
		"recipients whose first two checks were not the admitted ones":   wrong,
		"windows that do not hold exactly two slots":                     slots,
	} {
		if len(bad) > 0 {
			c.t.Errorf("%d %s, such as:\n%s", len(bad), what, strings.Join(bad[:min(len(bad), 5)], "\n"))
		}
	}
}
