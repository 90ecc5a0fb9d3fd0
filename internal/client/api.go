package client

import (
	"bytes"
	"context"
	"net/http"
	"net/url"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/httpapi"
)

// The API's requests the command line makes, each decoded into the type
// the gate answers with.

// Summary reads GET /v1/reports/summary with the query q (since, until).
func (c *Client) Summary(ctx context.Context, q url.Values) (httpapi.Summary, error) {
	var sum httpapi.Summary
	err := c.Do(ctx, http.MethodGet, "/v1/reports/summary", q.Encode(), nil, &sum)
	return sum, err
}

// Suppressions reads one page of GET /v1/suppressions with the query q
// (since, until, scene, recipient, limit, cursor).
func (c *Client) Suppressions(ctx context.Context, q url.Values) (gate.SuppressionPage, error) {
	var page gate.SuppressionPage
	err := c.Do(ctx, http.MethodGet, "/v1/suppressions", q.Encode(), nil, &page)
	return page, err
}

// Preview asks the gate to replay the decisions since since (a duration
// back from now such as 24h or 7d, or an RFC 3339 time) against the rule
// document doc (POST /v1/rules/preview).
func (c *Client) Preview(ctx context.Context, doc []byte, since string) (*gate.RulePreview, error) {
	var p gate.RulePreview
	if err := c.Do(ctx, http.MethodPost, "/v1/rules/preview", url.Values{"since": {since}}.Encode(), bytes.NewReader(doc), &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Explain reads GET /v1/explain with the query q (recipient, scene,
// priority, tz): why a message would be held back now, and when the next
// one would go out.
func (c *Client) Explain(ctx context.Context, q url.Values) (gate.Explanation, error) {
	var e gate.Explanation
	err := c.Do(ctx, http.MethodGet, "/v1/explain", q.Encode(), nil, &e)
	return e, err
}
