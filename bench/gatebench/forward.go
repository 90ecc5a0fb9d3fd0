package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/procstat"
)

// The forward benchmark (gatebench -forward) measures what nats-server
// spends per message on the gate's forward: the second stream write of each
// admitted message, to GATE_OUT, which in `make bench` costs nats-server
// about 10 us per message over the JetStream consume+ack ceiling. Each
// variant writes the workload's 1 KB messages to a fresh file stream
// configured like GATE_OUT, in chunks of the gate's batch size, waiting for
// each chunk's acks before the next as natsbus.Bus.Forward does; the
// variants run interleaved, round after round, in one nats-server process,
// so that what other engineers run on the machine spreads over all of them.

// forwardRounds and forwardN are the rounds of every variant and the
// messages each round publishes.
const (
	forwardRounds = 5
	forwardN      = 100_000
)

// forwardIDs is how many distinct message ids the memory figure tracks.
const forwardIDs = 1_000_000

// Names of the stream and subject each variant writes; the stream is
// created anew for every variant and round.
const (
	forwardStream  = "FWD_OUT"
	forwardSubject = "fwd.out"
)

// forwardVariant is one way to write the forward.
type forwardVariant struct {
	name, what string
	msgID      bool          // each message carries Nats-Msg-Id
	window     time.Duration // the stream's duplicate window
	// publish sends one chunk and waits until the stream stored all of it.
	publish  func(ctx context.Context, fb *forwardBench, chunk []*nats.Msg) error
	atomic   bool // the stream allows atomic batch publish
	fast     bool // the stream allows fast batch publish
	prefill  int  // small messages with distinct ids stored before the meter starts
	parallel int  // goroutines publishing chunks at once; 0 means 1
	// prefillPlain stores the prefill without ids: a stream as large, whose
	// window tracks none of them.
	prefillPlain bool
}

// forwardVariants are the variants, in the order tables print them; the
// first is what the gate does, and ratios are to it.
var forwardVariants = []forwardVariant{
	{name: "dedup-2h", what: "async publish + Nats-Msg-Id, Duplicates 2h (the gate today)", msgID: true, window: 2 * time.Hour, publish: publishAsync},
	{name: "no-msg-id", what: "async publish, no Nats-Msg-Id (no de-duplication)", window: 2 * time.Hour, publish: publishAsync},
	{name: "dedup-2h-1M", what: "as dedup-2h, on a stream that tracks 1M ids already (a 2h window at 140 forwards/s)", msgID: true, window: 2 * time.Hour, publish: publishAsync, prefill: 1_000_000},
	{name: "dedup-2h-1M-plain", what: "control of dedup-2h-1M: the stream holds 1M small messages without ids", msgID: true, window: 2 * time.Hour, publish: publishAsync, prefill: 1_000_000, prefillPlain: true},
	{name: "dedup-2h-4M", what: "as dedup-2h, on a stream that tracks 4M ids already (a 2h window at 560 forwards/s)", msgID: true, window: 2 * time.Hour, publish: publishAsync, prefill: 4_000_000},
	{name: "dedup-2h-4M-plain", what: "control of dedup-2h-4M: the stream holds 4M small messages without ids", msgID: true, window: 2 * time.Hour, publish: publishAsync, prefill: 4_000_000, prefillPlain: true},
	{name: "dedup-2m", what: "async publish + Nats-Msg-Id, Duplicates 2m", msgID: true, window: 2 * time.Minute, publish: publishAsync},
	{name: "ack-per-chunk", what: "as dedup-2h, but only a chunk's last message asks for a PubAck", msgID: true, window: 2 * time.Hour, publish: publishLastAcked},
	{name: "atomic", what: "atomic batch of the chunk + Nats-Msg-Id, Duplicates 2h: one ack per batch", msgID: true, window: 2 * time.Hour, publish: wholeBatch((*forwardBench).atomicBatch), atomic: true},
	{name: "atomic-no-id", what: "atomic batch of the chunk, no Nats-Msg-Id", window: 2 * time.Hour, publish: wholeBatch((*forwardBench).atomicBatch), atomic: true},
	{name: "fast", what: "fast batch of the chunk + Nats-Msg-Id, Duplicates 2h: a flow ack and a PubAck per batch", msgID: true, window: 2 * time.Hour, publish: wholeBatch((*forwardBench).fastBatch), fast: true},
	{name: "fast-no-id", what: "fast batch of the chunk, no Nats-Msg-Id", window: 2 * time.Hour, publish: wholeBatch((*forwardBench).fastBatch), fast: true},
	{name: "dedup-2h-x2", what: "as dedup-2h, two chunks at a time", msgID: true, window: 2 * time.Hour, publish: publishAsync, parallel: 2},
	{name: "fast-x2", what: "as fast, two batches at a time (the server then asks for acks more often)", msgID: true, window: 2 * time.Hour, publish: wholeBatch((*forwardBench).fastBatch), fast: true, parallel: 2},
}

// forwardBench is the run's connection to its nats-server.
type forwardBench struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	natsPID int
	// Where fast batches' answers come (forward_batch.go), made at the
	// first.
	fastInbox   string
	fastReplies chan *nats.Msg
	fastSub     *nats.Subscription
}

// runForwardBench starts nats-server and measures every variant, then the
// duplicate window's memory, and checks how de-duplication behaves inside
// atomic and fast batches.
func runForwardBench(ctx context.Context, c *config, stdout, stderr io.Writer) error {
	dir, err := os.MkdirTemp("", "gatebench-forward-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	ns, natsURL, err := startNATS(ctx, c.natsBin, dir)
	if err != nil {
		return err
	}
	defer func() { _ = ns.stop() }()
	nc, err := nats.Connect(natsURL, nats.Name("gatebench-forward"))
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	// The same async window as natsbus.New gives the gate.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	fb := &forwardBench{nc: nc, js: js, natsPID: ns.pid()}

	w := newWorkload(1, "fwd", 50_000)
	fmt.Fprintf(stdout, "gatebench -forward: %d rounds of %d messages (%d bytes) per variant, in chunks of %d; %s\n",
		forwardRounds, forwardN, msgSize, c.batch, machine())
	cpu := map[string][]float64{} // variant -> nats-server us per message, per round
	pub := map[string][]float64{} // variant -> this process's us per message
	for round := range forwardRounds {
		// Each round starts at another variant, so none always runs first.
		for k := range forwardVariants {
			v := forwardVariants[(round+k)%len(forwardVariants)]
			msgs := forwardMsgs(w.batchOf(forwardN), v.msgID)
			natsUS, selfUS, err := fb.measure(ctx, v, msgs, c.batch)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, v.name, err)
			}
			cpu[v.name] = append(cpu[v.name], natsUS)
			pub[v.name] = append(pub[v.name], selfUS)
			fmt.Fprintf(stderr, "gatebench: round %d %-17s nats %.1f us/msg, publisher %.1f us/msg\n", round+1, v.name, natsUS, selfUS)
		}
	}
	base := medianOf(cpu[forwardVariants[0].name])
	fmt.Fprintf(stdout, "\n%-18s %12s %8s %12s  %s\n", "variant", "nats us/msg", "ratio", "pub us/msg", "what")
	bench := []string{"BENCH_FORWARD"}
	for _, v := range forwardVariants {
		m := medianOf(cpu[v.name])
		fmt.Fprintf(stdout, "%-18s %12.1f %8.2f %12.1f  %s\n", v.name, m, m/base, medianOf(pub[v.name]), v.what)
		bench = append(bench, fmt.Sprintf("%s_nats_us=%.1f", strings.ReplaceAll(v.name, "-", "_"), m))
	}
	fmt.Fprintf(stdout, "(medians of %d interleaved rounds; ratio to %s)\n", forwardRounds, forwardVariants[0].name)

	dedup, err := fb.batchDedup(ctx, jetstream.StreamConfig{AllowAtomicPublish: true}, fb.atomicBatch)
	if err != nil {
		return fmt.Errorf("de-duplication in atomic batches: %w", err)
	}
	fmt.Fprintf(stdout, "\nde-duplication, atomic batches: %s\n", dedup)
	if dedup, err = fb.batchDedup(ctx, jetstream.StreamConfig{AllowBatchPublish: true}, fb.fastBatch); err != nil {
		return fmt.Errorf("de-duplication in fast batches: %w", err)
	}
	fmt.Fprintf(stdout, "de-duplication, fast batches: %s\n", dedup)

	// The memory figure runs on a server of its own, so that what the
	// variants left in the heap does not blur it.
	mem, err := duplicateWindowMemory(ctx, c.natsBin, forwardIDs, stderr)
	if err != nil {
		return fmt.Errorf("duplicate window memory: %w", err)
	}
	fmt.Fprintf(stdout, "\nduplicate window memory: %d tracked ids grow nats-server's RSS by %.0f MiB over the same messages without ids: %.0f bytes per id\n",
		forwardIDs, float64(mem.withIDs-mem.withoutIDs)/(1<<20), mem.perID())
	for _, rate := range []float64{1000, 10_000} {
		fmt.Fprintf(stdout, "  a 2 h window at %.0f forwards/s holds %.1f M ids: about %.1f GiB\n",
			rate, rate*7200/1e6, rate*7200*mem.perID()/(1<<30))
	}
	bench = append(bench, fmt.Sprintf("dup_window_bytes_per_id=%.0f rounds=%d n=%d batch=%d", mem.perID(), forwardRounds, forwardN, c.batch))
	fmt.Fprintln(stdout, strings.Join(bench, " "))
	return nil
}

// forwardMsgs turns generated envelopes into forwards as natsbus.Bus.Forward
// builds them: the body, Gate-Scene, Gate-Decision and the rules version,
// and the message id when msgID is set.
func forwardMsgs(m messages, msgID bool) []*nats.Msg {
	out := make([]*nats.Msg, len(m.data))
	for i, d := range m.data {
		msg := nats.NewMsg(forwardSubject)
		msg.Data = d
		if msgID {
			msg.Header.Set(jetstream.MsgIDHeader, m.envs[i].id)
		}
		msg.Header.Set(gate.SceneHeader, m.envs[i].scene)
		msg.Header.Set(headerDecision, string(gate.OutcomeForward))
		msg.Header.Set("Gate-Rules-Version", "3f2a9c1e")
		out[i] = msg
	}
	return out
}

// measure writes msgs to a fresh stream the variant's way and returns the
// CPU microseconds per message of nats-server and of this process.
func (fb *forwardBench) measure(ctx context.Context, v forwardVariant, msgs []*nats.Msg, chunk int) (natsUS, selfUS float64, err error) {
	cfg := jetstream.StreamConfig{
		Name: forwardStream, Subjects: []string{forwardSubject}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, MaxAge: 72 * time.Hour, Duplicates: v.window,
		AllowAtomicPublish: v.atomic, AllowBatchPublish: v.fast,
	}
	s, err := fb.js.CreateStream(ctx, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("create stream: %w", err)
	}
	defer func() {
		_ = fb.js.DeleteStream(context.Background(), forwardStream)
		// Let the deletion's file work end before the next variant's meter.
		time.Sleep(300 * time.Millisecond)
	}()
	if v.prefill > 0 {
		if err := fb.prefill(ctx, v.prefill, !v.prefillPlain); err != nil {
			return 0, 0, err
		}
	}
	self := os.Getpid()
	natsBefore, selfBefore := procstat.CPU(fb.natsPID), procstat.CPU(self)
	if err := fb.publishAll(ctx, v, msgs, chunk); err != nil {
		return 0, 0, err
	}
	// The file store writes its buffers out behind the acks; give it the
	// moment it takes, inside the measurement.
	time.Sleep(200 * time.Millisecond)
	natsAfter, selfAfter := procstat.CPU(fb.natsPID), procstat.CPU(self)
	info, err := s.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("stream info: %w", err)
	}
	if info.State.Msgs != uint64(v.prefill+len(msgs)) {
		return 0, 0, fmt.Errorf("the stream holds %d messages, want %d", info.State.Msgs, v.prefill+len(msgs))
	}
	n := float64(len(msgs))
	return float64(natsAfter-natsBefore) / float64(time.Microsecond) / n,
		float64(selfAfter-selfBefore) / float64(time.Microsecond) / n, nil
}

// publishAll publishes msgs chunk by chunk, from v.parallel goroutines
// (one if unset) that take the next chunk in turn, each on a bench of its
// own (a fast batch's answers come to its bench's inbox) sharing the
// connection, as the batches of a gate's stages and of its releaser do.
func (fb *forwardBench) publishAll(ctx context.Context, v forwardVariant, msgs []*nats.Msg, chunk int) error {
	var next atomic.Int64
	errs := make(chan error, max(v.parallel, 1))
	var wg sync.WaitGroup
	for range max(v.parallel, 1) {
		own := &forwardBench{nc: fb.nc, js: fb.js, natsPID: fb.natsPID}
		wg.Go(func() {
			defer func() {
				if own.fastSub != nil {
					_ = own.fastSub.Unsubscribe()
				}
			}()
			for {
				lo := int(next.Add(int64(chunk))) - chunk
				if lo >= len(msgs) {
					return
				}
				if err := v.publish(ctx, own, msgs[lo:min(lo+chunk, len(msgs))]); err != nil {
					errs <- fmt.Errorf("chunk at %d: %w", lo, err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// prefill stores n one-byte messages with distinct ids, so that the
// duplicate window tracks n ids when the variant starts, as a window in
// its steady state does; without ids unless withIDs, each with a header
// as long instead.
func (fb *forwardBench) prefill(ctx context.Context, n int, withIDs bool) error {
	prefix := nuid.Next()
	for i := range n {
		m := nats.NewMsg(forwardSubject)
		m.Data = []byte("x")
		key := jetstream.MsgIDHeader
		if !withIDs {
			key = "Gate-Pad"
		}
		m.Header.Set(key, prefix+"-"+strconv.Itoa(i))
		if _, err := fb.js.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second)); err != nil {
			return fmt.Errorf("prefill %d: %w", i, err)
		}
	}
	select {
	case <-fb.js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	// Let the file store settle before the meter starts.
	time.Sleep(time.Second)
	return nil
}

// publishAsync is natsbus.Bus.Forward: every message published async, then
// every PubAck awaited.
func publishAsync(ctx context.Context, fb *forwardBench, chunk []*nats.Msg) error {
	futs := make([]jetstream.PubAckFuture, len(chunk))
	for i, m := range chunk {
		fut, err := fb.js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		futs[i] = fut
	}
	for _, fut := range futs {
		select {
		case <-fut.Ok():
		case err := <-fut.Err():
			return fmt.Errorf("pub ack: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// publishLastAcked publishes all but the chunk's last message as core NATS
// messages without a reply subject, which the stream stores without
// answering, and the last with one: its PubAck comes after the others are
// stored, since one connection's messages reach the stream in order. It
// prices the PubAcks, not a safe protocol: a core message the stream
// refuses is lost without a word.
func publishLastAcked(ctx context.Context, fb *forwardBench, chunk []*nats.Msg) error {
	last := len(chunk) - 1
	for _, m := range chunk[:last] {
		if err := fb.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	if _, err := fb.js.PublishMsg(ctx, chunk[last]); err != nil {
		return fmt.Errorf("publish last: %w", err)
	}
	return nil
}

// medianOf returns the median of xs, 0 for none.
func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
