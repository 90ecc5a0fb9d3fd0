package nacosrules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/rules"
	"github.com/nacos-group/nacos-sdk-go/v2/clients"
	"github.com/nacos-group/nacos-sdk-go/v2/common/constant"
	"github.com/nacos-group/nacos-sdk-go/v2/util"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
)

// configClient lists what this adapter calls on the SDK client.
type configClient interface {
	GetConfig(param vo.ConfigParam) (string, error)
	PublishConfig(param vo.ConfigParam) (bool, error)
	ListenConfig(param vo.ConfigParam) error
	CancelListenConfig(param vo.ConfigParam) error
	CloseClient()
}

// Options locate the rule document and the client's local folders.
type Options struct {
	// Addrs are the Nacos servers, "host:port[,host:port…]" (HTTP port; gRPC
	// is port+1000 as Nacos 2.x expects).
	Addrs     string
	Namespace string
	Group     string // default GATE
	DataID    string // default gate-rules.yaml
	Username  string
	Password  string
	// DataDir holds the SDK's snapshot cache and logs (DataDir/nacos/…),
	// never the working directory.
	DataDir string
	// Timeout bounds each request to the server (5s).
	Timeout time.Duration
	// Resync re-reads the document this often as a safety net beside the
	// push notifications (30s).
	Resync time.Duration
	Log    *slog.Logger
}

// Source reads the rule document from Nacos.
type Source struct {
	client  configClient
	opts    Options
	servers []string // host:port, for the readiness probe
	name    string
}

// New creates the process's one Nacos config client.
func New(opts Options) (*Source, error) {
	if opts.Group == "" {
		opts.Group = DefaultGroup
	}
	if opts.DataID == "" {
		opts.DataID = DefaultDataID
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.DataDir == "" {
		return nil, errors.New("nacos: a data dir is required for the snapshot cache and logs")
	}
	var servers []constant.ServerConfig
	var addrs []string
	for _, a := range strings.Split(opts.Addrs, ",") {
		a = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(a, "http://"), "https://"))
		if a == "" {
			continue
		}
		host, portStr, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("nacos address %q: want host:port: %w", a, err)
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil || port == 0 || port > 64535 {
			return nil, fmt.Errorf("nacos address %q: bad port", a)
		}
		servers = append(servers, constant.ServerConfig{IpAddr: host, Port: port, ContextPath: "/nacos", Scheme: "http"})
		addrs = append(addrs, a)
	}
	if len(servers) == 0 {
		return nil, errors.New("nacos: no server address")
	}
	base := filepath.Join(opts.DataDir, "nacos")
	cc := constant.ClientConfig{
		NamespaceId: opts.Namespace,
		TimeoutMs:   uint64(opts.Timeout / time.Millisecond),
		CacheDir:    filepath.Join(base, "cache"),
		LogDir:      filepath.Join(base, "log"),
		// The SDK logs every push at INFO; our own log says what matters.
		LogLevel:            "warn",
		NotLoadCacheAtStart: true,
		// We read the snapshot ourselves, so we know (and can say) when the
		// rules come from it rather than from the server.
		DisableUseSnapShot: true,
		Username:           opts.Username,
		Password:           opts.Password,
		AppName:            "gate",
	}
	client, err := clients.NewConfigClient(vo.NacosClientParam{ClientConfig: &cc, ServerConfigs: servers})
	if err != nil {
		return nil, fmt.Errorf("nacos client: %w", err)
	}
	return &Source{client: client, opts: opts, servers: addrs, name: "nacos:" + opts.Group + "/" + opts.DataID}, nil
}

// Name is the source's name in logs, metrics and /v1/rules.
func (s *Source) Name() string { return s.name }

func (s *Source) param() vo.ConfigParam {
	return vo.ConfigParam{DataId: s.opts.DataID, Group: s.opts.Group}
}

// Get reads the document from the server. A missing document reads as
// empty, which the rules parser rejects.
func (s *Source) Get() (string, error) {
	content, err := s.client.GetConfig(s.param())
	if err != nil {
		return "", fmt.Errorf("get %s from nacos: %w", s.name, err)
	}
	return content, nil
}

// snapshotPath is where the SDK keeps its copy of the last document it read.
func (s *Source) snapshotPath() string {
	key := util.GetConfigCacheKey(s.opts.DataID, s.opts.Group, s.opts.Namespace)
	return filepath.Join(s.opts.DataDir, "nacos", "cache", "config", key)
}

// Initial reads the document for start-up: from the server, or, when the
// server cannot be reached, from the SDK's last snapshot (fromSnapshot).
func (s *Source) Initial() (doc []byte, fromSnapshot bool, err error) {
	content, err := s.Get()
	if err == nil {
		return []byte(content), false, nil
	}
	snap, serr := os.ReadFile(s.snapshotPath())
	if serr != nil || len(strings.TrimSpace(string(snap))) == 0 {
		return nil, false, fmt.Errorf("%w; and no local snapshot at %s", err, s.snapshotPath())
	}
	return snap, true, nil
}

// Watch listens for published changes until ctx ends.
//
// Each change is applied at once from the content the server pushed, for
// the shortest delay. Because the SDK calls back on a new goroutine per
// change, two quick edits can be applied in the wrong order; so every change
// also schedules a re-read from the server shortly after (debounced), through
// live's serialised reload, which leaves the newest published document in
// force. The same re-read runs every Resync as a safety net, and picks up
// what changed while the server was unreachable. A re-read that fails (the
// server is down, or the SDK's 5-per-second query limit) is retried with a
// growing delay; it is never mistaken for an invalid document. An invalid,
// empty or deleted document is rejected and the last good rules stay.
func (s *Source) Watch(ctx context.Context, live *rules.Live) error {
	changed := make(chan struct{}, 1)
	p := s.param()
	p.OnChange = func(_, _, _, data string) {
		_ = live.TryReload(s.name, func() ([]byte, error) { return []byte(data), nil }) // logged and counted by Live
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if err := s.client.ListenConfig(p); err != nil {
		return fmt.Errorf("listen to %s: %w", s.name, err)
	}
	go s.resync(ctx, live, changed)
	return nil
}

// resync re-reads the document after changes (debounced) and every Resync.
func (s *Source) resync(ctx context.Context, live *rules.Live, changed <-chan struct{}) {
	defer func() { _ = s.client.CancelListenConfig(s.param()) }()
	const debounce = 300 * time.Millisecond
	tick := time.NewTicker(s.opts.Resync)
	defer tick.Stop()
	retry := time.NewTimer(0)
	<-retry.C
	delay := debounce
	// The SDK registers the listener with the server only on its first
	// 5-second cycle; until then no change is pushed. Re-reading every
	// second meanwhile closes that gap.
	warm := time.NewTicker(time.Second)
	defer warm.Stop()
	warmUntil := time.Now().Add(6 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			retry.Reset(debounce) // let a burst of edits settle first
			continue
		case now := <-warm.C:
			if now.After(warmUntil) {
				warm.Stop()
			}
		case <-tick.C:
		case <-retry.C:
		}
		err := live.TryReload(s.name, func() ([]byte, error) {
			c, err := s.Get()
			return []byte(c), err
		})
		if errors.Is(err, rules.ErrFetch) {
			s.opts.Log.Warn("nacos unreadable; the rules in force stay, retrying", "source", s.name, "in", delay, "err", err)
			retry.Reset(delay)
			delay = min(2*delay, s.opts.Resync)
			continue
		}
		delay = debounce
	}
}

// Publish stores doc as the rule document, for `gate rules push`.
func (s *Source) Publish(doc []byte) error {
	p := s.param()
	p.Content = string(doc)
	p.Type = "yaml"
	ok, err := s.client.PublishConfig(p)
	if err != nil {
		return fmt.Errorf("publish %s to nacos: %w", s.name, err)
	}
	if !ok {
		return fmt.Errorf("publish %s to nacos: the server refused it", s.name)
	}
	return nil
}

// Ping checks that a Nacos server answers its readiness probe.
func (s *Source) Ping(ctx context.Context) error {
	var errs []error
	for _, a := range s.servers {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a+"/nacos/v1/console/health/readiness", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: readiness %s", a, resp.Status))
	}
	return fmt.Errorf("nacos unreachable: %w", errors.Join(errs...))
}

// Close releases the client.
func (s *Source) Close() { s.client.CloseClient() }
