package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
)

// TestScrubberMasksDriverErrors hands each driver an address with a
// secret it cannot use, and checks that the error it quotes the address in
// comes out of the scrubber without the secret: pgx hides a URL's password
// but not a password= parameter, and net/url quotes the whole URL.
func TestScrubberMasksDriverErrors(t *testing.T) {
	const secret = "s3cr3t-Value"
	tests := []struct {
		name string
		c    config
		open func(c *config) error
	}{
		{"postgres password= parameter", config{DatabaseURL: "postgres://gate@127.0.0.1:1/gate?password=" + secret + "&sslmode=nonsense"},
			func(c *config) error {
				_, err := gormstore.Open(context.Background(), gormstore.Options{DatabaseURL: c.DatabaseURL})
				return err
			}},
		{"redis password in a bad URL", config{RedisURL: "redis://:" + secret + "@127.0.0.1:port/0"},
			func(c *config) error { _, err := redis.ParseURL(c.RedisURL); return err }},
		{"nats token in a bad URL", config{NATSURL: "nats://127.0.0.1:4222,nats://" + secret + "@127.0.0.1:port"},
			func(c *config) error { _, err := nats.Connect(c.NATSURL); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.open(&tt.c)
			if err == nil || !strings.Contains(err.Error(), secret) {
				t.Fatalf("the driver's error %v does not quote the secret; the test shows nothing", err)
			}
			got := newScrubber(&tt.c).Error(err)
			if strings.Contains(got.Error(), secret) {
				t.Errorf("scrubbed error %q still holds the secret", got)
			}
			if !errors.Is(got, err) {
				t.Errorf("scrubbed error does not wrap the driver's error")
			}
		})
	}
}

// TestScrubberCoversSecretSettings checks that every setting marked secret,
// and every secret in an address setting, is masked in free text.
func TestScrubberCoversSecretSettings(t *testing.T) {
	env := map[string]string{
		"GATE_NATS_URL":     "nats://natstoken1@h1:4222,nats://u:natspass2@h2:4222",
		"GATE_REDIS_URL":    "redis://:redispass3@cache:6379",
		"GATE_DATABASE_URL": "postgres://gate:pgpass4@db/gate?sslpassword=pgssl5",
	}
	var secrets []string
	for _, s := range settings(&config{}) {
		if s.secret {
			env[s.env] = "value-of-" + s.flag
			secrets = append(secrets, env[s.env])
		}
	}
	if len(secrets) == 0 {
		t.Fatal("no setting is marked secret")
	}
	secrets = append(secrets, "natstoken1", "natspass2", "redispass3", "pgpass4", "pgssl5")
	c, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	scrub := newScrubber(c)
	text := fmt.Sprint(secrets)
	got := scrub.String(text)
	for _, s := range secrets {
		if strings.Contains(got, s) {
			t.Errorf("%q is not masked in free text: %s", s, got)
		}
	}
	if newScrubber(&config{NATSURL: "nats://127.0.0.1:4222"}) != nil {
		t.Error("a scrubber with nothing to hide should be nil, so logging pays nothing")
	}
}

// TestScrubHandler checks the log handler: message, string, error, group
// and other attributes, and attributes added with With, in both formats.
func TestScrubHandler(t *testing.T) {
	const secret = "pa55word-xyz"
	c := &config{DatabaseURL: "postgres://gate:" + secret + "@db/gate", LogLevel: "debug"}
	for _, format := range []string{"text", "json"} {
		c.LogFormat = format
		var buf bytes.Buffer
		log := newLogger(c, &buf, newScrubber(c)).With("with", "w "+secret)
		log.Info("connect to "+c.DatabaseURL,
			"url", c.DatabaseURL,
			"err", fmt.Errorf("dial %s: %w", c.DatabaseURL, errors.New("refused")),
			slog.Group("g", "inner", secret),
			"list", []string{secret},
			"count", 3)
		out := buf.String()
		if strings.Contains(out, secret) {
			t.Errorf("%s log holds the secret: %s", format, out)
		}
		for _, want := range []string{"postgres://gate:xxxxx@db/gate", "refused", "3"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s log lost %q: %s", format, want, out)
			}
		}
	}
}

// TestScrubbedChecks checks that /readyz, which answers without a token,
// cannot show a secret a dependency's error quotes.
func TestScrubbedChecks(t *testing.T) {
	c := &config{RedisURL: "redis://:pa55word-xyz@cache:6379"}
	checks := scrubChecks(newScrubber(c), map[string]httpapi.Check{
		"window_store": func(context.Context) error { return fmt.Errorf("ping %s: %w", c.RedisURL, gate.ErrUnavailable) },
		"nats":         func(context.Context) error { return nil },
	})
	err := checks["window_store"](context.Background())
	if err == nil || strings.Contains(err.Error(), "pa55word-xyz") || !errors.Is(err, gate.ErrUnavailable) {
		t.Errorf("window_store check: got %v, want the error scrubbed and still ErrUnavailable", err)
	}
	if err := checks["nats"](context.Background()); err != nil {
		t.Errorf("a passing check fails once wrapped: %v", err)
	}
}
