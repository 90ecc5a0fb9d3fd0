package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/nacosrules"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/pipeline"
	"github.com/antifatigue/gate/internal/prefcache"
	"github.com/antifatigue/gate/internal/preview"
	"github.com/antifatigue/gate/internal/redact"
	"github.com/antifatigue/gate/internal/rules"
	"github.com/prometheus/client_golang/prometheus"
)

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("GATE_LOG_LEVEL must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}

// newLogger writes c's log format at c's level to w, with scrub masking
// the configured secrets wherever they appear.
func newLogger(c *config, w io.Writer, scrub *redact.Scrubber) *slog.Logger {
	lvl, _ := parseLevel(c.LogLevel) // validated
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.LogFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(scrub.Handler(h))
}

// countParked counts each message parked after exhausting its deliveries
// (gate.ParkedRecord), once.
func countParked(audit gate.AuditLog, maxBytes int) func(ctx context.Context, d gate.Delivery) error {
	return func(ctx context.Context, d gate.Delivery) error {
		_, err := audit.Commit(ctx, []gate.Record{gate.ParkedRecord(d, maxBytes, time.Now())})
		return err
	}
}

// Garbage collector defaults of gate serve, where GOGC and GOMEMLIMIT are
// not set. The gate keeps little (the batches in hand, the rules, caches) and
// allocates per message: Go's default GOGC=100 spent a fifth of the gate's
// CPU collecting; 400 spends a quarter of that (docs/benchmarks.md). The soft
// memory limit makes the collector work harder before the heap passes it,
// so a backlog of large messages does not take 5 times its live size.
const (
	defaultGCPercent   = 400
	defaultMemoryLimit = 256 << 20
)

func tuneGC(getenv func(string) string, log *slog.Logger) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
	gc := debug.SetGCPercent(-1) // reads the setting, and puts it back
	debug.SetGCPercent(gc)
	log.Debug("garbage collector", "gogc", gc, "memory_limit", debug.SetMemoryLimit(-1))
}

// serve runs the gate until ctx is cancelled, then shuts down gracefully:
// it stops pulling, finishes the batch in hand, and exits within
// GATE_SHUTDOWN_TIMEOUT. The configured secrets are masked in its log and
// in the error it returns.
func serve(ctx context.Context, args []string, getenv func(string) string, _ io.Writer, stderr io.Writer) (err error) {
	c, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	scrub := newScrubber(c)
	defer func() { err = scrub.Error(err) }()
	log := newLogger(c, stderr, scrub)
	now := gateClock(c, log)
	tuneGC(getenv, log)
	if err := os.MkdirAll(c.DataDir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	m := metrics.New(prometheus.NewRegistry())
	var closers closeStack
	defer closers.closeAll(log)

	// Rules first: a gate with no valid rules must not start deciding.
	live, ruleSource, rulesReady, err := startRules(ctx, c, m, log, &closers)
	if err != nil {
		return err
	}

	store, storeName, err := openWindowStore(c, now, &closers)
	if err != nil {
		return err
	}

	audit, auditName, err := openAudit(ctx, c, log, &closers)
	if err != nil {
		return err
	}

	nc, natsName, err := openNATS(ctx, c, log, &closers)
	if err != nil {
		return err
	}
	bus, err := natsbus.New(ctx, nc, natsbus.Options{
		InSubject: c.InSubject, OutSubject: c.OutSubject, DeadSubject: c.DeadSubject,
		CheckSubject: c.CheckSubject, RefundSubject: c.RefundSubject,
		AckWait: c.AckWait, MaxAckPending: c.MaxAckPending, MaxDeliver: c.MaxDeliver,
		OutDuplicates: c.OutDuplicates, Replicas: c.StreamReplicas,
		MaxMsgBytes: int32(min(max(2*c.MaxMessageBytes, 1<<20), 64<<20)),
		MaxBytes:    c.StreamMaxBytes, Metrics: m,
	}, log)
	if err != nil {
		return err
	}
	if c.NATSURL == "" {
		// The senders of the embedded server read gate.out through the
		// consumer the gate keeps for them.
		if err := bus.EnsureSenderConsumer(ctx); err != nil {
			return err
		}
	}

	// Each gate reads preferences through a cache it keeps fresh (Run).
	prefs := prefcache.New(audit, prefcache.Options{Size: c.PreferencesCache, Log: log})
	p, err := pipeline.New(pipeline.Options{
		Rules: live, Store: store, Audit: audit, Holds: audit, Forwarder: bus, Metrics: m, Log: log, Preferences: prefs,
		MaxMessageBytes: c.MaxMessageBytes, Now: now,
		// Half the duplicate window, as DefaultReplayWithin is of the default.
		ReplayWithin: c.OutDuplicates / 2,
	})
	if err != nil {
		return err
	}
	checker, err := pipeline.NewChecker(pipeline.CheckOptions{
		Rules: live, Store: store, Audit: audit, Answers: audit, Holds: audit, Preferences: prefs, Metrics: m, Log: log, Now: now,
	})
	if err != nil {
		return err
	}
	explainer, err := pipeline.NewExplainer(pipeline.ExplainOptions{
		Rules: live, Store: store, Holds: audit, Held: audit, Preferences: prefs, Metrics: m, Log: log, Now: now,
	})
	if err != nil {
		return err
	}
	releaser, err := newReleaser(c, now, live, store, audit, bus, m, log)
	if err != nil {
		return err
	}
	refunder, err := pipeline.NewRefunder(pipeline.RefunderOptions{
		Rules: live, Store: store, Ledger: audit, Log: audit, Metrics: m, Logger: log, Now: now,
	})
	if err != nil {
		return err
	}
	canceller, err := pipeline.NewCanceller(pipeline.CancellerOptions{Rules: live, Holds: audit, Metrics: m, Log: log, Now: now})
	if err != nil {
		return err
	}

	pprofCtx, stopPprof := context.WithCancel(context.Background())
	pprofDone, err := servePprof(pprofCtx, c.PprofAddr, log)
	if err != nil {
		stopPprof()
		return err
	}
	defer func() { stopPprof(); pprofDone() }()
	ln, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("http listen on %s: %w", c.HTTPAddr, err)
	}
	var requests servedRequests
	srv := newHTTPServer(httpapi.NewServer(httpapi.Options{
		Rules: live, Reports: audit, Token: c.APIToken, ReadToken: c.APIReadToken, AllowedHosts: c.HTTPAllowedHosts, Metrics: m, Log: log, Preferences: prefs,
		Refunder: refunder, RefundLog: audit, Canceller: canceller,
		Checker: checker, Explainer: explainer,
		Preview: preview.New(audit, preview.Options{MaxDecisions: int64(c.PreviewMax)}),
		Checks: scrubChecks(scrub, map[string]httpapi.Check{
			"nats":         bus.Ping,
			"streams":      bus.CheckStreams,
			"window_store": store.Ping,
			"audit_store":  audit.Ping,
			"rules":        rulesReady,
			"requests":     requests.ready,
		}),
	}), defaultHTTPLimits, log)

	if c.openAPI() {
		log.Warn("the HTTP API listens beyond loopback without a token (GATE_HTTP_ALLOW_NO_TOKEN=true): whoever reaches it can check, refund and set preferences",
			"http", ln.Addr().String())
	}
	if c.anyHost() {
		log.Warn("GATE_HTTP_ALLOWED_HOSTS holds *: the HTTP API answers to any host name, so a web page that points its own name at "+
			"the gate (DNS rebinding) can read whatever it serves without a token; a browser's request that changes state is still "+
			"taken only on localhost, 127.0.0.1, ::1 or a host named in GATE_HTTP_ALLOWED_HOSTS", "http", ln.Addr().String())
	}
	log.Info("gate starting",
		"nats", natsName, "window_store", storeName, "audit_store", auditName, "rules", ruleSource,
		"rules_version", live.Current().Version, "http", "http://"+ln.Addr().String(),
		"api_token", c.APIToken != "", "api_read_token", c.APIReadToken != "", "in", c.InSubject, "out", c.OutSubject, "dead", c.DeadSubject,
		"check", c.CheckSubject, "refund", c.RefundSubject)

	var wg sync.WaitGroup
	consumeCtx, stopConsume := context.WithCancel(context.Background())
	defer stopConsume()
	consumeErr := make(chan error, 1)
	wg.Go(func() {
		consumeErr <- bus.ConsumeStaged(consumeCtx, p.Start, natsbus.ConsumeOptions{
			Batch: c.Batch, BatchWait: c.BatchWait, RetryMax: c.RetryMax, Metrics: m,
		})
	})
	httpErr := make(chan error, 1)
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			httpErr <- err
		}
	})
	if c.MaxDeliver > 0 {
		// With a delivery limit, what exhausts it is parked, not left
		// behind in GATE_IN.
		wg.Go(func() {
			if err := bus.ParkExhausted(consumeCtx, natsbus.ParkOptions{Metrics: m, OnParked: countParked(audit, c.MaxMessageBytes)}); err != nil {
				log.Error("parking of exhausted messages stopped", "err", err)
			}
		})
	}
	wg.Go(func() {
		defer requests.checks.Store(true)
		if err := bus.ServeChecks(consumeCtx, checker.Check, natsbus.CheckOptions{Status: httpapi.Status, RefusedReplies: c.CheckRefusedReplies,
			Metrics: m, Serving: func() { requests.checks.Store(true) }}); err != nil {
			log.Error("gate.check stopped: checks are answered on HTTP only", "err", err)
		}
	})
	wg.Go(func() {
		cancel := func(ctx context.Context, body []byte) (gate.CancelResult, error) {
			return canceller.Cancel(ctx, body, gate.CancelSourceNATS)
		}
		defer requests.cancels.Store(true)
		if err := bus.ServeCancels(consumeCtx, cancel, natsbus.CheckOptions{Status: httpapi.Status, RefusedReplies: c.CheckRefusedReplies,
			Metrics: m, Serving: func() { requests.cancels.Store(true) }}); err != nil {
			log.Error("gate.cancel stopped: cancels are answered on HTTP only", "err", err)
		}
	})
	wg.Go(func() { bus.WatchStreams(consumeCtx, natsbus.DefaultStreamWatch) })
	wg.Go(func() { pruneLoop(consumeCtx, audit, c.PruneInterval, c.AuditRetention, log) })
	wg.Go(func() { releaser.Run(consumeCtx) })
	wg.Go(func() { prefs.Run(consumeCtx) })
	wg.Go(func() {
		if err := bus.ConsumeRefunds(consumeCtx, refunder, natsbus.RefundOptions{RetryMax: c.RetryMax, Metrics: m}); err != nil {
			log.Error("refund consumer stopped", "err", err)
		}
	})

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: no new messages, finishing the ones in hand")
	case err := <-consumeErr:
		runErr = fmt.Errorf("consumer stopped: %w", err)
	case err := <-httpErr:
		runErr = fmt.Errorf("http server: %w", err)
	}

	shutdownCtx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	stopConsume()
	done := make(chan struct{})
	go func() {
		_ = srv.Shutdown(shutdownCtx)
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		log.Info("gate stopped")
	case <-shutdownCtx.Done():
		log.Warn("shutdown timed out; messages in flight will be redelivered", "timeout", c.ShutdownTimeout)
	}
	return runErr
}

// httpLimits bound the time a connection to the HTTP API may hold the
// server, so that idle or slow clients cannot pile up.
type httpLimits struct {
	// readHeader bounds the reading of a request's headers, and read
	// that of the whole request (the API takes no bodies).
	readHeader, read time.Duration
	// write bounds a request from the end of its headers to the end of its
	// answer. The CSV export sets its own deadline per page instead
	// (httpapi.Options.ExportPageTimeout).
	write time.Duration
	// idle bounds the wait for the next request on a kept-alive
	// connection.
	idle time.Duration
}

// defaultHTTPLimits are the limits of gate serve. Every answer but the
// export is one query away (/readyz waits 2 s at most), so 60 s of write
// time is generous; 30 s idle keeps a browser's or a scraper's connection
// between two refreshes without letting a thousand idle ones stay for good.
var defaultHTTPLimits = httpLimits{readHeader: 5 * time.Second, read: 10 * time.Second, write: time.Minute, idle: 30 * time.Second}

// newHTTPServer serves h within l. The server's own complaints (a panic in
// a handler, a query with a ';') go to log.
func newHTTPServer(h http.Handler, l httpLimits, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.readHeader,
		ReadTimeout:       l.read,
		WriteTimeout:      l.write,
		IdleTimeout:       l.idle,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

func ruleCheck(live gate.RuleSource) httpapi.Check {
	return func(context.Context) error {
		if live.Current() == nil {
			return errors.New("no rules loaded")
		}
		return nil
	}
}

// startRules loads the rules and starts watching their source: the Nacos
// document when GATE_NACOS_ADDR is set, else the GATE_RULES file or folder.
func startRules(ctx context.Context, c *config, m *metrics.Metrics, log *slog.Logger, closers *closeStack) (*rules.Live, string, httpapi.Check, error) {
	if c.NacosAddr == "" {
		source := "file:" + c.Rules
		set, err := rules.LoadPath(c.Rules)
		if err != nil {
			return nil, "", nil, fmt.Errorf("rules: %w", err)
		}
		live, err := rules.NewLive(source, set, m, log)
		if err != nil {
			return nil, "", nil, err
		}
		go rules.WatchPath(ctx, c.Rules, live, c.RulesPoll, log)
		return live, source, ruleCheck(live), nil
	}

	src, err := newNacosSource(c, log)
	if err != nil {
		return nil, "", nil, err
	}
	closers.push("nacos", func() error { src.Close(); return nil })
	source := src.Name()
	set, err := initialNacosRules(src, c, log)
	if err != nil {
		return nil, "", nil, err
	}
	live, err := rules.NewLive(source, set, m, log)
	if err != nil {
		return nil, "", nil, err
	}
	if err := src.Watch(ctx, live); err != nil {
		return nil, "", nil, err
	}
	return live, source, src.Ping, nil
}

func newNacosSource(c *config, log *slog.Logger) (*nacosrules.Source, error) {
	return nacosrules.New(nacosrules.Options{
		Addrs: c.NacosAddr, Namespace: c.NacosNamespace, Group: c.NacosGroup, DataID: c.NacosDataID,
		Username: c.NacosUsername, Password: c.NacosPassword, DataDir: c.DataDir, Resync: c.NacosResync, Log: log,
	})
}

// initialNacosRules reads the Nacos document at start. When the server is
// down it starts from the SDK's last snapshot; when there is none, or the
// document is missing or invalid, it falls back to GATE_RULES only if that
// was set explicitly, and otherwise refuses to start.
func initialNacosRules(src *nacosrules.Source, c *config, log *slog.Logger) (*gate.RuleSet, error) {
	doc, fromSnapshot, err := src.Initial()
	var set *gate.RuleSet
	if err == nil {
		set, err = rules.Parse(src.Name(), doc)
		if err == nil && fromSnapshot {
			log.Warn("nacos unreachable at start; deciding with the rules of the local snapshot until it answers",
				"source", src.Name(), "version", set.Version)
		}
	}
	if err == nil {
		return set, nil
	}
	if !c.explicit["rules"] {
		return nil, fmt.Errorf("rules: %w (set GATE_RULES to a fallback document to start anyway)", err)
	}
	fallback, ferr := rules.LoadPath(c.Rules)
	if ferr != nil {
		return nil, fmt.Errorf("rules: %w; and the fallback GATE_RULES: %w", err, ferr)
	}
	log.Warn("nacos rules unavailable at start; deciding with the fallback document until nacos provides valid rules",
		"source", src.Name(), "err", err, "fallback", c.Rules, "version", fallback.Version)
	return fallback, nil
}
