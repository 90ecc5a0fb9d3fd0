package faulttest

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/gateproc"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// needServices skips (fails under make test) unless the test services are
// configured. Every scenario checks it before it starts anything: the suite
// is heavy, and belongs where make test runs it, not in a plain go test.
func needServices(t testing.TB) {
	t.Helper()
	testenv.DatabaseURL(t)
}

// natsServer is a nats-server process with JetStream, storing its streams
// on disk so that it can be killed and restarted without losing them.
type natsServer struct {
	*proc
	addr string
}

func startNATS(t testing.TB) *natsServer {
	t.Helper()
	bin := gateproc.Build(t, "nats-server", natsServerPackage)
	port := strconv.Itoa(testenv.FreePort(t))
	n := &natsServer{addr: "127.0.0.1:" + port, proc: newProc(t, "nats-server", bin,
		[]string{"-a", "127.0.0.1", "-p", port, "-js", "-sd", t.TempDir(), "-n", "fault-nats"}, baseEnv())}
	n.start()
	return n
}

func (n *natsServer) url() string { return "nats://" + n.addr }

// start runs the server and waits until it accepts connections.
func (n *natsServer) start() {
	n.t.Helper()
	n.proc.Start()
	waitUntil(n.t, 20*time.Second, "nats-server accepts connections on "+n.addr, func() bool { return dialable(n.addr) })
}

// redisServer is a redis-server process of the test's own, on its own port,
// with an append-only file: a kill -9 and restart keeps the windows, and
// (like any restart) empties the script cache. Redis writes the file before
// it answers, so a killed process loses nothing it acknowledged; fsync once a
// second is enough, and spares the disk other tests share.
type redisServer struct {
	*proc
	addr string
}

func startRedis(t testing.TB) *redisServer {
	t.Helper()
	needServices(t)
	bin := needBinary(t, "redis-server")
	port := strconv.Itoa(testenv.FreePort(t))
	r := &redisServer{addr: "127.0.0.1:" + port, proc: newProc(t, "redis-server", bin, []string{
		"--bind", "127.0.0.1", "--port", port, "--dir", t.TempDir(), "--save", "",
		"--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no", "--protected-mode", "no",
	}, baseEnv())}
	r.start()
	return r
}

func (r *redisServer) url() string { return "redis://" + r.addr + "/0" }

func (r *redisServer) start() {
	r.t.Helper()
	r.proc.Start()
	c := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
	defer c.Close()
	waitUntil(r.t, 20*time.Second, "redis-server answers PING on "+r.addr, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	})
}

// client returns a go-redis client of this server, closed with the test.
func (r *redisServer) client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// pgCluster is a throwaway PostgreSQL cluster (initdb under a temp folder),
// so a test can crash and restart it without touching the shared database.
// PostgreSQL refuses to run as root: as root the test runs it as the
// postgres user.
type pgCluster struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	attr *syscall.SysProcAttr
}

func startPostgres(t testing.TB) *pgCluster {
	t.Helper()
	needServices(t)
	bin := pgBin(t)
	dir, err := os.MkdirTemp("", "gate-faulttest-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgCluster{t: t, bin: bin, dir: dir, port: testenv.FreePort(t)}
	t.Cleanup(func() {
		p.crash()
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("postgres must not run as root, and there is no postgres user to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		p.attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	run(t, time.Minute, p.attr, filepath.Join(bin, "initdb"), "-D", p.data(), "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	p.start()
	return p
}

// pgBin finds the newest installed PostgreSQL server binaries.
func pgBin(t testing.TB) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i]
		}
	}
	return filepath.Dir(needBinary(t, "initdb"))
}

func (p *pgCluster) data() string { return filepath.Join(p.dir, "data") }

func (p *pgCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// start starts the cluster and waits until it accepts queries.
func (p *pgCluster) start() {
	p.t.Helper()
	// fsync off: a crash here is of the process, not of the machine, and
	// the page cache survives it.
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100", p.port, p.dir)
	run(p.t, time.Minute, p.attr, filepath.Join(p.bin, "pg_ctl"), "-D", p.data(), "-l", filepath.Join(p.dir, "log"),
		"-o", opts, "-w", "-t", "60", "start")
	waitUntil(p.t, 30*time.Second, "postgres accepts queries", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, p.url())
		if err != nil {
			return false
		}
		defer c.Close(context.Background())
		return c.Ping(ctx) == nil
	})
}

// crash stops the cluster the way a crash would (immediate mode: no
// checkpoint, recovery from the WAL at the next start).
func (p *pgCluster) crash() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := execCommand(ctx, p.attr, filepath.Join(p.bin, "pg_ctl"), "-D", p.data(), "-m", "immediate", "-w", "stop")
	_ = cmd.Run()
}
