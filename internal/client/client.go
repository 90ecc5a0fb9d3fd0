package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
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

// Do sends a request for path with the encoded query (url.Values.Encode)
// and body (nil for none), and decodes the JSON of a 200 answer into out;
// any other status is an error with the answer's error text, and a 401
// says which variable holds the token.
func (c *Client) Do(ctx context.Context, method, path, query string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path+"?"+query, body)
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
