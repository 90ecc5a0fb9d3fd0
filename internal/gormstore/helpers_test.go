package gormstore

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/porttest"
)

// MustOpen opens a Store on opts and closes it when the test ends.
func MustOpen(tb testing.TB, opts Options) *Store {
	tb.Helper()
	s, err := Open(context.Background(), opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

// MustCommit commits recs or fails the test; it returns Commit's known keys.
func MustCommit(tb testing.TB, s *Store, recs ...gate.Record) (known []string) {
	tb.Helper()
	known, err := s.Commit(context.Background(), recs)
	if err != nil {
		tb.Fatalf("Commit(%d records): %v", len(recs), err)
	}
	return known
}

// t0 is on the hour, so hour boundaries in tests are easy to read.
var t0 = porttest.T0

// record is a decided message of scene without an audit row.
var record = porttest.Record

// suppressed is a suppressed message of scene for recipient, with its
// audit row.
var suppressed = porttest.Suppressed

// countRows counts the rows of table.
func countRows(tb testing.TB, s *Store, table string) int64 {
	tb.Helper()
	var n int64
	if err := s.db.Raw("SELECT count(*) FROM " + table).Scan(&n).Error; err != nil {
		tb.Fatalf("count %s: %v", table, err)
	}
	return n
}

// summaryOf returns the summary of scene over all time, or a zero one.
func summaryOf(tb testing.TB, s *Store, scene string) gate.SceneSummary {
	tb.Helper()
	sums, err := s.Summary(context.Background(), time.Time{}, time.Time{})
	if err != nil {
		tb.Fatalf("Summary: %v", err)
	}
	for _, c := range sums {
		if c.Scene == scene {
			return c
		}
	}
	return gate.SceneSummary{Scene: scene}
}

// proxy forwards TCP connections to a target until it is stopped; then
// the target looks unreachable to whoever dialed the proxy.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(tb testing.TB, target string) *proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{ln: ln, target: target}
	go p.serve()
	tb.Cleanup(p.stop)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(u, c); u.Close() }()
		go func() { _, _ = io.Copy(c, u); c.Close() }()
	}
}

// stop closes the listener and every forwarded connection.
func (p *proxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

var keys = porttest.Keys
