package nacosrules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/rules"
	"github.com/nacos-group/nacos-sdk-go/v2/vo"
)

// fakeClient stands in for the SDK's config client in the tests of this
// package's own logic: it serves one document, records the calls made to
// it in order, and lets the test fire the change callback the SDK would.
type fakeClient struct {
	mu        sync.Mutex
	calls     []string
	content   string
	getErr    error
	onChange  func(namespace, group, dataID, data string)
	listenArg vo.ConfigParam
	listenErr error
	published []vo.ConfigParam
	publishOK bool
	pubErr    error
}

var _ configClient = (*fakeClient)(nil)

func (f *fakeClient) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeClient) GetConfig(p vo.ConfigParam) (string, error) {
	f.record("GetConfig " + p.Group + "/" + p.DataId)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.content, f.getErr
}

func (f *fakeClient) PublishConfig(p vo.ConfigParam) (bool, error) {
	f.record("PublishConfig " + p.Group + "/" + p.DataId)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, p)
	return f.publishOK, f.pubErr
}

func (f *fakeClient) ListenConfig(p vo.ConfigParam) error {
	f.record("ListenConfig " + p.Group + "/" + p.DataId)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listenArg, f.onChange = p, p.OnChange
	return f.listenErr
}

func (f *fakeClient) CancelListenConfig(p vo.ConfigParam) error {
	f.record("CancelListenConfig " + p.Group + "/" + p.DataId)
	return nil
}

func (f *fakeClient) CloseClient() { f.record("CloseClient") }

// serve sets what the server answers from now on.
func (f *fakeClient) serve(content string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.content, f.getErr = content, err
}

// push calls the change callback as the SDK does: on a goroutine of its
// own, with the content the server pushed.
func (f *fakeClient) push(data string) *sync.WaitGroup {
	f.mu.Lock()
	cb := f.onChange
	f.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { cb("", "GATE", "gate-rules.yaml", data) })
	return &wg
}

// count is how many calls so far start with prefix.
func (f *fakeClient) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func (f *fakeClient) callLog() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// newFakeSource is a Source over fake, with New's defaults and resync as
// its safety-net period.
func newFakeSource(t *testing.T, fake *fakeClient, resync time.Duration) *Source {
	t.Helper()
	opts := Options{Group: "GATE", DataID: "gate-rules.yaml", DataDir: t.TempDir(), Timeout: time.Second, Resync: resync,
		Log: slog.New(slog.DiscardHandler)}
	return &Source{client: fake, opts: opts, servers: []string{"127.0.0.1:1"}, name: "nacos:GATE/gate-rules.yaml"}
}

// doc is a valid rule document; each max gives another version.
func doc(max int) string {
	return fmt.Sprintf("unknown_scene: forward\nscenes:\n  n.alert:\n    limits: [{window: 1m, max: %d}]\n", max)
}

func version(t *testing.T, d string) string {
	t.Helper()
	rs, err := rules.Parse("test", []byte(d))
	if err != nil {
		t.Fatal(err)
	}
	return rs.Version
}

// newLive holds doc d in force, as gate serve does after Initial.
func newLive(t *testing.T, d string) *rules.Live {
	t.Helper()
	rs, err := rules.Parse("nacos:GATE/gate-rules.yaml", []byte(d))
	if err != nil {
		t.Fatal(err)
	}
	live, err := rules.NewLive("nacos:GATE/gate-rules.yaml", rs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return live
}

// watch starts s.Watch and stops it with the test.
func watch(t *testing.T, s *Source, live *rules.Live) context.CancelFunc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Watch(ctx, live); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	return cancel
}

// eventually waits for cond, polling; the deadline is generous because the
// machine is shared: only a cond that never holds fails.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
	}
}

func inForce(live *rules.Live) string { return live.Current().Version }

var errDown = errors.New("connection refused")

func TestInitial(t *testing.T) {
	for _, tc := range []struct {
		name         string
		content      string
		getErr       error
		snapshot     *string // nil: no snapshot file
		want         string
		fromSnapshot bool
		wantErr      bool
	}{
		{name: "from the server", content: doc(1), want: doc(1)},
		{name: "from the server even with a snapshot", content: doc(2), snapshot: ptr(doc(1)), want: doc(2)},
		{name: "a missing document reads as empty, for the parser to reject", content: "", want: ""},
		{name: "server down: from the snapshot", getErr: errDown, snapshot: ptr(doc(3)), want: doc(3), fromSnapshot: true},
		{name: "server down, no snapshot", getErr: errDown, wantErr: true},
		{name: "server down, blank snapshot", getErr: errDown, snapshot: ptr(" \n"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeClient{}
			fake.serve(tc.content, tc.getErr)
			s := newFakeSource(t, fake, time.Hour)
			if tc.snapshot != nil {
				if err := os.MkdirAll(filepath.Dir(s.snapshotPath()), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(s.snapshotPath(), []byte(*tc.snapshot), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, fromSnapshot, err := s.Initial()
			switch {
			case tc.wantErr:
				if err == nil || !errors.Is(err, tc.getErr) || !strings.Contains(err.Error(), s.snapshotPath()) {
					t.Fatalf("Initial: %q, %v; want an error wrapping %v and naming %s", got, err, tc.getErr, s.snapshotPath())
				}
			case err != nil:
				t.Fatalf("Initial: %v", err)
			case string(got) != tc.want || fromSnapshot != tc.fromSnapshot:
				t.Errorf("Initial = %q, fromSnapshot %v; want %q, %v", got, fromSnapshot, tc.want, tc.fromSnapshot)
			}
			// Initial only reads: listening is Watch's, once the rules it
			// read are in force.
			if calls := fake.callLog(); !slices.Equal(calls, []string{"GetConfig GATE/gate-rules.yaml"}) {
				t.Errorf("calls %v, want one GetConfig of GATE/gate-rules.yaml", calls)
			}
		})
	}
}

func ptr(s string) *string { return &s }

// TestReadThenListen follows gate serve's order: GetConfig, then
// ListenConfig on the same document. A change published in between pushes
// nothing to a listener not yet registered; the re-reads that follow
// ListenConfig must pick it up.
func TestReadThenListen(t *testing.T) {
	fake := &fakeClient{}
	fake.serve(doc(1), nil)
	s := newFakeSource(t, fake, time.Hour)
	first, _, err := s.Initial()
	if err != nil {
		t.Fatal(err)
	}
	live := newLive(t, string(first))
	fake.serve(doc(2), nil) // published before the listener is registered
	watch(t, s, live)

	calls := fake.callLog()
	if len(calls) < 2 || calls[0] != "GetConfig GATE/gate-rules.yaml" || calls[1] != "ListenConfig GATE/gate-rules.yaml" {
		t.Fatalf("calls %v, want GetConfig then ListenConfig of GATE/gate-rules.yaml", calls)
	}
	eventually(t, "the change made before listening in force", func() bool { return inForce(live) == version(t, doc(2)) })
}

// TestChangesOutOfOrder: the SDK runs each callback on its own goroutine, so
// pushes overlap and arrive late. A push is applied at once, whatever it
// holds; whatever order they land in, the re-read that follows them leaves
// the newest published document in force. (The safety-net resync is an
// hour away: the re-read after the pushes is what does it.)
func TestChangesOutOfOrder(t *testing.T) {
	fake := &fakeClient{}
	live := newLive(t, doc(1))
	s := newFakeSource(t, fake, time.Hour)
	fake.serve(doc(1), nil)
	watch(t, s, live)

	fake.serve(doc(9), nil) // the newest, on the server
	var pushes []*sync.WaitGroup
	for _, max := range []int{9, 2, 7, 3, 8} { // overlapping, newest not last
		pushes = append(pushes, fake.push(doc(max)))
	}
	for _, p := range pushes {
		p.Wait()
	}
	fake.push(doc(4)).Wait() // a push held back until after the others
	want := version(t, doc(9))
	eventually(t, "the newest document in force", func() bool { return inForce(live) == want })
	if st := live.Status(); st.LastError != "" {
		t.Errorf("last error %q: a stale push is not an invalid document", st.LastError)
	}
}

// TestBadDocumentKeepsLastGood: an empty, deleted, unparsable or invalid
// document is rejected, says why, and the last good rules stay, both when
// pushed and when re-read; the next good one is taken.
func TestBadDocumentKeepsLastGood(t *testing.T) {
	for _, tc := range []struct{ name, doc string }{
		{"empty (deleted)", ""},
		{"only a comment", "# every rule was deleted by mistake\n"},
		{"not YAML", "scenes: [unclosed"},
		{"invalid", "scenes:\n  n.alert:\n    limits: [{window: -1h, max: 1}]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeClient{}
			fake.serve(doc(1), nil)
			live := newLive(t, doc(1))
			s := newFakeSource(t, fake, time.Hour)
			watch(t, s, live)

			fake.serve(tc.doc, nil)
			fake.push(tc.doc).Wait()
			if st := live.Status(); st.LastError == "" || st.Version != version(t, doc(1)) {
				t.Fatalf("after the push: version %s, last error %q; want %s kept and the reason", st.Version, st.LastError, version(t, doc(1)))
			}
			// The debounced re-read reads the same bad document: still kept.
			gets := fake.count("GetConfig")
			eventually(t, "a re-read after the push", func() bool { return fake.count("GetConfig") > gets })
			if st := live.Status(); st.LastError == "" || st.Version != version(t, doc(1)) {
				t.Errorf("after the re-read: version %s, last error %q; want %s kept and the reason", st.Version, st.LastError, version(t, doc(1)))
			}

			fake.serve(doc(2), nil)
			fake.push(doc(2)).Wait()
			if st := live.Status(); st.LastError != "" || st.Version != version(t, doc(2)) {
				t.Errorf("after a good document: version %s, last error %q; want %s in force and no error", st.Version, st.LastError, version(t, doc(2)))
			}
		})
	}
}

// TestServerDownKeepsRules: a re-read that fails is retried, never taken
// for an invalid document; once the server answers, what changed meanwhile
// is taken.
func TestServerDownKeepsRules(t *testing.T) {
	fake := &fakeClient{}
	fake.serve("", errDown)
	live := newLive(t, doc(1))
	s := newFakeSource(t, fake, 50*time.Millisecond)
	watch(t, s, live)

	eventually(t, "the re-read retried", func() bool { return fake.count("GetConfig") >= 3 })
	if st := live.Status(); st.LastError != "" || st.Version != version(t, doc(1)) {
		t.Errorf("with the server down: version %s, last error %q; want %s kept and no error", st.Version, st.LastError, version(t, doc(1)))
	}
	fake.serve(doc(5), nil)
	eventually(t, "the document changed while down in force", func() bool { return inForce(live) == version(t, doc(5)) })
}

func TestWatchListenFails(t *testing.T) {
	fake := &fakeClient{listenErr: errDown}
	s := newFakeSource(t, fake, time.Hour)
	err := s.Watch(context.Background(), newLive(t, doc(1)))
	if !errors.Is(err, errDown) || !strings.Contains(err.Error(), s.Name()) {
		t.Errorf("Watch = %v, want an error wrapping %v and naming %s", err, errDown, s.Name())
	}
}

func TestWatchStopsListening(t *testing.T) {
	fake := &fakeClient{}
	fake.serve(doc(1), nil)
	s := newFakeSource(t, fake, time.Hour)
	cancel := watch(t, s, newLive(t, doc(1)))
	if n := fake.count("CancelListenConfig"); n != 0 {
		t.Fatalf("CancelListenConfig called %d times before the context ended", n)
	}
	cancel()
	eventually(t, "CancelListenConfig after the context ended", func() bool {
		return fake.count("CancelListenConfig GATE/gate-rules.yaml") == 1
	})
}

func TestPublish(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ok      bool
		err     error
		wantErr bool
	}{
		{"stored", true, nil, false},
		{"refused", false, nil, true},
		{"unreachable", false, errDown, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeClient{publishOK: tc.ok, pubErr: tc.err}
			s := newFakeSource(t, fake, time.Hour)
			err := s.Publish([]byte(doc(3)))
			if (err != nil) != tc.wantErr || (tc.err != nil && !errors.Is(err, tc.err)) {
				t.Fatalf("Publish = %v, want error %v (wrapping %v)", err, tc.wantErr, tc.err)
			}
			if len(fake.published) != 1 {
				t.Fatalf("%d PublishConfig calls, want 1", len(fake.published))
			}
			p := fake.published[0]
			if p.DataId != "gate-rules.yaml" || p.Group != "GATE" || p.Content != doc(3) || p.Type != "yaml" {
				t.Errorf("published %s/%s type %q content %q; want GATE/gate-rules.yaml, yaml, the document", p.Group, p.DataId, p.Type, p.Content)
			}
		})
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no data dir", Options{Addrs: "127.0.0.1:8848"}, "data dir"},
		{"no address", Options{Addrs: " , ", DataDir: dir}, "no server address"},
		{"no port", Options{Addrs: "127.0.0.1", DataDir: dir}, "want host:port"},
		{"port 0", Options{Addrs: "127.0.0.1:0", DataDir: dir}, "bad port"},
		{"port without room for gRPC (+1000)", Options{Addrs: "127.0.0.1:65000", DataDir: dir}, "bad port"},
		{"one bad of two", Options{Addrs: "127.0.0.1:8848,nacos:x", DataDir: dir}, "bad port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.opts)
			if err == nil {
				s.Close()
				t.Fatalf("New(%+v) succeeded", tc.opts)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want it to say %q", err, tc.want)
			}
		})
	}
}

func TestPing(t *testing.T) {
	handler := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/nacos/v1/console/health/readiness" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(code)
		}
	}
	up := httptest.NewServer(handler(http.StatusOK))
	defer up.Close()
	starting := httptest.NewServer(handler(http.StatusServiceUnavailable))
	defer starting.Close()
	down := httptest.NewServer(handler(http.StatusOK))
	down.Close()
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

	for _, tc := range []struct {
		name    string
		servers []string
		ok      bool
	}{
		{"ready", []string{host(up)}, true},
		{"one of two ready", []string{host(down), host(up)}, true},
		{"not ready", []string{host(starting)}, false},
		{"unreachable", []string{host(down)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFakeSource(t, &fakeClient{}, time.Hour)
			s.servers = tc.servers
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Ping(ctx); (err == nil) != tc.ok {
				t.Errorf("Ping = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
