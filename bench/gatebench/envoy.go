package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/antifatigue/gate/internal/gate"
)

// The peer of the check benchmark: envoyproxy/ratelimit (Lyft's Go rate
// limit service, gRPC ShouldRateLimit, counters in Redis), built by make
// bench-check from the module of its own in bench/envoyrl, so that the
// gate's go.mod does not take its dependencies. It runs on the same Redis
// as the gate, with a configuration equivalent to the benchmark's rules:
// one descriptor per window the gate checks (the scene's windows, then the
// recipient caps), each keyed by the recipient. Its windows are fixed and
// named by unit, so each of ours maps to the unit that holds it (10m and
// 1h to hour, 24h to day, 7d to week): within a 5-second step the two
// decide alike, unless a unit's boundary falls inside it.

// envoyDomain is the rate limit domain of the benchmark's configuration.
const envoyDomain = "gatebench"

// envoyUnit is the fixed window of envoy's that holds w.
func envoyUnit(w time.Duration) string {
	switch {
	case w <= time.Hour:
		return "hour"
	case w <= 24*time.Hour:
		return "day"
	default:
		return "week"
	}
}

// windowName names a window in a descriptor's value: 1h, 24h, 10m.
func windowName(w time.Duration) string {
	s := strings.TrimSuffix(w.String(), "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// envoyConfig is the YAML configuration equivalent to rs: per scene, one
// descriptor per window (scene, window, recipient); per recipient cap, one
// (cap, recipient).
func envoyConfig(rs *gate.RuleSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", envoyDomain)
	limit := func(indent string, l gate.Limit) {
		fmt.Fprintf(&b, "%s    descriptors:\n%s      - key: recipient\n%s        rate_limit: {unit: %s, requests_per_unit: %d}\n",
			indent, indent, indent, envoyUnit(l.Window), l.Max)
	}
	for _, name := range slices.Sorted(maps.Keys(rs.Scenes)) {
		fmt.Fprintf(&b, "  - key: scene\n    value: %q\n    descriptors:\n", name)
		for _, l := range rs.Scenes[name].Limits {
			fmt.Fprintf(&b, "      - key: window\n        value: %q\n", windowName(l.Window))
			limit("    ", l)
		}
	}
	for _, l := range rs.RecipientCaps {
		fmt.Fprintf(&b, "  - key: cap\n    value: %q\n", windowName(l.Window))
		limit("", l)
	}
	return b.String()
}

// envoyDescriptors are the descriptors of one check, as envoyConfig names
// them: the scene's windows, then the recipient caps; at most n of them.
func envoyDescriptors(rs *gate.RuleSet, scene, recipient string, n int) [][2][2]string {
	var out [][2][2]string
	for _, l := range rs.Scenes[scene].Limits {
		out = append(out, [2][2]string{{"scene", scene}, {"window", windowName(l.Window)}})
	}
	for _, l := range rs.RecipientCaps {
		out = append(out, [2][2]string{{"cap", windowName(l.Window)}, {"", ""}})
	}
	return out[:min(n, len(out))]
}

// rateLimitRequest encodes envoy.service.ratelimit.v3.RateLimitRequest:
// domain (1), descriptors (2: entries (1: key 1, value 2)), hits_addend (3).
// Written by hand, so that the gate's module needs no generated code of
// envoy's.
func rateLimitRequest(rs *gate.RuleSet, scene, recipient string, n int) []byte {
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType)
	req = protowire.AppendString(req, envoyDomain)
	for _, d := range envoyDescriptors(rs, scene, recipient, n) {
		var desc []byte
		for _, kv := range append(d[:], [2]string{"recipient", recipient}) {
			if kv[0] == "" {
				continue
			}
			var entry []byte
			entry = protowire.AppendTag(entry, 1, protowire.BytesType)
			entry = protowire.AppendString(entry, kv[0])
			entry = protowire.AppendTag(entry, 2, protowire.BytesType)
			entry = protowire.AppendString(entry, kv[1])
			desc = protowire.AppendTag(desc, 1, protowire.BytesType)
			desc = protowire.AppendBytes(desc, entry)
		}
		req = protowire.AppendTag(req, 2, protowire.BytesType)
		req = protowire.AppendBytes(req, desc)
	}
	req = protowire.AppendTag(req, 3, protowire.VarintType)
	return protowire.AppendVarint(req, 1)
}

// overallCode reads RateLimitResponse.overall_code (1): 1 OK, 2 OVER_LIMIT.
func overallCode(resp []byte) (uint64, error) {
	for len(resp) > 0 {
		num, typ, n := protowire.ConsumeTag(resp)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		resp = resp[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(resp)
			if n < 0 {
				return 0, protowire.ParseError(n)
			}
			return v, nil
		}
		n = protowire.ConsumeFieldValue(num, typ, resp)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		resp = resp[n:]
	}
	return 0, nil // UNKNOWN: proto3 leaves a zero value out
}

// rawCodec hands gRPC messages through as bytes already encoded.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// envoyServer is a running envoy ratelimit process and a client of it.
type envoyServer struct {
	*proc
	conn *grpc.ClientConn
}

// startEnvoy runs bin on redisAddr (host:port) with rs's configuration
// under dir, its Redis keys starting with prefix, and waits until it
// answers.
func startEnvoy(ctx context.Context, bin, dir, redisAddr, prefix string, rs *gate.RuleSet) (*envoyServer, error) {
	conf := filepath.Join(dir, "envoy", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "gatebench.yaml"), []byte(envoyConfig(rs)), 0o600); err != nil {
		return nil, err
	}
	var ports [3]int
	for i := range ports {
		var err error
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	env := append(os.Environ(),
		"RUNTIME_ROOT="+filepath.Join(dir, "envoy"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "LOG_LEVEL=warn", "CACHE_KEY_PREFIX="+prefix, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"GRPC_HOST=127.0.0.1", fmt.Sprintf("GRPC_PORT=%d", ports[0]),
		"HOST=127.0.0.1", fmt.Sprintf("PORT=%d", ports[1]),
		"DEBUG_HOST=127.0.0.1", fmt.Sprintf("DEBUG_PORT=%d", ports[2]))
	p, err := start("envoy ratelimit", filepath.Join(dir, "envoy.log"), env, bin)
	if err != nil {
		return nil, err
	}
	s := &envoyServer{proc: p}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	if s.conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		s.stop()
		return nil, err
	}
	probe := rateLimitRequest(rs, "alert.disk_full", prefix+"probe", 1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err = s.check(ctx, probe); err == nil {
			return s, nil
		}
		if exited := s.exited(); exited != nil {
			s.stop()
			return nil, exited
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("envoy ratelimit never answered on %s within 30 s: %w (log: %s)", addr, err, s.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check sends one ShouldRateLimit and reports whether it was under the
// limit.
func (s *envoyServer) check(ctx context.Context, req []byte) (bool, error) {
	var resp []byte
	if err := s.conn.Invoke(ctx, shouldRateLimit, &req, &resp, grpc.ForceCodec(rawCodec{})); err != nil {
		return false, err
	}
	code, err := overallCode(resp)
	if err != nil {
		return false, err
	}
	switch code {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	return false, fmt.Errorf("envoy ratelimit answered code %d", code)
}

func (s *envoyServer) stop() {
	if s.conn != nil {
		_ = s.conn.Close()
	}
	_ = s.proc.stop()
}
