package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/antifatigue/gate/internal/nacosrules"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/pipeline"
	"github.com/antifatigue/gate/internal/prefcache"
	"github.com/antifatigue/gate/internal/preview"
	"github.com/antifatigue/gate/internal/redisstore"
	"github.com/antifatigue/gate/internal/rules"
)

// config is every setting of gate serve. Each is a flag and a GATE_*
// variable; a flag wins over the variable, the variable over the default.
type config struct {
	NATSURL          string
	EmbeddedNATSAddr string
	// StreamReplicas (GATE_STREAM_REPLICAS) is the replicas of the gate's
	// streams; 0 (unset) leaves existing streams' replicas alone.
	StreamReplicas   int
	RedisURL         string
	RedisCluster     bool
	RedisLegacyKeys  bool
	DatabaseURL      string
	NacosAddr        string
	NacosDataID      string
	NacosGroup       string
	NacosNamespace   string
	NacosUsername    string
	NacosPassword    string
	NacosResync      time.Duration
	DataDir          string
	HTTPAddr         string
	HTTPAllowedHosts []string
	PprofAddr        string
	APIToken         string
	// APIReadToken (GATE_API_READ_TOKEN) is accepted instead of APIToken
	// on the endpoints that only read; it needs APIToken.
	APIReadToken     string
	HTTPAllowNoToken bool // GATE_HTTP_ALLOW_NO_TOKEN
	Rules            string
	RulesPoll        time.Duration
	LogLevel         string
	LogFormat        string
	InSubject        string
	OutSubject       string
	DeadSubject      string
	CheckSubject     string
	RefundSubject    string
	MaxMessageBytes  int
	Batch            int
	BatchWait        time.Duration
	OutDuplicates    time.Duration
	StoreTimeout     time.Duration
	AckWait          time.Duration
	MaxAckPending    int
	MaxDeliver       int
	RetryMax         time.Duration
	RedactPayload    bool
	LedgerRetention  time.Duration
	AuditRetention   time.Duration
	PartitionWidth   time.Duration // GATE_PARTITION_WIDTH
	PruneInterval    time.Duration // GATE_PRUNE_INTERVAL
	ShutdownTimeout  time.Duration
	ReleaseInterval  time.Duration
	PreviewMax       int       // GATE_PREVIEW_MAX_DECISIONS
	PreferencesCache int       // GATE_PREFERENCES_CACHE
	TestClock        time.Time // zero: the real clock

	// EmbeddedNATSPassword and EmbeddedNATSSenderPassword are the
	// passwords of the embedded server's users gate and sender; empty: the
	// ones in the data directory (embeddedUser.password).
	EmbeddedNATSPassword       string
	EmbeddedNATSSenderPassword string

	// CheckRefusedReplies (GATE_CHECK_REFUSED_REPLIES) are reply subjects
	// gate.check never answers on.
	CheckRefusedReplies []string

	// StreamMaxBytes (GATE_STREAM_MAX_BYTES) are the byte limits of the
	// streams it names (natsbus.ParseMaxBytes); the others take their
	// defaults.
	StreamMaxBytes map[string]int64

	// explicit holds the flags whose value came from a flag or a variable
	// rather than the default.
	explicit map[string]bool
}

// settings is gate serve's settings table: every flag, its variable and
// default. The defaults are the constants of the packages that own them.
func settings(c *config) []setting {
	wholeNumber := func(p *int) func(string) error { return num(p, 0, "a whole number") }
	return []setting{
		{"nats-url", "GATE_NATS_URL", "", "NATS server URL, or a comma-separated list of a cluster's servers; empty runs an embedded NATS server with JetStream", false, str(&c.NATSURL)},
		{"stream-replicas", "GATE_STREAM_REPLICAS", "", "replicas of every stream the gate makes (GATE_IN, GATE_OUT, GATE_DEAD, GATE_REFUND), 1 to 5 (3 on a NATS cluster); existing streams with another count are scaled to it at start. Empty: existing streams keep theirs, new ones get 1", false, replicas(&c.StreamReplicas)},
		{"stream-max-bytes", "GATE_STREAM_MAX_BYTES", "", "byte limits of the gate's streams, NAME=SIZE comma-separated (GATE_OUT=20GiB,GATE_IN=2GiB), or one SIZE for all; unnamed streams take their defaults (GATE_IN 1GiB, GATE_OUT 4GiB, GATE_DEAD 1GiB, GATE_REFUND 256MiB). A full stream refuses publishes, never drops what it holds", false, func(v string) (err error) {
			c.StreamMaxBytes, err = natsbus.ParseMaxBytes(v)
			return err
		}},
		{"embedded-nats-addr", "GATE_EMBEDDED_NATS_ADDR", natsbus.DefaultEmbeddedAddr, "listen address of the embedded NATS server", false, str(&c.EmbeddedNATSAddr)},
		{"embedded-nats-password", "GATE_EMBEDDED_NATS_PASSWORD", "", "password of the embedded NATS server's user gate, which may do anything (clients without credentials may only produce); empty: generated into $GATE_DATA_DIR/" + embeddedPasswordFile + " (prefer the variable to the flag)", true, str(&c.EmbeddedNATSPassword)},
		{"embedded-nats-sender-password", "GATE_EMBEDDED_NATS_SENDER_PASSWORD", "", "password of the embedded NATS server's user sender, which reads gate.out and publishes gate.refund and gate.sent; empty: generated into $GATE_DATA_DIR/" + embeddedSenderPasswordFile + " (prefer the variable to the flag)", true, str(&c.EmbeddedNATSSenderPassword)},
		{"redis-url", "GATE_REDIS_URL", "", "Redis URL (redis://host:6379/0); empty uses the in-process window store", false, str(&c.RedisURL)},
		{"redis-cluster", "GATE_REDIS_CLUSTER", "false", "treat GATE_REDIS_URL as a Redis Cluster seed (redis://host:7000?addr=host:7001)", false, boolean(&c.RedisCluster)},
		{"redis-legacy-keys", "GATE_REDIS_LEGACY_KEYS", "false", "during an upgrade from a gate that kept a Redis key per window: decide on both key layouts and write both, so old and new gates never over-admit together (docs/operating.md, \"Redis layout\")", false, boolean(&c.RedisLegacyKeys)},
		{"database-url", "GATE_DATABASE_URL", "", "PostgreSQL URL for the audit store; empty uses SQLite at $GATE_DATA_DIR/gate.db", false, str(&c.DatabaseURL)},
		{"nacos-addr", "GATE_NACOS_ADDR", "", "Nacos server host:port; empty reads rules from GATE_RULES", false, str(&c.NacosAddr)},
		{"nacos-data-id", "GATE_NACOS_DATA_ID", nacosrules.DefaultDataID, "Nacos data id of the rule document", false, str(&c.NacosDataID)},
		{"nacos-group", "GATE_NACOS_GROUP", nacosrules.DefaultGroup, "Nacos group of the rule document", false, str(&c.NacosGroup)},
		{"nacos-namespace", "GATE_NACOS_NAMESPACE", "", "Nacos namespace id (empty: public)", false, str(&c.NacosNamespace)},
		{"nacos-username", "GATE_NACOS_USERNAME", "", "Nacos user name, when the server requires login", false, str(&c.NacosUsername)},
		{"nacos-password", "GATE_NACOS_PASSWORD", "", "Nacos password (prefer the variable to the flag)", true, str(&c.NacosPassword)},
		{"data-dir", "GATE_DATA_DIR", "./data", "folder for SQLite, embedded NATS streams and the Nacos cache", false, str(&c.DataDir)},
		{"http-addr", "GATE_HTTP_ADDR", httpapi.DefaultAddr, "listen address of the HTTP API", false, str(&c.HTTPAddr)},
		{"http-allowed-hosts", "GATE_HTTP_ALLOWED_HOSTS", "", "host names the HTTP API answers to besides localhost, 127.0.0.1 and ::1, comma-separated (* for any): a guard against DNS rebinding", false, func(v string) (err error) {
			c.HTTPAllowedHosts, err = parseHostList(v)
			return err
		}},
		{"pprof-addr", "GATE_PPROF_ADDR", "", "loopback address (127.0.0.1:6060) to serve Go runtime profiles on, /debug/pprof/; empty: off", false, str(&c.PprofAddr)},
		{"api-token", "GATE_API_TOKEN", "", "bearer token required on /v1/*, the writing token: accepted on every endpoint (prefer the variable to the flag)", true, str(&c.APIToken)},
		{"api-read-token", "GATE_API_READ_TOKEN", "", "bearer token accepted instead of GATE_API_TOKEN on the /v1/* endpoints that only read (reports, rules, rule preview, reading preferences), refused with 403 on the others; needs GATE_API_TOKEN and must differ from it (prefer the variable to the flag)", true, str(&c.APIReadToken)},
		{"http-allow-no-token", "GATE_HTTP_ALLOW_NO_TOKEN", "false", "let the HTTP API listen on a non-loopback GATE_HTTP_ADDR without GATE_API_TOKEN, open to whoever reaches it (logged as a warning); without it such a gate refuses to start", false, boolean(&c.HTTPAllowNoToken)},
		{"rules", "GATE_RULES", "./rules", "rule document: a YAML file or a folder of them", false, str(&c.Rules)},
		{"rules-poll", "GATE_RULES_POLL", durationText(rules.DefaultWatchInterval), "how often the rules file or folder is checked for changes", false, dur(&c.RulesPoll)},
		{"nacos-resync", "GATE_NACOS_RESYNC", durationText(nacosrules.DefaultResync), "how often the Nacos document is re-read besides push notifications", false, dur(&c.NacosResync)},
		{"log-level", "GATE_LOG_LEVEL", "info", "debug, info, warn or error", false, str(&c.LogLevel)},
		{"log-format", "GATE_LOG_FORMAT", "text", "text or json", false, str(&c.LogFormat)},
		{"in-subject", "GATE_IN_SUBJECT", natsbus.DefaultInSubject, "subject producers publish to", false, str(&c.InSubject)},
		{"out-subject", "GATE_OUT_SUBJECT", natsbus.DefaultOutSubject, "subject forwarded messages are published to", false, str(&c.OutSubject)},
		{"dead-subject", "GATE_DEAD_SUBJECT", natsbus.DefaultDeadSubject, "subject undecidable messages are parked on", false, str(&c.DeadSubject)},
		{"check-subject", "GATE_CHECK_SUBJECT", natsbus.DefaultCheckSubject, "subject of synchronous checks (core NATS request-reply, as POST /v1/check)", false, str(&c.CheckSubject)},
		{"check-refused-replies", "GATE_CHECK_REFUSED_REPLIES", "", "reply subjects (wildcards allowed) gate.check never answers on, comma-separated, besides the gate's own and those starting with $", false, func(v string) (err error) {
			c.CheckRefusedReplies, err = parseSubjectList(v)
			return err
		}},
		{"refund-subject", "GATE_REFUND_SUBJECT", natsbus.DefaultRefundSubject, "subject senders publish refunds to (captured by the GATE_REFUND stream)", false, str(&c.RefundSubject)},
		{"out-duplicate-window", "GATE_OUT_DUPLICATE_WINDOW", durationText(natsbus.DefaultOutDuplicates), "GATE_OUT's duplicate window, which keeps one copy of a forward published again after a crash; from 10m to 72h, at least 8 x GATE_ACK_WAIT. nats-server keeps about 240 bytes per id in it", false, dur(&c.OutDuplicates)},
		{"max-message-bytes", "GATE_MAX_MESSAGE_BYTES", strconv.Itoa(gate.DefaultMaxMessageBytes), "largest envelope decided; larger ones go to the dead letter", false, wholeNumber(&c.MaxMessageBytes)},
		{"batch", "GATE_BATCH", strconv.Itoa(natsbus.DefaultBatch), "most messages decided together", false, wholeNumber(&c.Batch)},
		{"batch-wait", "GATE_BATCH_WAIT", "0s", "how long a batch that is not full waits for more messages (0: a batch is what has arrived); up to 100ms", false, dur(&c.BatchWait)},
		{"store-timeout", "GATE_STORE_TIMEOUT", durationText(redisstore.DefaultTimeout), "longest wait for the window store on one batch", false, dur(&c.StoreTimeout)},
		{"ack-wait", "GATE_ACK_WAIT", durationText(natsbus.DefaultAckWait), "JetStream AckWait of the gate consumer: how soon the messages of a gate that died go to another; a slow batch keeps its own with heartbeats, for up to 3 times this", false, dur(&c.AckWait)},
		{"max-ack-pending", "GATE_MAX_ACK_PENDING", strconv.Itoa(natsbus.DefaultMaxAckPending), "JetStream MaxAckPending of the gate consumer", false, wholeNumber(&c.MaxAckPending)},
		{"max-deliver", "GATE_MAX_DELIVER", "-1", "most deliveries of one message; one that exhausts them is parked on the dead-letter subject (-1: retry without limit)", false, parsed(&c.MaxDeliver, "-1 (no limit) or a whole number from 1", func(v string) (int, bool) {
			n, err := strconv.Atoi(v)
			return n, err == nil && (n >= 1 || n == -1)
		})},
		{"retry-max", "GATE_RETRY_MAX", "30s", "longest delay before a message that met a transient failure is retried", false, dur(&c.RetryMax)},
		{"redact-payload", "GATE_REDACT_PAYLOAD", "false", "leave the payload out of suppression rows", false, boolean(&c.RedactPayload)},
		{"preview-max-decisions", "GATE_PREVIEW_MAX_DECISIONS", strconv.Itoa(preview.DefaultMaxDecisions), "most ledger rows one rule preview replays (POST /v1/rules/preview); a preview that reaches it says so", false, wholeNumber(&c.PreviewMax)},
		{"preferences-cache", "GATE_PREFERENCES_CACHE", strconv.Itoa(prefcache.DefaultSize), "most preference rows each gate mirrors whole (then no lookups), else the most recipients whose preferences (or lack of them) it keeps in memory; a change reaches every gate within about a second whatever the size", false, num(&c.PreferencesCache, 1, "a whole number from 1")},
		{"ledger-retention", "GATE_LEDGER_RETENTION", durationText(gormstore.DefaultLedgerRetention), "how long decided message ids are remembered for de-duplication", false, dur(&c.LedgerRetention)},
		{"audit-retention", "GATE_AUDIT_RETENTION", "90d", "how long suppression rows are kept, as a Go duration or days (90d); 0 keeps them forever", false, parsed(&c.AuditRetention, "a duration such as 2160h or days such as 90d", func(v string) (time.Duration, bool) {
			d, err := gate.ParseDuration(v)
			return d, err == nil && d >= 0
		})},
		{"partition-width", "GATE_PARTITION_WIDTH", durationText(gormstore.DefaultPartitionWidth), "PostgreSQL only: the time each partition of the audit rows covers (the ledger and check answers are cut every GATE_LEDGER_RETENTION, rounded up to it); from 10m to 24h, dividing a day evenly (10m, 15m, 30m, 1h, 6h, 24h, ...)", false, parsed(&c.PartitionWidth, "a duration from 10m to 24h that divides a day evenly, such as 10m, 1h or 24h", func(v string) (time.Duration, bool) {
			d, err := time.ParseDuration(v)
			return d, err == nil && gormstore.CheckPartitionWidth(d) == nil
		})},
		{"prune-interval", "GATE_PRUNE_INTERVAL", "1h", "how often retention runs (ledger, check answers, audit rows) and partitions are made ahead; from 1m", false, parsed(&c.PruneInterval, "a duration of at least 1m such as 5m or 1h", func(v string) (time.Duration, bool) {
			d, err := time.ParseDuration(v)
			return d, err == nil && d >= time.Minute
		})},
		{"shutdown-timeout", "GATE_SHUTDOWN_TIMEOUT", "10s", "longest graceful shutdown", false, dur(&c.ShutdownTimeout)},
		{"release-interval", "GATE_RELEASE_INTERVAL", durationText(pipeline.DefaultReleaseInterval), "how often held messages (defer, digest, quiet hours) are checked for release", false, dur(&c.ReleaseInterval)},
		{"test-clock", "GATE_TEST_CLOCK", "", "for tests only: an RFC 3339 instant the gate's clock starts at, then runs on in real time (empty: the real clock)", false, func(v string) error {
			if v == "" {
				c.TestClock = time.Time{}
				return nil
			}
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return fmt.Errorf("want an RFC 3339 instant such as 2027-03-28T00:05:00+01:00, or empty for the real clock, got %q", v)
			}
			c.TestClock = t
			return nil
		}},
	}
}

// parseHostList reads GATE_HTTP_ALLOWED_HOSTS: host names or IP
// addresses, or *. A scheme, port or path is refused rather than ignored,
// so that nobody believes it is compared.
func parseHostList(v string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		_, notIP := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
		if h != "*" && notIP != nil && strings.ContainsAny(h, ":/@?#[] *") {
			return nil, fmt.Errorf("want host names such as gate.example.com, without scheme, port or path, or *; got %q", h)
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// anyHost reports whether GATE_HTTP_ALLOWED_HOSTS holds *, which gate
// serve warns of at start.
func (c *config) anyHost() bool {
	for _, h := range c.HTTPAllowedHosts {
		if h == "*" {
			return true
		}
	}
	return false
}

// replicas reads GATE_STREAM_REPLICAS: empty is 0 (leave the streams'
// replicas), else 1 to natsbus.MaxReplicas.
func replicas(p *int) func(string) error {
	want := fmt.Sprintf("a number of replicas from 1 to %d, or nothing", natsbus.MaxReplicas)
	return parsed(p, want, func(v string) (int, bool) {
		if v == "" {
			return 0, true
		}
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 1 && n <= natsbus.MaxReplicas
	})
}

// parseSubjectList reads GATE_CHECK_REFUSED_REPLIES: NATS subjects,
// wildcards allowed, comma-separated. A malformed one is an error rather
// than a subject that never matches.
func parseSubjectList(v string) ([]string, error) {
	var subjects []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if err := checkSubject(s, true); err != nil {
			return nil, err
		}
		subjects = append(subjects, s)
	}
	return subjects, nil
}

// parseConfig reads gate serve's settings: flags over variables over
// defaults.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("gate serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	explicit, err := parseSettings(fs, settings(c), args, getenv)
	if err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	c.explicit = explicit
	return c, c.validate()
}

func (c *config) validate() error {
	var errs []string
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Sprintf("GATE_LOG_FORMAT must be text or json, got %q", c.LogFormat))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err.Error())
	}
	if c.Batch < 1 || c.Batch > 4096 {
		errs = append(errs, fmt.Sprintf("GATE_BATCH must be from 1 to 4096, got %d", c.Batch))
	}
	if c.OutDuplicates < 10*time.Minute || c.OutDuplicates > 72*time.Hour || c.OutDuplicates < 8*c.AckWait {
		errs = append(errs, fmt.Sprintf("GATE_OUT_DUPLICATE_WINDOW must be from 10m to 72h and at least 8 x GATE_ACK_WAIT (%s), got %s", c.AckWait, c.OutDuplicates))
	}
	if c.BatchWait < 0 || c.BatchWait > 100*time.Millisecond {
		errs = append(errs, fmt.Sprintf("GATE_BATCH_WAIT must be from 0 to 100ms, got %s", c.BatchWait))
	}
	if c.StoreTimeout <= 0 || c.AckWait <= 0 || c.RulesPoll <= 0 {
		errs = append(errs, "GATE_STORE_TIMEOUT, GATE_ACK_WAIT and GATE_RULES_POLL must be positive")
	}
	if c.AckWait < 4*c.StoreTimeout {
		errs = append(errs, fmt.Sprintf("GATE_ACK_WAIT (%s) must be well above GATE_STORE_TIMEOUT (%s)", c.AckWait, c.StoreTimeout))
	}
	if c.ReleaseInterval < 10*time.Millisecond || c.ReleaseInterval > time.Minute {
		errs = append(errs, fmt.Sprintf("GATE_RELEASE_INTERVAL must be from 10ms to 1m, got %s", c.ReleaseInterval))
	}
	if c.MaxMessageBytes < 1024 {
		errs = append(errs, "GATE_MAX_MESSAGE_BYTES must be at least 1024")
	}
	if c.PprofAddr != "" && !loopbackAddr(c.PprofAddr) {
		errs = append(errs, fmt.Sprintf("GATE_PPROF_ADDR must be a loopback host:port such as 127.0.0.1:6060, got %q: profiles show the process's internals", c.PprofAddr))
	}
	if c.NATSURL == "" && c.StreamReplicas > 1 {
		errs = append(errs, fmt.Sprintf("GATE_STREAM_REPLICAS is %d but the embedded NATS server (GATE_NATS_URL unset) is one server, which keeps one replica: set GATE_NATS_URL to a NATS cluster, or GATE_STREAM_REPLICAS to 1", c.StreamReplicas))
	}
	if c.NATSURL == "" && !loopbackAddr(c.EmbeddedNATSAddr) {
		gate, sender := c.embeddedUsers()
		for _, u := range []embeddedUser{gate, sender} {
			if u.value == "" {
				errs = append(errs, fmt.Sprintf("GATE_EMBEDDED_NATS_ADDR %q is not a loopback address: set %s, the password of the embedded NATS server's user %s, before other hosts may reach it (a generated one would be in a file only this host reads)", c.EmbeddedNATSAddr, u.variable, u.name))
			}
		}
	}
	if c.openAPI() && !c.HTTPAllowNoToken {
		errs = append(errs, fmt.Sprintf("GATE_HTTP_ADDR %q is not a loopback address and GATE_API_TOKEN is empty: whoever reaches it could "+
			"take and hand back recipients' slots; set GATE_API_TOKEN, or GATE_HTTP_ALLOW_NO_TOKEN=true when the network alone guards it", c.HTTPAddr))
	}
	errs = append(errs, c.tokenErrors()...)
	errs = append(errs, c.subjectErrors()...)
	if len(errs) > 0 {
		return &usageError{"bad configuration: " + strings.Join(errs, "; ")}
	}
	return nil
}

// tokenErrors checks the two HTTP tokens. A reading token without a
// writing one would close the reports while leaving check, refund and
// preferences open to anyone, and one equal to the writing token would let
// whoever is given it to read also write. The messages never quote a token.
func (c *config) tokenErrors() []string {
	switch {
	case c.APIReadToken == "":
		return nil
	case c.APIToken == "":
		return []string{"GATE_API_READ_TOKEN is set but GATE_API_TOKEN is empty: the endpoints that change state (check, refund, " +
			"preferences) would be open to anyone while the reports need a token; set GATE_API_TOKEN too"}
	case c.APIReadToken == c.APIToken:
		return []string{"GATE_API_READ_TOKEN equals GATE_API_TOKEN: whoever holds the reading token could also check, refund " +
			"and change preferences; give it a value of its own"}
	}
	return nil
}

// openAPI reports whether the HTTP API listens beyond loopback without a
// token. An address that does not parse is left to the listener, whose
// error names it.
func (c *config) openAPI() bool {
	if c.APIToken != "" {
		return false
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return false
	}
	return !loopbackAddr(c.HTTPAddr)
}

// subjectErrors checks the NATS subjects: each well formed, no wildcard
// where the gate publishes (out, dead), and no two that one message could
// match. Streams may not share subjects (JetStream would refuse GATE_REFUND
// on gate.in, in words that do not name the setting), a stream capturing
// the check subject would answer each check with its publish
// acknowledgement, and forwarding to gate.in would decide every message
// again.
func (c *config) subjectErrors() []string {
	subjects := []struct {
		env, v    string
		publishes bool
	}{
		{"GATE_IN_SUBJECT", c.InSubject, false},
		{"GATE_OUT_SUBJECT", c.OutSubject, true},
		{"GATE_DEAD_SUBJECT", c.DeadSubject, true},
		{"GATE_CHECK_SUBJECT", c.CheckSubject, false},
		{"GATE_REFUND_SUBJECT", c.RefundSubject, false},
	}
	var errs []string
	for i, s := range subjects {
		if err := checkSubject(s.v, !s.publishes); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", s.env, err))
			continue
		}
		for _, o := range subjects[:i] {
			if checkSubject(o.v, !o.publishes) == nil && subjectsOverlap(s.v, o.v) {
				errs = append(errs, fmt.Sprintf("%s (%s) overlaps %s (%s): each needs a subject of its own", s.env, s.v, o.env, o.v))
			}
		}
	}
	return errs
}

// checkSubject refuses what NATS would not take as a subject: an empty
// one, an empty token (gate..in, a leading or trailing dot), white space;
// and a wildcard (* or >) unless wildcards is set, and then one that is
// not a whole token or a > that is not the last.
func checkSubject(s string, wildcards bool) error {
	if s == "" {
		return errors.New("want a NATS subject such as gate.in, got an empty one")
	}
	if strings.ContainsFunc(s, unicode.IsSpace) {
		return fmt.Errorf("want a NATS subject without white space, got %q", s)
	}
	tokens := strings.Split(s, ".")
	for i, t := range tokens {
		switch {
		case t == "":
			return fmt.Errorf("want a NATS subject of dot-separated names such as gate.in, got %q", s)
		case !wildcards && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("want a subject without wildcards (* or >), since the gate publishes to it, got %q", s)
		case t == ">" && i != len(tokens)-1, t != "*" && t != ">" && strings.ContainsAny(t, "*>"):
			return fmt.Errorf("want wildcards as whole names, > only last (gate.in.>), got %q", s)
		}
	}
	return nil
}

// subjectsOverlap reports whether some subject matches both a and b,
// either of which may hold wildcards.
func subjectsOverlap(a, b string) bool {
	ta, tb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range min(len(ta), len(tb)) {
		switch {
		case ta[i] == ">" || tb[i] == ">":
			return true
		case ta[i] != tb[i] && ta[i] != "*" && tb[i] != "*":
			return false
		}
	}
	return len(ta) == len(tb)
}
