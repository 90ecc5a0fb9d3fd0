package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// windowMemory is nats-server's resident memory after the same messages,
// with and without distinct ids in the duplicate window.
type windowMemory struct {
	ids                 int
	withIDs, withoutIDs int64 // RSS growth in bytes over the idle server
}

func (m windowMemory) perID() float64 { return float64(m.withIDs-m.withoutIDs) / float64(m.ids) }

// duplicateWindowMemory publishes ids small messages, each with a distinct
// Nats-Msg-Id, to a stream with a 2 h window on a fresh nats-server, and
// the same messages without ids on another, and returns the RSS each grew
// by. The difference is what the window holds for the ids: its map entry,
// its expiry list entry, the id string, and the Go heap's slack around
// them, which is what an operator pays.
func duplicateWindowMemory(ctx context.Context, bin string, ids int, stderr io.Writer) (windowMemory, error) {
	m := windowMemory{ids: ids}
	for _, withIDs := range []bool{false, true} {
		growth, err := rssGrowth(ctx, bin, ids, withIDs)
		if err != nil {
			return m, err
		}
		fmt.Fprintf(stderr, "gatebench: %d messages, ids %t: nats-server RSS +%d MiB\n", ids, withIDs, growth>>20)
		if withIDs {
			m.withIDs = growth
		} else {
			m.withoutIDs = growth
		}
	}
	return m, nil
}

// rssGrowth runs one nats-server for duplicateWindowMemory.
func rssGrowth(ctx context.Context, bin string, n int, withIDs bool) (int64, error) {
	dir, err := os.MkdirTemp("", "gatebench-forward-mem-")
	if err != nil {
		return 0, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	ns, natsURL, err := startNATS(ctx, bin, dir)
	if err != nil {
		return 0, err
	}
	defer func() { _ = ns.stop() }()
	nc, err := nats.Connect(natsURL, nats.Name("gatebench-forward-mem"))
	if err != nil {
		return 0, fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return 0, fmt.Errorf("jetstream: %w", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: forwardStream, Subjects: []string{forwardSubject}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Hour,
	}); err != nil {
		return 0, fmt.Errorf("create stream: %w", err)
	}
	before, err := settledRSS(ns.pid())
	if err != nil {
		return 0, err
	}
	// Ids as long as the gate's (a UUID, 36 bytes), distinct.
	prefix := nuid.Next()[:16]
	for i := range n {
		m := nats.NewMsg(forwardSubject)
		m.Data = []byte("x")
		if withIDs {
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-%019d", prefix, i))
		} else {
			m.Header.Set("Gate-Pad", fmt.Sprintf("%s-%019d", prefix, i))
		}
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second)); err != nil {
			return 0, fmt.Errorf("publish %d: %w", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	after, err := settledRSS(ns.pid())
	if err != nil {
		return 0, err
	}
	return after - before, nil
}
