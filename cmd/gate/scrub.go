package main

import (
	"context"

	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/antifatigue/gate/internal/redact"
)

// newScrubber masks the secrets of c: those in its addresses
// (GATE_NATS_URL, GATE_REDIS_URL, GATE_DATABASE_URL, GATE_NACOS_ADDR) and
// its secret settings (GATE_API_TOKEN, GATE_API_READ_TOKEN,
// GATE_NACOS_PASSWORD, GATE_EMBEDDED_NATS_PASSWORD,
// GATE_EMBEDDED_NATS_SENDER_PASSWORD). It is nil
// when there is nothing to hide.
func newScrubber(c *config) *redact.Scrubber {
	return redact.New([]string{c.NATSURL, c.RedisURL, c.DatabaseURL, c.NacosAddr},
		[]string{c.APIToken, c.APIReadToken, c.NacosPassword, c.EmbeddedNATSPassword, c.EmbeddedNATSSenderPassword})
}

// scrubChecks wraps readiness checks so that /readyz, which answers
// anyone, shows their errors scrubbed.
func scrubChecks(s *redact.Scrubber, cs map[string]httpapi.Check) map[string]httpapi.Check {
	if s == nil {
		return cs
	}
	out := make(map[string]httpapi.Check, len(cs))
	for name, check := range cs {
		out[name] = func(ctx context.Context) error { return s.Error(check(ctx)) }
	}
	return out
}
