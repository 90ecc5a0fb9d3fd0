package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
)

// Timeouts of one request: a report is one query; a preview replays up to
// GATE_PREVIEW_MAX_DECISIONS rows, so it gets longer.
const (
	ReportTimeout  = 15 * time.Second
	PreviewTimeout = 2 * time.Minute
)

// maxAnswer bounds what is read of one answer.
const maxAnswer = 64 << 20

// Options configure a Client.
type Options struct {
	// Token is the bearer token sent on every request (GATE_API_TOKEN);
	// empty sends none.
	Token string
	// Timeout bounds each request; zero is ReportTimeout.
	Timeout time.Duration
	// Name is what the client's errors say they come from ("report",
	// "preview"); empty is "report".
	Name string
}

// Client asks one running gate over its HTTP API. It is safe for
// concurrent use.
type Client struct {
	base, token, name string
	http              *http.Client
}

// New is a client of the gate at server: a base URL, or a host:port that
// is taken for http://host:port. A trailing slash is dropped.
func New(server string, o Options) *Client {
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	if o.Timeout <= 0 {
		o.Timeout = ReportTimeout
	}
	if o.Name == "" {
		o.Name = "report"
	}
	return &Client{base: strings.TrimRight(server, "/"), token: o.Token, name: o.Name, http: &http.Client{Timeout: o.Timeout}}
}

// Base is the gate's base URL, as errors and messages name it.
func (c *Client) Base() string { return c.base }

// Summary reads GET /v1/reports/summary with the query q (since, until).
func (c *Client) Summary(ctx context.Context, q url.Values) (httpapi.Summary, error) {
	var sum httpapi.Summary
	err := c.Do(ctx, http.MethodGet, "/v1/reports/summary", q, nil, &sum)
	return sum, err
}

// Suppressions reads one page of GET /v1/suppressions with the query q
// (since, until, scene, recipient, limit, cursor).
func (c *Client) Suppressions(ctx context.Context, q url.Values) (gate.SuppressionPage, error) {
	var page gate.SuppressionPage
	err := c.Do(ctx, http.MethodGet, "/v1/suppressions", q, nil, &page)
	return page, err
}

// Preview asks the gate to replay the decisions since since (a duration
// back from now such as 24h or 7d, or an RFC 3339 time) against the rule
// document doc (POST /v1/rules/preview).
func (c *Client) Preview(ctx context.Context, doc []byte, since string) (*gate.RulePreview, error) {
	var p gate.RulePreview
	if err := c.Do(ctx, http.MethodPost, "/v1/rules/preview", url.Values{"since": {since}}, bytes.NewReader(doc), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Do sends a request with body (nil for none) and decodes the JSON of a
// 200 answer into out; any other status is an error with the answer's
// error text, and a 401 says which variable holds the token.
func (c *Client) Do(ctx context.Context, method, path string, q url.Values, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path+"?"+q.Encode(), body)
	if err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: is the gate running at %s? %w", c.name, c.base, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("%s: read %s: %w", c.name, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.Unmarshal(answer, &e)
		if resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("%s: %s: %s (set GATE_API_TOKEN)", c.name, resp.Status, e.Error)
		}
		return fmt.Errorf("%s: %s: %s", c.name, resp.Status, e.Error)
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return fmt.Errorf("%s: decode %s: %w", c.name, path, err)
	}
	return nil
}
